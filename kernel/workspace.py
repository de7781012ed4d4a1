"""Workspaces: what a session's files are, what they can do, and the one path resolver (SPEC S-2, S-3, B-6).

A workspace declares capabilities (``read``, ``write``, ``exec``, ``git``, ``local``, ``search``);
the session surface is computed from them. Every file-touching tool reaches files only through
``Workspace`` methods, and every local path goes through ``LocalWorkspace.resolve``:

- paths are workspace-relative POSIX strings; absolute paths, NUL bytes, ``..`` escapes and
  symlinks (at any component, followed physically, loops included) that land outside the root are
  refused with ``path_outside_workspace``;
- a path whose Unicode compatibility form (NFKC) would read as a different path (full-width
  solidus, one-dot leaders, …) is refused too, so no later normalising layer can turn it into an
  escape;
- ``.a3s/`` (artifacts, indexes, workflow logs) is internal: never listed, searched or touched.

Git-tree and object-store workspaces implement the same protocol elsewhere (read-only, non-local).
All three also offer ``open_file(path)``, a stream tools prefer to ``read_bytes`` (which refuses
files over ``MAX_READ_BYTES``): nothing reads a whole file to use a part of it.
"""

from __future__ import annotations

import heapq
import io
import os
import stat as stat_mod
import unicodedata
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Literal, Protocol, runtime_checkable

from kernel.beneath import INTERNAL_DIR as INTERNAL_DIR
from kernel.beneath import MAX_SYMLINK_FOLLOWS as MAX_SYMLINK_FOLLOWS
from kernel.beneath import O_LIST_DIR, Beneath, Fd, Located
from kernel.errors import InvalidArgument, NotFound, PathOutsideWorkspace, ToolError

# LocalWorkspace.list_page: names kept before pruning to the page, and how often to check the clock.
PAGE_PRUNE_FACTOR = 4
PAGE_MIN_KEPT = 4096
PAGE_CHECK_EVERY = 2048


def page_of_names(
    names: Iterable[str], after: str, limit: int, check: Callable[[], None], *, hide_internal: bool
) -> tuple[list[str], bool]:
    """The first ``limit`` of ``names`` after ``after`` in sorted order, and whether more follow.

    A directory may hold millions of names (a sandboxed command made them): only the smallest
    are kept (``PAGE_PRUNE_FACTOR`` times the page at most, or ``PAGE_MIN_KEPT``), and ``check`` is
    called every ``PAGE_CHECK_EVERY`` names (it raises to stop: deadline, cancel). ``hide_internal``:
    the workspace root, where ``.a3s`` is never listed.
    """
    kept: list[str] = []
    prune_at = max(PAGE_MIN_KEPT, PAGE_PRUNE_FACTOR * (limit + 1))
    for seen, name in enumerate(names, 1):
        if seen % PAGE_CHECK_EVERY == 0:
            check()
        if name <= after or (hide_internal and name == INTERNAL_DIR):
            continue
        kept.append(name)
        if len(kept) >= prune_at:
            kept = heapq.nsmallest(limit + 1, kept)
    kept = heapq.nsmallest(limit + 1, kept)
    return kept[:limit], len(kept) > limit


MAX_PATH_BYTES = 4096
# ``read_bytes`` holds a whole file in memory: bigger files are refused (``invalid_argument`` naming
# the limit) before a byte is read; tools that need more stream them with ``open_file``.
MAX_READ_BYTES = 64 * 1024 * 1024

EntryKind = Literal["file", "dir", "symlink", "other"]
CAPABILITIES = frozenset({"read", "write", "exec", "git", "local", "search"})


@dataclass(frozen=True, slots=True)
class Entry:
    """One directory entry or stat answer; ``path`` is workspace-relative."""

    path: str
    kind: EntryKind
    size: int
    mtime_ns: int
    mode: int = 0

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]


@runtime_checkable
class Workspace(Protocol):
    """What tools may assume of any workspace."""

    @property
    def name(self) -> str: ...

    @property
    def capabilities(self) -> frozenset[str]: ...

    @property
    def root(self) -> Path | None:
        """The local directory, or None for a non-local workspace."""
        ...

    def normalize(self, path: str) -> str:
        """A clean workspace-relative path ('' is the root); raises ``path_outside_workspace``."""
        ...

    def stat(self, path: str) -> Entry: ...

    def read_bytes(self, path: str) -> bytes:
        """The whole file; over ``MAX_READ_BYTES`` it is ``invalid_argument`` (``too_large``)."""
        ...

    def list_dir(self, path: str) -> list[Entry]:
        """Entries sorted by name; internal entries (``.a3s``) left out."""
        ...

    def walk_files(self, path: str = "") -> Iterator[Entry]:
        """Every regular file under ``path`` (no ignore rules here), internal dirs skipped."""
        ...


def normalize_relative(path: str) -> str:
    """Lexically clean a workspace-relative path; refuse what can never be inside the root."""
    if not isinstance(path, str):
        raise InvalidArgument("path must be a string")
    if "\x00" in path:
        raise PathOutsideWorkspace("path contains a NUL byte", path=path.replace("\x00", "\\0"))
    if path.startswith("/") or path.startswith("\\") or (len(path) > 1 and path[1] == ":"):
        raise PathOutsideWorkspace(f"absolute paths are not allowed: {path}", path=path)
    if len(path.encode("utf-8", "surrogatepass")) > MAX_PATH_BYTES:
        # An over-long path that would also escape is reported as the escape it is.
        if _escapes(path):
            raise PathOutsideWorkspace("path escapes the workspace (and is over-long)", path=path[:256])
        raise InvalidArgument(f"path is longer than {MAX_PATH_BYTES} bytes")
    folded = unicodedata.normalize("NFKC", path).translate(_LOOKALIKES)
    if folded != path and _escapes(folded):
        raise PathOutsideWorkspace(
            f"path uses look-alike characters that read as an escape: {path}", path=path
        )
    parts: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if not parts:
                raise PathOutsideWorkspace(f"path escapes the workspace: {path}", path=path)
            parts.pop()
            continue
        parts.append(part)
    if parts and parts[0] == INTERNAL_DIR:
        raise PathOutsideWorkspace(f"{INTERNAL_DIR}/ is internal to a3s-fleet: {path}", path=path)
    return "/".join(parts)


# Characters that NFKC leaves alone but that read as a path separator or a dot (fraction slash,
# division slash, big solidus, set minus, reverse solidus, ideographic full stop, …). A path that
# reads as an escape once they are folded is refused; elsewhere they are ordinary name characters.
_LOOKALIKES = str.maketrans(
    {
        "\\": "/",
        "\u2044": "/",  # FRACTION SLASH
        "\u2215": "/",  # DIVISION SLASH
        "\u29f8": "/",  # BIG SOLIDUS
        "\u2216": "/",  # SET MINUS (a backslash look-alike)
        "\u29f5": "/",  # REVERSE SOLIDUS OPERATOR
        "\u29f9": "/",  # BIG REVERSE SOLIDUS
        "\u3002": ".",  # IDEOGRAPHIC FULL STOP
        "\uff61": ".",  # HALFWIDTH IDEOGRAPHIC FULL STOP
        "\u00b7": ".",  # MIDDLE DOT
        "\u2219": ".",  # BULLET OPERATOR
    }
)


def _escapes(path: str) -> bool:
    """Would ``path`` leave the root if read as a plain POSIX path?"""
    if path.startswith("/"):
        return True
    depth = 0
    for part in path.split("/"):
        if part == "..":
            depth -= 1
            if depth < 0:
                return True
        elif part not in ("", "."):
            depth += 1
    return False


class LocalWorkspace:
    """A directory on this machine. ``writable=False`` gives a read-only local view.

    The root is pinned when the workspace is opened (``kernel.beneath.Beneath`` holds it as a
    directory descriptor); every method resolves and opens relative to it, race-free. The
    descriptor-level API for tools (``locate``, ``open_file``, ``open_directory``, ``lstat``) is
    documented in ``docs/workspace-tools.md``.
    """

    def __init__(self, root: str | os.PathLike[str], *, writable: bool = True, exec_: bool = True) -> None:
        real = Path(os.path.realpath(os.fspath(root)))
        if not real.is_dir():
            raise NotFound(f"workspace directory does not exist: {root}", path=os.fspath(root))
        self._root = real
        self._beneath = Beneath(str(real))
        caps = {"read", "local", "search"}
        if writable:
            caps.add("write")
        if writable and exec_:
            caps.add("exec")
        if (real / ".git").exists():
            caps.add("git")
        self._caps = frozenset(caps)

    @property
    def name(self) -> str:
        return str(self._root)

    @property
    def capabilities(self) -> frozenset[str]:
        return self._caps

    @property
    def root(self) -> Path:
        return self._root

    @property
    def beneath(self) -> Beneath:
        """The pinned root and its race-free resolver (``kernel.beneath``)."""
        return self._beneath

    def normalize(self, path: str) -> str:
        rel = normalize_relative(path)
        with self.locate(path) as loc:
            if ".." in path.split("/"):
                # '..' is physical (it applies after any symlink before it), so the lexical form could
                # name another file: answer with the location the resolver actually reached.
                return loc.rel
        return rel

    def locate(self, path: str, *, follow_last: bool = True) -> Located:
        """Where ``path`` leads, pinned by the verified descriptor of its parent directory.

        Symlinks are followed one component at a time (``follow_last=False`` keeps a final symlink
        itself); every location on the way must stay inside the root and outside ``.a3s``. Missing
        trailing components are allowed (``Located.missing``: directories a write would create).
        The caller closes the result (``with ws.locate(p) as loc``).
        """
        normalize_relative(path)
        return self._beneath.locate(path, follow_last=follow_last)

    def resolve(self, path: str) -> Path:
        """The physical path ``path`` leads to (see ``locate``).

        A path string is only as good as the moment it was computed: code that opens or creates
        files uses ``locate``/``open_file``/``open_directory`` instead, which cannot be raced.
        """
        with self.locate(path) as loc:
            return self._root / loc.rel if loc.rel else self._root

    def stat(self, path: str) -> Entry:
        """The entry ``path`` leads to (symlinks followed inside the workspace)."""
        with self.locate(path) as loc:
            st = loc.lstat
            if not loc.name:
                st = os.stat(".", dir_fd=loc.parent.fd)
            if st is None or loc.missing:
                raise NotFound(f"no such file or directory: {path or '.'}", path=path)
            return _entry(loc.rel, st)

    def lstat(self, path: str) -> Entry:
        """Like ``stat`` but a final symlink is described itself, not followed."""
        with self.locate(path, follow_last=False) as loc:
            st = loc.lstat
            if not loc.name:
                st = os.stat(".", dir_fd=loc.parent.fd)
            if st is None or loc.missing:
                raise NotFound(f"no such file or directory: {path or '.'}", path=path)
            return _entry(loc.rel, st)

    def open_file(self, path: str, *, follow_symlinks: bool = True) -> BinaryIO:
        """The regular file at ``path``, open for reading (unbuffered; the caller closes it).

        Opened with ``O_NOFOLLOW | O_NONBLOCK`` and checked with ``fstat``: directories, FIFOs,
        sockets and devices are refused (``invalid_argument``) without blocking.
        ``follow_symlinks=False`` also refuses a symlink at any component.
        """
        normalize_relative(path)
        fd, _ = self._beneath.open_regular(path, follow_symlinks=follow_symlinks)
        return os.fdopen(fd, "rb", buffering=0)

    def read_bytes(self, path: str) -> bytes:
        normalize_relative(path)
        try:
            fd, st = self._beneath.open_regular(path)
        except NotFound:
            raise NotFound(f"File not found: {path}", path=path) from None
        try:
            check_read_size(path, st.st_size)
            data = _read_fd(fd, st.st_size)
            check_read_size(path, len(data))  # grew while it was read
            return data
        finally:
            os.close(fd)

    def open_directory(self, path: str) -> tuple[Fd, str]:
        """A readable descriptor of directory ``path`` and its physical relative path (for scandir)."""
        normalize_relative(path)
        return self._beneath.open_directory(path)

    def list_dir(self, path: str) -> list[Entry]:
        dir_fd, base = self.open_directory(path)
        with dir_fd:
            out = _scan_entries(dir_fd.fd, base)
        out.sort(key=lambda e: e.name)
        return out

    def list_page(
        self, path: str, after: str, limit: int, check: Callable[[], None] = lambda: None
    ) -> tuple[list[Entry], bool]:
        """The first ``limit`` entries named after ``after`` (sorted), and whether more follow.

        ``list_dir`` of a directory a sandboxed command filled with 500,000 entries held them all
        (+350 MiB) and stat'ed each. This streams the names, keeping only the ``limit`` smallest
        (``PAGE_PRUNE_FACTOR`` times that at most, or ``PAGE_MIN_KEPT``), stats only those, and
        calls ``check`` every ``PAGE_CHECK_EVERY`` names (it raises to stop: deadline, cancel).
        """
        dir_fd, base = self.open_directory(path)
        with dir_fd, os.scandir(dir_fd.fd) as it:
            names, more = page_of_names((de.name for de in it), after, limit, check, hide_internal=not base)
            page: list[Entry] = []
            for name in names:
                try:
                    st = os.stat(name, dir_fd=dir_fd.fd, follow_symlinks=False)
                except FileNotFoundError:
                    continue
                page.append(_entry(f"{base}/{name}" if base else name, st))
        return page, more

    def walk_files(self, path: str = "") -> Iterator[Entry]:
        """Every regular file below ``path`` (sorted, symlinks not followed, ``.a3s`` skipped).

        Directories below ``path`` are opened from the root descriptor with every symlink refused,
        so a directory swapped for a symlink mid-walk is skipped, never followed.
        """
        entry = self.stat(path)
        if entry.kind == "file":
            yield entry
            return
        if entry.kind != "dir":
            return
        pending = [entry.path]
        while pending:
            rel_dir = pending.pop()
            try:
                if rel_dir == entry.path:
                    fd, _ = self._beneath.open_directory(rel_dir)
                else:
                    fd = Fd(self._beneath.open_strict(rel_dir, O_LIST_DIR))
            except (ToolError, OSError):
                continue
            with fd:
                try:
                    entries = _scan_entries(fd.fd, rel_dir)
                except OSError:
                    continue
            entries.sort(key=lambda e: e.name)
            for e in entries:
                if e.kind == "file":
                    yield e
            pending.extend(e.path for e in reversed(entries) if e.kind == "dir")


def _scan_entries(dir_fd: int, base: str) -> list[Entry]:
    """The entries of an open directory (internal ``.a3s`` at the root left out), never following."""
    out: list[Entry] = []
    with os.scandir(dir_fd) as it:
        for de in it:
            if not base and de.name == INTERNAL_DIR:
                continue
            try:
                st = de.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            out.append(_entry(f"{base}/{de.name}" if base else de.name, st))
    return out


def _read_fd(fd: int, size_hint: int) -> bytes:
    parts: list[bytes] = []
    want = max(size_hint + 1, 65536)
    got = 0
    while got <= MAX_READ_BYTES and (chunk := os.read(fd, min(want, MAX_READ_BYTES + 1 - got))):
        parts.append(chunk)
        got += len(chunk)
        want = 1 << 20
    return b"".join(parts)


def check_read_size(path: str, size: int) -> None:
    """Refuse a whole-file read of ``size`` bytes over ``MAX_READ_BYTES`` (K-8: names the limit)."""
    if size > MAX_READ_BYTES:
        raise InvalidArgument(
            f"{path} is {size} bytes; a whole-file read is limited to {MAX_READ_BYTES} bytes "
            "(read pages through bigger files with offset/limit)",
            reason="too_large",
            size=size,
            max_bytes=MAX_READ_BYTES,
        )


class MemoryFile(io.BytesIO):
    """A file held in memory, opened like one on disk (``open_file`` of a non-local workspace);
    ``size`` is its length (``os.fstat`` does not apply). The initial bytes are shared, not copied."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.size = len(data)


def _entry(rel: str, st: os.stat_result) -> Entry:
    mode = st.st_mode
    kind: EntryKind
    if stat_mod.S_ISLNK(mode):
        kind = "symlink"
    elif stat_mod.S_ISDIR(mode):
        kind = "dir"
    elif stat_mod.S_ISREG(mode):
        kind = "file"
    else:
        kind = "other"
    return Entry(path=rel, kind=kind, size=st.st_size, mtime_ns=st.st_mtime_ns, mode=stat_mod.S_IMODE(mode))
