"""Atomic, compare-and-swap file replacement for ``write``/``edit``/``patch`` (SPEC B-3, B-5, B-6).

Invariants:

- Every path is located by ``LocalWorkspace.locate`` (``target``): the result pins the verified
  descriptor of the file's parent directory (``kernel.beneath``), and *every* later step — reading
  the old bytes, creating missing parent directories, the temp file, the CAS re-read, the backup
  link, the rename, the unlink, the directory fsync — happens relative to that descriptor with the
  final name, never by path string. A process that swaps a directory for a symlink meanwhile makes
  the call fail or lands it where the directory now is inside the workspace, never outside.
- Missing parent directories are created one at a time with ``mkdirat`` and reopened with
  ``O_NOFOLLOW``; a symlink swapped in between fails the write.
- Governed origins (``agent``, ``governed_nested``, governed host-direct) may not create, change or
  delete anything inside a ``.git`` directory or file at any depth, under any spelling that leads
  there (``a/../.git``, a symlink to ``.git``, case or trailing-dot variants, ``git~1``), nor the
  git directory a root ``.git`` symlink or ``gitdir:`` file points to inside the workspace:
  ``permission_denied`` (reason ``protected_path``). ``.a3s/`` is refused to every origin by the
  resolver (``path_outside_workspace``).
- New bytes go to a temp file *beside* the target (same directory), are fsynced, get the old
  file's permission bits (new files: ``NEW_FILE_MODE`` exactly, independent of the process umask,
  so results do not depend on how a worker was started), then replace the target with
  ``renameat``; the parent directory is fsynced after. Readers see the old or the new file, never
  a mix. Hard links to the old file keep the old content (rename makes a new inode).
- Compare-and-swap: each change carries the ``FileState`` it was computed from. Right before the
  renames the current size, mtime and SHA-256 are checked again; any difference raises
  ``VersionConflict`` and nothing is renamed. (A writer that slips in between that check and the
  rename — microseconds — cannot be detected without cooperative locking.)
- Multi-file commits (``patch``) are all-or-nothing against failures in this process: every temp
  file is written and every CAS check passes before the first rename; each replaced or deleted
  file is first hard-linked (or copied) to a backup beside it, and if a later rename fails, the
  done ones are rolled back from the backups in reverse order, created files and directories are
  removed. A crash of the whole process midway can leave some files renamed and ``.a3s-bak``
  backups behind; that is the documented limit.
- Only regular files are read or replaced: a directory, FIFO, socket or device at the path is
  refused (opened ``O_NONBLOCK``, so a FIFO never blocks).
- ``_before_commit`` is a test seam: when set, it is called with the target paths after the temp
  files are written and before the CAS check, so a test can modify a file at exactly that point.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import stat as stat_mod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import overload

from kernel.beneath import (
    O_READ,
    O_WALK_DIR,
    Fd,
    Located,
    create_temp,
    fsync_dir,
    names_directory,
    temp_name,
    write_all,
)
from kernel.context import ToolContext
from kernel.errors import (
    Cancelled,
    InvalidArgument,
    NotFound,
    PathOutsideWorkspace,
    PermissionDenied,
    ToolError,
    Unsupported,
    VersionConflict,
)
from kernel.workspace import LocalWorkspace, normalize_relative

NEW_FILE_MODE = 0o644
TEMP_SUFFIX = ".a3s-tmp"
BACKUP_SUFFIX = ".a3s-bak"
GITDIR_PREFIX = "gitdir:"
MAX_GITFILE_BYTES = 4096
# write/edit/patch hold the old bytes, the text and the new bytes: a sparse 20 GiB file a sandboxed
# command made would otherwise be read whole into the host process.
MAX_FILE_BYTES = 64 * 1024 * 1024

# Test seam (see module docstring): ``Callable[[list[Path]], None] | None``.
_before_commit: Callable[[list[Path]], None] | None = None


@dataclass(slots=True)
class Target:
    rel: str  # clean workspace-relative path, as shown to the model
    workspace: LocalWorkspace
    loc: Located  # the verified parent directory, the final name, missing directories

    @property
    def path(self) -> Path:
        """The physical location (for messages and the test seam; never opened by this string)."""
        return self.workspace.root / self.loc.rel

    @property
    def name(self) -> str:
        return self.loc.name


@dataclass(frozen=True, slots=True)
class FileState:
    """What a tool read: ``exists=False`` means the path was free."""

    exists: bool
    data: bytes = b""
    sha256: str | None = None
    size: int = 0
    mtime_ns: int = 0
    mode: int = 0
    uid: int = -1
    gid: int = -1


@dataclass(slots=True)
class Change:
    """Replace ``target`` with ``data`` (``None`` deletes it), if it still matches ``expected``."""

    target: Target
    expected: FileState
    data: bytes | None
    mode: int | None = None  # for new files; existing files keep their mode


@dataclass(slots=True)
class _Staged:
    change: Change
    parent: Fd | None = None  # the directory the file lives in (created ones included)
    temp: str | None = None
    backup: str | None = None
    done: bool = False
    created_dirs: list[tuple[Fd, str]] = field(default_factory=list)

    @property
    def dir_fd(self) -> int:
        return (self.parent or self.change.target.loc.parent).fd


def local_workspace(ctx: ToolContext) -> LocalWorkspace:
    ws = ctx.workspace
    if not isinstance(ws, LocalWorkspace):
        raise Unsupported(f"{ctx.tool_name} needs a local writable workspace")
    if "write" not in ws.capabilities:
        raise Unsupported(f"{ctx.tool_name}: the workspace is read-only")
    return ws


def require_session(ctx: ToolContext) -> None:
    """Writes are claimed per session (REFERENCE §4.5): no session id, no write."""
    if not ctx.session_id or not ctx.session_id.strip():
        raise InvalidArgument("writes need a non-blank session id; nothing was written")


def target(ws: LocalWorkspace, file_path: str, *, protect: bool = False) -> Target:
    """Locate ``file_path`` for a write; ``protect`` (governed origins) refuses git metadata."""
    rel = normalize_relative(file_path)
    if not rel:
        raise InvalidArgument("file_path names the workspace root, not a file")
    loc = ws.locate(file_path)  # an existing file spelled 'file/' is not_a_directory, as for read
    if names_directory(file_path):
        loc.close()
        raise InvalidArgument(f"file_path {file_path} ends with '/': that names a directory, not a file")
    if ".." in file_path.split("/"):
        rel = loc.rel  # '..' is physical: show where the path really leads
    if not loc.name:
        loc.close()
        raise InvalidArgument("file_path names the workspace root, not a file")
    if protect:
        try:
            check_not_git_metadata(ws, rel, loc.rel)
        except ToolError:
            loc.close()
            raise
    return Target(rel=rel, workspace=ws, loc=loc)


def is_git_name(part: str) -> bool:
    """``.git`` under any spelling a file system may treat as it (case, trailing dots/spaces, 8.3)."""
    folded = part.rstrip(". ").lower()
    return folded == ".git" or folded == "git~1"


def check_not_git_metadata(ws: LocalWorkspace, rel: str, physical: str) -> None:
    """Refuse (``permission_denied``) a model-side change inside git metadata (module docstring)."""
    for shown in (rel, physical):
        if any(is_git_name(part) for part in shown.split("/")):
            raise _protected(rel)
    for git_dir in _redirected_git_dirs(ws):
        if physical == git_dir or physical.startswith(git_dir + "/"):
            raise _protected(rel)


def _protected(rel: str) -> PermissionDenied:
    return PermissionDenied(
        f"{rel} is git metadata (.git): model-side write, edit and patch may not create, change or "
        "delete it; use the git tool for repository operations",
        reason="protected_path",
        path=rel,
    )


def _redirected_git_dirs(ws: LocalWorkspace) -> list[str]:
    """Workspace-relative git directories the root ``.git`` symlink (or the link recorded while
    sandboxed commands run) or ``gitdir:`` file points to."""
    try:
        st = os.stat(".git", dir_fd=ws.beneath.root_fd, follow_symlinks=False)
    except OSError:
        return []
    found: list[str] = []
    try:
        if stat_mod.S_ISLNK(st.st_mode):
            with ws.locate(".git") as loc:
                found.append(loc.rel)
        elif stat_mod.S_ISREG(st.st_mode):
            with ws.open_file(".git") as fh:
                head = fh.read(MAX_GITFILE_BYTES).decode("utf-8", "replace")
            if head.startswith(GITDIR_PREFIX):
                target_path = head[len(GITDIR_PREFIX) :].strip()
                inner = _inside_root(ws, target_path)
                if inner is not None:
                    found.append(inner)
    except ToolError:
        pass  # points outside (unreachable by file tools anyway) or unreadable
    # A sandboxed command may have removed the root `.git` link for its lifetime: the link it
    # will be restored to still names the git directory (tools/bash/rootgit.py).
    from tools.bash.rootgit import recorded_link

    link = recorded_link(str(ws.root))
    inner = _inside_root(ws, link) if link is not None else None
    if inner is not None and inner not in found:
        found.append(inner)
    return found


def _inside_root(ws: LocalWorkspace, target_path: str) -> str | None:
    full = os.path.normpath(os.path.join(str(ws.root), target_path))
    root = str(ws.root)
    if full == root or not full.startswith(root.rstrip("/") + "/"):
        return None
    try:
        with ws.locate(full[len(root) + 1 :]) as loc:
            return loc.rel
    except ToolError:
        return None


def exists(t: Target) -> bool:
    """Whether anything (file, directory, symlink, device) is at ``t``: one stat, nothing read."""
    if t.loc.missing:
        return False
    try:
        os.stat(t.name, dir_fd=t.loc.parent.fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise _os_error(f"cannot stat {t.rel}", exc) from exc
    return True


def read_state(t: Target, *, limit: int = MAX_FILE_BYTES) -> FileState:
    """The file as it is now (regular files only; directories and devices are refused).

    ``limit`` (at most ``MAX_FILE_BYTES``): what the caller may still read — a multi-file call
    reading against a total passes what is left of it."""
    if t.loc.missing:
        return FileState(exists=False)
    try:
        fd = os.open(t.name, O_READ, dir_fd=t.loc.parent.fd)
    except FileNotFoundError:
        return FileState(exists=False)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise InvalidArgument(f"{t.rel} changed into a symlink while it was opened; retry") from None
        raise _os_error(f"cannot read {t.rel}", exc) from exc
    try:
        st = os.fstat(fd)
        if stat_mod.S_ISDIR(st.st_mode):
            raise InvalidArgument(f"{t.rel} is a directory")
        if not stat_mod.S_ISREG(st.st_mode):
            raise InvalidArgument(f"{t.rel} is not a regular file")
        if st.st_size > limit:
            raise _too_big(t, st.st_size, limit)  # before reading a byte
        data = _read_all(fd, limit=limit)
        if data is None:  # it grew while we read
            raise _too_big(t, limit + 1, limit)
    except OSError as exc:
        raise _os_error(f"cannot read {t.rel}", exc) from exc
    finally:
        os.close(fd)
    return FileState(
        exists=True,
        data=data,
        sha256=hashlib.sha256(data).hexdigest(),
        size=len(data),
        mtime_ns=st.st_mtime_ns,
        mode=stat_mod.S_IMODE(st.st_mode),
        uid=st.st_uid,
        gid=st.st_gid,
    )


def require_existing(t: Target, *, limit: int = MAX_FILE_BYTES) -> FileState:
    state = read_state(t, limit=limit)
    if not state.exists:
        raise NotFound(f"File not found: {t.rel}", path=t.rel)
    return state


def commit(changes: list[Change], *, cancelled: Callable[[], bool] | None = None) -> None:
    """Apply every change or none (see the module docstring for the exact guarantee)."""
    physical = [c.target.loc.rel for c in changes]
    if len(set(physical)) != len(physical):
        raise InvalidArgument("the same file is changed twice in one commit")
    staged = [_Staged(c) for c in changes]
    try:
        for s in staged:
            if s.change.data is not None:
                _stage(s)
        if _before_commit is not None:
            _before_commit([c.target.path for c in changes])
        if cancelled is not None and cancelled():
            raise Cancelled("the write was cancelled before any file changed", op="write")
        for s in staged:
            _check_unchanged(s)
        use_backups = len(staged) > 1
        for s in staged:
            _swap(s, use_backups)
    except BaseException:
        _rollback(staged)
        _close(staged)
        raise
    synced: set[tuple[int, int]] = set()
    for s in staged:
        try:
            st = os.fstat(s.dir_fd)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) not in synced:
            synced.add((st.st_dev, st.st_ino))
            fsync_dir(s.dir_fd)
    for s in staged:
        if s.backup is not None:
            with contextlib.suppress(OSError):
                os.unlink(s.backup, dir_fd=s.dir_fd)
    _close(staged)


def _close(staged: list[_Staged]) -> None:
    for s in staged:
        if s.parent is not None:
            s.parent.close()
        for fd, _ in s.created_dirs:
            fd.close()


def _stage(s: _Staged) -> None:
    change = s.change
    t = change.target
    assert change.data is not None
    _make_parents(s)
    try:
        fd, name = create_temp(s.dir_fd, f".{t.name}.", TEMP_SUFFIX)
    except OSError as exc:
        raise _os_error(f"cannot create a temp file beside {t.rel}", exc) from exc
    s.temp = name
    try:
        try:
            write_all(fd, change.data)
            mode = change.expected.mode if change.expected.exists else (change.mode or NEW_FILE_MODE)
            os.fchmod(fd, mode)
            if change.expected.exists and os.geteuid() == 0:
                with contextlib.suppress(OSError):
                    os.fchown(fd, change.expected.uid, change.expected.gid)
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise _os_error(f"cannot write {t.rel}", exc) from exc


def _make_parents(s: _Staged) -> None:
    """Create the missing parent directories below the verified parent, never through a symlink."""
    t = s.change.target
    if not t.loc.missing:
        return
    current = Fd(t.loc.parent.fd, owned=False)
    for name in t.loc.missing:
        created = False
        try:
            os.mkdir(name, dir_fd=current.fd)
            created = True
        except FileExistsError:
            pass
        except OSError as exc:
            raise _os_error(f"cannot create the directories for {t.rel}", exc) from exc
        try:
            nxt = Fd(os.open(name, O_WALK_DIR, dir_fd=current.fd))
        except OSError as exc:
            if exc.errno in (errno.ENOTDIR, errno.ELOOP):
                if created:
                    raise PathOutsideWorkspace(
                        f"{t.rel} moved while its directories were created", path=t.rel
                    ) from None
                raise InvalidArgument(f"a parent of {t.rel} is a file, not a directory") from None
            raise _os_error(f"cannot create the directories for {t.rel}", exc) from exc
        if created:
            s.created_dirs.append((Fd(os.dup(current.fd)), name))
        current.close()
        current = nxt
    s.parent = current


def _check_unchanged(s: _Staged) -> None:
    t, exp = s.change.target, s.change.expected
    try:
        fd = os.open(t.name, O_READ, dir_fd=s.dir_fd)
    except FileNotFoundError:
        if exp.exists:
            raise _conflict(t, exp, None) from None
        return
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _conflict(t, exp, "(replaced by a symlink)") from None
        raise _os_error(f"cannot read {t.rel}", exc) from exc
    try:
        if not exp.exists:
            raise _conflict(t, exp, "(created by someone else)")
        st = os.fstat(fd)
        if not stat_mod.S_ISREG(st.st_mode):
            raise _conflict(t, exp, "(no longer a regular file)")
        now = _read_all(fd, limit=MAX_FILE_BYTES)
        actual = hashlib.sha256(now).hexdigest() if now is not None else "(grown past the size limit)"
        # Same size and mtime can still hide a same-second rewrite: the hash decides.
        if st.st_size == exp.size and st.st_mtime_ns == exp.mtime_ns and actual == exp.sha256:
            return
        raise _conflict(t, exp, actual)
    finally:
        os.close(fd)


def _conflict(t: Target, exp: FileState, actual: str | None) -> VersionConflict:
    expected = exp.sha256 if exp.exists else "(absent)"
    shown = actual if actual is not None else "(deleted)"
    return VersionConflict(
        f"Concurrent modification detected on {t.rel}: it changed after it was read "
        f"(expected sha256 {expected}, found {shown}). Nothing was written. Re-read the file and retry.",
        path=t.rel,
        expected=expected,
        actual=shown,
    )


def _swap(s: _Staged, use_backups: bool) -> None:
    change, t = s.change, s.change.target
    d = s.dir_fd
    try:
        if change.data is None:
            # Delete = move aside to a backup; it is unlinked once everything succeeded.
            s.backup = temp_name(f".{t.name}.", BACKUP_SUFFIX)
            os.replace(t.name, s.backup, src_dir_fd=d, dst_dir_fd=d)
        else:
            if use_backups and change.expected.exists:
                s.backup = temp_name(f".{t.name}.", BACKUP_SUFFIX)
                _link_or_copy(d, t.name, s.backup)
            assert s.temp is not None
            os.replace(s.temp, t.name, src_dir_fd=d, dst_dir_fd=d)
            s.temp = None
    except OSError as exc:
        raise _os_error(f"cannot replace {t.rel}", exc) from exc
    s.done = True


def _rollback(staged: list[_Staged]) -> None:
    for s in reversed(staged):
        t = s.change.target
        d = s.dir_fd
        with contextlib.suppress(OSError):
            if s.done:
                if s.backup is not None:
                    os.replace(s.backup, t.name, src_dir_fd=d, dst_dir_fd=d)
                    s.backup = None
                elif s.change.data is not None:
                    os.unlink(t.name, dir_fd=d)  # a created file
            elif s.backup is not None and s.change.data is not None:
                os.unlink(s.backup, dir_fd=d)  # backed up but never replaced
                s.backup = None
        if s.temp is not None:
            with contextlib.suppress(OSError):
                os.unlink(s.temp, dir_fd=d)
            s.temp = None
        for parent, name in reversed(s.created_dirs):
            with contextlib.suppress(OSError):
                os.rmdir(name, dir_fd=parent.fd)


def _link_or_copy(dir_fd: int, src: str, dst: str) -> None:
    try:
        os.link(src, dst, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        fin = os.open(src, O_READ, dir_fd=dir_fd)
        try:
            fout = os.open(
                dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd
            )
            try:
                write_all(fout, _read_all(fin))
                os.fsync(fout)
            finally:
                os.close(fout)
        finally:
            os.close(fin)


@overload
def _read_all(fd: int) -> bytes: ...
@overload
def _read_all(fd: int, *, limit: int) -> bytes | None: ...
def _read_all(fd: int, *, limit: int | None = None) -> bytes | None:
    """Every byte of ``fd``; None as soon as there are more than ``limit`` (a file that grew)."""
    parts: list[bytes] = []
    size = 0
    while chunk := os.read(fd, 1 << 20):
        size += len(chunk)
        if limit is not None and size > limit:
            return None
        parts.append(chunk)
    return b"".join(parts)


def _too_big(t: Target, size: int, limit: int = MAX_FILE_BYTES) -> InvalidArgument:
    if size <= MAX_FILE_BYTES:  # within the per-file limit: a multi-file call's total ran out
        return InvalidArgument(
            f"{t.rel} is {size} bytes, more than the {limit} bytes this call may still read: one call "
            f"reads at most {MAX_FILE_BYTES >> 20} MiB of existing files in total. Nothing was written; "
            "split the change into several calls."
        )
    return InvalidArgument(
        f"{t.rel} is {size} bytes; write, edit and patch hold a file's old and new bytes in memory and "
        f"take files up to {MAX_FILE_BYTES >> 20} MiB. Use bash for bigger files (sed, split, truncate)."
    )


def _os_error(what: str, exc: OSError) -> ToolError:
    """OS failures the model cannot fix by changing arguments: a plain tool error with errno."""
    return ToolError(f"{what}: {exc.strerror or exc}", errno=exc.errno)
