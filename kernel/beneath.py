"""Race-free path resolution and file I/O beneath a directory descriptor (SPEC B-6; issue 15 item 4).

``Beneath(root)`` pins a workspace root as an ``O_PATH`` directory descriptor and resolves
workspace-relative paths against it without ever letting the kernel follow a symlink we have not
checked, so a process that swaps a directory for a symlink (``renameat2(RENAME_EXCHANGE)``) while
we work can make a call fail but never carry it outside the root:

- **fast path** (Linux >= 5.6): one ``openat2`` with ``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
  RESOLVE_NO_MAGICLINKS``. The kernel refuses any symlink and any step above the root, atomically,
  so whatever it opens is the lexical path inside the root. It is used when the path has no ``..``;
  any refusal (a symlink on the way, a missing directory, a rename race) falls back to the walk.
- **walk** (every kernel; and paths with symlinks or ``..``): one component at a time from the root
  descriptor, each directory opened with ``O_PATH | O_DIRECTORY | O_NOFOLLOW`` relative to the one
  before. A symlink is read with ``readlinkat`` and followed by us: a relative target is walked from
  the directory that holds it, an absolute one must lie inside the root and is walked from the root
  descriptor; ``..`` pops back to the directory descriptor we came from (never ``openat("..")``).
  A directory swapped for a symlink between two steps makes the ``O_NOFOLLOW`` open fail, and the
  walk then reads that symlink as a symlink: it is checked like any other.

The result of a resolution is a ``Located``: the verified descriptor of the directory holding the
final component, that component's name, and the physical workspace-relative path. Every later
operation (open, create, temp file, rename, unlink, mkdir) is done *relative to that descriptor*
with the final name, so nothing is resolved by path string twice. Final components are opened with
``O_NOFOLLOW | O_NONBLOCK | O_NOCTTY`` and checked with ``fstat``: only regular files are ever read,
and a FIFO, socket or device never blocks a call.

Limits: the directory a descriptor names can still be renamed elsewhere *inside* the root while we
hold it (then the write lands where the directory went, still inside); nothing here defends against
a process that can rename directories out of the root (the bash sandbox cannot: its only writable
mount is the workspace, and ``rename`` across mounts fails with ``EXDEV``).
"""

from __future__ import annotations

import ctypes
import errno
import os
import secrets
import stat as stat_mod
import threading
from collections import deque
from dataclasses import dataclass

from kernel.errors import InvalidArgument, NotFound, PathOutsideWorkspace, PermissionDenied, ToolError

MAX_SYMLINK_FOLLOWS = 40
INTERNAL_DIR = ".a3s"

O_PATH_DIR = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC
O_WALK_DIR = O_PATH_DIR | os.O_NOFOLLOW
# Reading a final component: never follow it, never block on a FIFO, never take a terminal.
O_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
O_LIST_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
RESOLVE_STRICT = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS
_SYS_OPENAT2 = {"x86_64": 437, "aarch64": 437, "riscv64": 437, "ppc64le": 437, "s390x": 437}
# openat2 refusals that mean "walk it instead" (a symlink, a missing or non-directory component,
# a step outside, a concurrent rename the kernel noticed).
_FALLBACK_ERRNOS = frozenset({errno.ELOOP, errno.ENOENT, errno.ENOTDIR, errno.EXDEV, errno.EAGAIN})


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


class _Openat2:
    """``openat2(2)`` through libc's ``syscall``; ``available`` is False where the kernel lacks it."""

    def __init__(self) -> None:
        self.available = False
        self._lock = threading.Lock()
        self._hows: dict[tuple[int, int], _OpenHow] = {}
        number = _SYS_OPENAT2.get(os.uname().machine)
        if number is None or not hasattr(os, "O_PATH"):
            return
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            call = libc.syscall
        except (OSError, AttributeError):
            return
        call.restype = ctypes.c_long
        self._call = call
        self._number = ctypes.c_long(number)
        try:
            os.close(self.open(os.open("/", O_PATH_DIR), ".", O_PATH_DIR, RESOLVE_STRICT, probe=True))
            self.available = True
        except OSError:
            self.available = False

    def open(self, dir_fd: int, path: str, flags: int, resolve: int, *, probe: bool = False) -> int:
        how = self._hows.get((flags, resolve))
        if how is None:
            with self._lock:
                how = self._hows.setdefault((flags, resolve), _OpenHow(flags, 0, resolve))
        try:
            fd = self._call(
                self._number,
                ctypes.c_int(dir_fd),
                ctypes.c_char_p(os.fsencode(path)),
                ctypes.byref(how),
                ctypes.c_size_t(ctypes.sizeof(how)),
            )
        finally:
            if probe:
                os.close(dir_fd)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), path)
        return int(fd)


OPENAT2 = _Openat2()


class Fd:
    """An owned (or borrowed) descriptor; closed once by ``close``, ``with`` or garbage collection."""

    __slots__ = ("_owned", "fd")

    def __init__(self, fd: int, *, owned: bool = True) -> None:
        self.fd = fd
        self._owned = owned

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0 and self._owned:
            os.close(fd)

    def __del__(self) -> None:
        try:
            self.close()
        except OSError:
            pass

    def __enter__(self) -> Fd:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(slots=True)
class Located:
    """Where a workspace path physically leads, pinned by a verified directory descriptor.

    ``parent`` holds the final component ``name`` (``name == ""``: the path is the root itself and
    ``parent`` is the root). ``missing`` are directories between ``parent`` and ``name`` that do not
    exist yet (a file about to be created in new directories); ``rel`` is the physical
    workspace-relative path, missing parts included. ``lstat`` is the final component's ``lstat``
    as seen during resolution (None when it did not exist, or ``missing`` is non-empty).
    """

    parent: Fd
    name: str
    rel: str
    missing: tuple[str, ...] = ()
    lstat: os.stat_result | None = None

    def close(self) -> None:
        self.parent.close()

    def __enter__(self) -> Located:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def os_error(what: str, exc: OSError, path: str) -> ToolError:
    """A typed error for an OS failure met while resolving or opening ``path``."""
    code = exc.errno
    if code == errno.ENAMETOOLONG:
        return InvalidArgument(f"{what}: a component of {path!r} is too long")
    if code in (errno.EACCES, errno.EPERM):
        return PermissionDenied(f"{what}: permission denied: {path}", reason="os", path=path)
    if code == errno.ENOENT:
        return NotFound(f"{what}: no such file or directory: {path}", path=path)
    if code == errno.ELOOP:
        return PathOutsideWorkspace(f"{what}: symlink loop while resolving {path}", path=path)
    if code in (errno.ENXIO, errno.ENODEV, errno.EOPNOTSUPP):
        return InvalidArgument(f"{path} is not a regular file (devices, FIFOs and sockets are refused)")
    return ToolError(f"{what}: {exc.strerror or exc}", errno=code, path=path)


def names_directory(path: str) -> bool:
    """Does ``path`` name a directory by its spelling? POSIX: a final component followed by ``/``
    (or a final ``.``/``..``) must be a directory — ``file/`` is ``ENOTDIR``, never the file."""
    raw = path.split("/")
    return raw[-1] in ("", ".", "..") and any(p not in ("", ".") for p in raw)


def not_a_directory(path: str) -> NotFound:
    """The typed error for ``file/`` (what ``open`` answers with ``ENOTDIR``)."""
    return NotFound(
        f"Not a directory: {path} (a path ending in '/' names a directory, and this is a file)", path=path
    )


class Beneath:
    """Resolver and opener for paths beneath one pinned root directory (see the module docstring)."""

    def __init__(self, root: str) -> None:
        self.root = root  # the real path, as the host named it (already resolved by the caller)
        self._root_fd = Fd(os.open(root, O_PATH_DIR))
        self._prefix = root.rstrip("/") + "/"

    @property
    def root_fd(self) -> int:
        return self._root_fd.fd

    def close(self) -> None:
        self._root_fd.close()

    # -- resolution ---------------------------------------------------------------------------

    def locate(self, path: str, *, follow_last: bool = True) -> Located:
        """Resolve ``path`` (raw components; validated by the caller) to a ``Located``.

        A path spelled as a directory (``names_directory``: ``x/``, ``x/.``) follows a final
        symlink, as ``open`` would, and must end at a directory: an existing non-directory is
        ``not_a_directory`` (NotFound), never the file itself; a missing one is left to the caller.
        """
        must_dir = names_directory(path)
        loc = self._locate(path, follow_last=follow_last or must_dir)
        if must_dir and loc.name and loc.lstat is not None and not stat_mod.S_ISDIR(loc.lstat.st_mode):
            loc.close()
            raise not_a_directory(path)
        return loc

    def _locate(self, path: str, *, follow_last: bool) -> Located:
        parts = [p for p in path.split("/") if p and p != "."]
        if not parts:
            return Located(Fd(self.root_fd, owned=False), "", "", (), None)
        if OPENAT2.available and ".." not in parts:
            found = self._locate_fast(parts, follow_last)
            if found is not None:
                return found
        return self._walk(path, parts, follow_last)

    def _locate_fast(self, parts: list[str], follow_last: bool) -> Located | None:
        if parts[0] == INTERNAL_DIR:
            raise PathOutsideWorkspace(f"{INTERNAL_DIR}/ is internal to a3s-fleet", path="/".join(parts))
        leaf = parts[-1]
        if len(parts) == 1:
            parent = Fd(self.root_fd, owned=False)
        else:
            try:
                parent = Fd(OPENAT2.open(self.root_fd, "/".join(parts[:-1]), O_PATH_DIR, RESOLVE_STRICT))
            except OSError as exc:
                if exc.errno in _FALLBACK_ERRNOS:
                    return None
                raise os_error("cannot resolve", exc, "/".join(parts)) from None
        try:
            st: os.stat_result | None = os.stat(leaf, dir_fd=parent.fd, follow_symlinks=False)
        except FileNotFoundError:
            st = None
        except OSError as exc:
            parent.close()
            raise os_error("cannot resolve", exc, "/".join(parts)) from None
        if st is not None and follow_last and stat_mod.S_ISLNK(st.st_mode):
            parent.close()
            return None
        return Located(parent, leaf, "/".join(parts), (), st)

    def _walk(self, path: str, parts: list[str], follow_last: bool) -> Located:
        root = Fd(self.root_fd, owned=False)
        stack: list[Fd] = [root]
        names: list[str] = []
        missing: list[str] = []
        pending = deque(parts)
        follows = 0
        leaf: str | None = None
        leaf_st: os.stat_result | None = None
        try:
            while pending:
                part = pending.popleft()
                if part == "..":
                    if missing:
                        missing.pop()
                    elif len(stack) == 1:
                        raise PathOutsideWorkspace(f"path escapes the workspace: {path}", path=path)
                    else:
                        stack.pop().close()
                        names.pop()
                    continue
                if missing:
                    missing.append(part)
                    continue
                last = not pending
                cur = stack[-1].fd
                if not last:
                    try:
                        stack.append(Fd(os.open(part, O_WALK_DIR, dir_fd=cur)))
                        names.append(part)
                        continue
                    except FileNotFoundError:
                        missing.append(part)
                        continue
                    except OSError as exc:
                        if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
                            raise os_error("cannot resolve", exc, path) from None
                try:
                    st = os.stat(part, dir_fd=cur, follow_symlinks=False)
                except FileNotFoundError:
                    if last:
                        leaf = part
                        break
                    missing.append(part)
                    continue
                except OSError as exc:
                    raise os_error("cannot resolve", exc, path) from None
                if stat_mod.S_ISLNK(st.st_mode) and (follow_last or not last):
                    follows += 1
                    if follows > MAX_SYMLINK_FOLLOWS:
                        raise PathOutsideWorkspace(f"symlink loop while resolving {path}", path=path)
                    try:
                        target = os.readlink(part, dir_fd=cur)
                    except OSError:
                        pending.appendleft(part)  # replaced meanwhile: look at it again
                        continue
                    if target.startswith("/"):
                        inner = self._inside_root(target)
                        if inner is None:
                            shown = "/".join([*names, part])
                            raise PathOutsideWorkspace(
                                f"symlink {shown} points outside the workspace", path=path
                            )
                        for fd in stack[1:]:
                            fd.close()
                        del stack[1:]
                        names.clear()
                        pending.extendleft(reversed(inner))
                    else:
                        pending.extendleft(reversed([p for p in target.split("/") if p and p != "."]))
                    continue
                if last:
                    leaf, leaf_st = part, st
                    break
                if stat_mod.S_ISDIR(st.st_mode):
                    # A directory appeared after the O_NOFOLLOW open failed: look again (bounded).
                    follows += 1
                    if follows > MAX_SYMLINK_FOLLOWS:
                        raise PathOutsideWorkspace(f"{path} keeps changing while resolved", path=path)
                    pending.appendleft(part)
                    continue
                raise NotFound(f"not a directory on the way to {path}", path=path)
            if missing:
                leaf, leaf_st = missing.pop(), None
            if leaf is None:
                # The path ends on a directory reached through '..' or a symlink: name it from its parent.
                if len(stack) == 1:
                    return Located(Fd(self.root_fd, owned=False), "", "", (), None)
                top = stack.pop()
                top.close()
                leaf = names.pop()
                try:
                    leaf_st = os.stat(leaf, dir_fd=stack[-1].fd, follow_symlinks=False)
                except OSError as exc:
                    raise os_error("cannot resolve", exc, path) from None
            rel = "/".join([*names, *missing, leaf])
            if rel.split("/", 1)[0] == INTERNAL_DIR:
                raise PathOutsideWorkspace(f"{INTERNAL_DIR}/ is internal to a3s-fleet: {path}", path=path)
            parent = stack.pop()
            return Located(parent, leaf, rel, tuple(missing), leaf_st)
        finally:
            for fd in stack:
                fd.close()

    def _inside_root(self, target: str) -> list[str] | None:
        """An absolute symlink target's components below the root, or None when it lies outside."""
        norm = os.path.normpath(target)
        if norm == self.root:
            return []
        if not norm.startswith(self._prefix):
            return None
        return [p for p in norm[len(self._prefix) :].split("/") if p and p != "."]

    # -- opening --------------------------------------------------------------------------------

    def open_strict(self, path: str, flags: int) -> int:
        """Open ``path`` beneath the root refusing every symlink on the way (``OSError`` otherwise).

        For paths a walk found without following symlinks (search, directory walks): ``openat2``
        with ``RESOLVE_NO_SYMLINKS``, or one ``O_NOFOLLOW`` open per component where it is missing.
        """
        parts = [p for p in path.split("/") if p and p != "."]
        if ".." in parts:
            raise InvalidArgument(f"'..' is not allowed here: {path}")
        if not parts:
            return os.open(".", flags, dir_fd=self.root_fd)
        if parts[0] == INTERNAL_DIR:
            raise PathOutsideWorkspace(f"{INTERNAL_DIR}/ is internal to a3s-fleet: {path}", path=path)
        if OPENAT2.available:
            return OPENAT2.open(self.root_fd, "/".join(parts), flags, RESOLVE_STRICT)
        cur = Fd(self.root_fd, owned=False)
        try:
            for part in parts[:-1]:
                nxt = Fd(os.open(part, O_WALK_DIR, dir_fd=cur.fd))
                cur.close()
                cur = nxt
            return os.open(parts[-1], flags | os.O_NOFOLLOW, dir_fd=cur.fd)
        finally:
            cur.close()

    def lstat_strict(self, path: str) -> os.stat_result:
        """``lstat`` of ``path`` reached without following any symlink (``OSError`` otherwise)."""
        fd = self.open_strict(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            return os.fstat(fd)
        finally:
            os.close(fd)

    def open_regular(self, path: str, *, follow_symlinks: bool = True) -> tuple[int, os.stat_result]:
        """A read-only descriptor of the regular file at ``path`` and its ``fstat``.

        ``follow_symlinks=False`` refuses a symlink at any component (what a walk that never
        followed one found). Directories, FIFOs, sockets and devices are refused without blocking.
        """
        parts = [p for p in path.split("/") if p and p != "."]
        if not parts:
            raise InvalidArgument(f"{path or '.'} is a directory")
        if names_directory(path):  # never a regular file: answer what it is instead
            with self.locate(path) as loc:  # a file there raises not_a_directory
                if loc.missing or loc.lstat is None:
                    raise NotFound(f"File not found: {path}", path=path)
            raise InvalidArgument(f"{path} is a directory")
        fd = -1
        if not follow_symlinks:
            try:
                fd = self.open_strict(path, O_READ)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise InvalidArgument(f"{path} is not a regular file reached without symlinks") from None
                raise os_error("cannot open", exc, path) from None
        elif OPENAT2.available and ".." not in parts:
            try:
                fd = OPENAT2.open(self.root_fd, "/".join(parts), O_READ, RESOLVE_STRICT)
            except OSError as exc:
                if exc.errno not in _FALLBACK_ERRNOS:
                    raise os_error("cannot open", exc, path) from None
        if fd < 0:
            fd = self._open_located(path)
        try:
            st = os.fstat(fd)
        except OSError:
            os.close(fd)
            raise
        if not stat_mod.S_ISREG(st.st_mode):
            os.close(fd)
            if stat_mod.S_ISDIR(st.st_mode):
                raise InvalidArgument(f"{path} is a directory")
            raise InvalidArgument(f"{path} is not a regular file (devices, FIFOs and sockets are refused)")
        return fd, st

    def _open_located(self, path: str) -> int:
        with self.locate(path) as loc:
            if loc.missing or (loc.name and loc.lstat is None):
                raise NotFound(f"File not found: {path}", path=path)
            if not loc.name:
                raise InvalidArgument(f"{path or '.'} is a directory")
            try:
                return os.open(loc.name, O_READ, dir_fd=loc.parent.fd)
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise InvalidArgument(f"{path} changed into a symlink while it was opened") from None
                raise os_error("cannot open", exc, path) from None

    def open_directory(self, path: str) -> tuple[Fd, str]:
        """A readable descriptor of the directory at ``path`` (symlinks inside followed) and its
        physical workspace-relative path, for ``scandir``."""
        parts = [p for p in path.split("/") if p and p != "."]
        if not parts:
            return Fd(os.open(".", O_LIST_DIR, dir_fd=self.root_fd)), ""
        if OPENAT2.available and ".." not in parts:
            try:
                return Fd(self.open_strict(path, O_LIST_DIR)), "/".join(parts)
            except OSError as exc:
                if exc.errno not in _FALLBACK_ERRNOS:
                    raise os_error("cannot list", exc, path) from None
        with self._locate(path, follow_last=True) as loc:  # 'file/': the "not a directory" below
            if loc.missing or (loc.name and loc.lstat is None):
                raise NotFound(f"Directory not found: {path or '.'}", path=path)
            try:
                return Fd(os.open(loc.name or ".", O_LIST_DIR, dir_fd=loc.parent.fd)), loc.rel
            except NotADirectoryError:
                raise InvalidArgument(f"{path} is not a directory") from None
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise InvalidArgument(f"{path} changed into a symlink while it was opened") from None
                raise os_error("cannot list", exc, path) from None


# -- operations relative to a verified directory descriptor ----------------------------------------


def open_subdir(dir_fd: int, name: str, *, create: bool = False, mode: int = 0o755) -> Fd:
    """The directory ``name`` inside ``dir_fd``, never through a symlink; created when asked."""
    if create:
        try:
            os.mkdir(name, mode, dir_fd=dir_fd)
        except FileExistsError:
            pass
    return Fd(os.open(name, O_WALK_DIR, dir_fd=dir_fd))


def temp_name(stem: str, suffix: str) -> str:
    """``stem`` + 12 random hex digits + ``suffix``, short enough for any file system's name limit."""
    if len(os.fsencode(stem)) > 160:
        stem = stem[:40]
    return f"{stem}{secrets.token_hex(6)}{suffix}"


def create_temp(dir_fd: int, stem: str, suffix: str = "", mode: int = 0o600) -> tuple[int, str]:
    """A new, exclusively created file in ``dir_fd``: ``(descriptor open for writing, its name)``."""
    for _ in range(100):
        name = temp_name(stem, suffix)
        try:
            fd = os.open(
                name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd
            )
        except FileExistsError:
            continue
        return fd, name
    raise FileExistsError(errno.EEXIST, "no free temporary file name", stem)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def fsync_dir(dir_fd: int) -> None:
    """Flush a directory's entries (best effort: some filesystems refuse directory fsync)."""
    try:
        fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_at(dir_fd: int, name: str, data: bytes, *, mode: int = 0o644, prefix: str = ".tmp-") -> None:
    """Replace ``name`` in ``dir_fd`` with ``data``: temp file, fsync, rename, directory fsync."""
    fd, tmp = create_temp(dir_fd, prefix, "", mode)
    try:
        try:
            write_all(fd, data)
            os.fchmod(fd, mode)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except FileNotFoundError:
            pass
        raise
    fsync_dir(dir_fd)


def read_regular_at(dir_fd: int, name: str, max_bytes: int) -> bytes | None:
    """The bytes of regular file ``name`` in ``dir_fd`` (None when absent); ``ValueError`` over ``max_bytes``."""
    try:
        fd = os.open(name, O_READ, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    try:
        st = os.fstat(fd)
        if not stat_mod.S_ISREG(st.st_mode):
            raise ValueError(f"{name} is not a regular file")
        if st.st_size > max_bytes:
            raise ValueError(f"{name} is larger than {max_bytes} bytes")
        parts: list[bytes] = []
        total = 0
        while chunk := os.read(fd, 1 << 20):
            total += len(chunk)
            if total > max_bytes:
                raise ValueError(f"{name} is larger than {max_bytes} bytes")
            parts.append(chunk)
        return b"".join(parts)
    finally:
        os.close(fd)
