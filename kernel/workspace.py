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
"""

from __future__ import annotations

import os
import stat as stat_mod
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

from kernel.errors import InvalidArgument, NotFound, PathOutsideWorkspace

INTERNAL_DIR = ".a3s"
MAX_SYMLINK_FOLLOWS = 40
MAX_PATH_BYTES = 4096

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

    def read_bytes(self, path: str) -> bytes: ...

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
    """A directory on this machine. ``writable=False`` gives a read-only local view."""

    def __init__(self, root: str | os.PathLike[str], *, writable: bool = True, exec_: bool = True) -> None:
        real = Path(os.path.realpath(os.fspath(root)))
        if not real.is_dir():
            raise NotFound(f"workspace directory does not exist: {root}", path=os.fspath(root))
        self._root = real
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

    def normalize(self, path: str) -> str:
        rel = normalize_relative(path)
        real = self.resolve(path)
        if ".." in path.split("/"):
            # '..' is physical (it applies after any symlink before it), so the lexical form could
            # name another file: answer with the location the resolver actually reached.
            return self._rel(real) if real != self._root else ""
        return rel

    def resolve(self, path: str) -> Path:
        """The physical path for ``path``, following symlinks component by component.

        Each symlink is followed relative to where it sits; every intermediate location must stay
        inside the root. Non-existent trailing components are allowed (a file about to be created).
        """
        # Validation only (absolute, NUL, look-alikes, lexical escapes, .a3s): the walk below uses
        # the raw components, because '..' after a symlink is applied where the symlink led.
        normalize_relative(path)
        root = self._root
        current = root
        pending = [p for p in path.split("/") if p not in ("", ".")]
        follows = 0
        while pending:
            part = pending.pop(0)
            if part == ".":
                continue
            if part == "..":
                if current == root:
                    raise PathOutsideWorkspace(f"path escapes the workspace: {path}", path=path)
                current = current.parent
                continue
            candidate = current / part
            try:
                st = os.lstat(candidate)
            except FileNotFoundError:
                current = candidate
                # The rest cannot be symlinks; keep lexical, but still refuse '..' past the root.
                for rest in pending:
                    if rest == "..":
                        if current == root:
                            raise PathOutsideWorkspace(
                                f"path escapes the workspace: {path}", path=path
                            ) from None
                        current = current.parent
                    elif rest not in ("", "."):
                        current = current / rest
                pending = []
                break
            except NotADirectoryError as exc:
                raise NotFound(f"not a directory on the way to {path}", path=path) from exc
            if stat_mod.S_ISLNK(st.st_mode):
                follows += 1
                if follows > MAX_SYMLINK_FOLLOWS:
                    raise PathOutsideWorkspace(f"symlink loop while resolving {path}", path=path)
                target = os.readlink(candidate)
                if target.startswith("/"):
                    target_path = Path(os.path.normpath(target))
                    if not _is_within(target_path, root):
                        raise PathOutsideWorkspace(
                            f"symlink {self._rel(candidate)} points outside the workspace", path=path
                        )
                    current = root
                    pending = [
                        p for p in str(target_path.relative_to(root)).split("/") if p not in ("", ".")
                    ] + pending
                else:
                    pending = [p for p in target.split("/") if p not in ("", ".")] + pending
                continue
            current = candidate
        if not _is_within(current, root):
            raise PathOutsideWorkspace(f"path escapes the workspace: {path}", path=path)
        inner = current.relative_to(root).parts
        if inner and inner[0] == INTERNAL_DIR:
            raise PathOutsideWorkspace(f"{INTERNAL_DIR}/ is internal to a3s-fleet: {path}", path=path)
        return current

    def _rel(self, p: Path) -> str:
        try:
            return p.relative_to(self._root).as_posix()
        except ValueError:
            return str(p)

    def stat(self, path: str) -> Entry:
        real = self.resolve(path)
        try:
            st = os.stat(real)
        except FileNotFoundError as exc:
            raise NotFound(f"no such file or directory: {path or '.'}", path=path) from exc
        return _entry(self._rel(real) if real != self._root else "", st)

    def read_bytes(self, path: str) -> bytes:
        real = self.resolve(path)
        try:
            st = os.stat(real)
        except FileNotFoundError as exc:
            raise NotFound(f"File not found: {path}", path=path) from exc
        if stat_mod.S_ISDIR(st.st_mode):
            raise InvalidArgument(f"{path} is a directory")
        if not stat_mod.S_ISREG(st.st_mode):
            raise InvalidArgument(f"{path} is not a regular file (devices, FIFOs and sockets are refused)")
        fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as fh:
            return fh.read()

    def list_dir(self, path: str) -> list[Entry]:
        real = self.resolve(path)
        base = self._rel(real) if real != self._root else ""
        try:
            scan = list(os.scandir(real))
        except FileNotFoundError as exc:
            raise NotFound(f"Directory not found: {path or '.'}", path=path) from exc
        except NotADirectoryError as exc:
            raise InvalidArgument(f"{path} is not a directory") from exc
        out: list[Entry] = []
        for de in scan:
            if not base and de.name == INTERNAL_DIR:
                continue
            try:
                st = de.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            out.append(_entry(f"{base}/{de.name}" if base else de.name, st))
        out.sort(key=lambda e: e.name)
        return out

    def walk_files(self, path: str = "") -> Iterator[Entry]:
        real = self.resolve(path)
        base = self._rel(real) if real != self._root else ""
        if real.is_file():
            yield _entry(base, os.stat(real))
            return
        for dirpath, dirnames, filenames in os.walk(real):
            rel_dir = os.path.relpath(dirpath, self._root)
            rel_dir = "" if rel_dir == "." else rel_dir
            if not rel_dir:
                dirnames[:] = [d for d in dirnames if d != INTERNAL_DIR]
            dirnames.sort()
            for fn in sorted(filenames):
                full = os.path.join(dirpath, fn)
                try:
                    st = os.lstat(full)
                except FileNotFoundError:
                    continue
                if stat_mod.S_ISREG(st.st_mode):
                    yield _entry(f"{rel_dir}/{fn}" if rel_dir else fn, st)


def _is_within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


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
