"""What the index builder sees of a workspace: its visible files and their bytes (SPEC Q-8).

Visibility is the search tool's (``tools.search.ignore``): ``.gitignore``/``.ignore``/``.rgignore``,
hidden entries, ``.git`` and ``.a3s`` skipped, symlinks and special files never followed.

Reads of a local workspace are race-free against a model that swaps files under the walk: the
file is opened by walking its directories from a root directory fd with ``O_NOFOLLOW |
O_DIRECTORY`` (a directory replaced by a symlink fails to open), then the file itself with
``O_NOFOLLOW | O_NONBLOCK`` and a regular-file check on the open descriptor (a FIFO or device
swapped in is refused without blocking). At most ``limit + 1`` bytes are read. Git-tree
workspaces are read through their object store (``Workspace.read_bytes``).
"""

from __future__ import annotations

import contextlib
import os
import stat as stat_mod
from collections.abc import Callable
from dataclasses import dataclass

from kernel.errors import ToolError
from kernel.workspace import Workspace
from tools.search.grep_local import is_local, walk_local
from tools.search.ignore import IgnoreRules, walk

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


@dataclass(frozen=True, slots=True)
class Listed:
    path: str
    size: int
    mtime_ns: int


class Unreadable(Exception):
    """The file exists but cannot be read as a regular file (kept out, counted)."""


def list_files(ws: Workspace, should_stop: Callable[[], bool]) -> dict[str, Listed]:
    """Every visible regular file of the workspace with its size and mtime."""
    rules = IgnoreRules(ws)
    out: dict[str, Listed] = {}
    if is_local(ws):
        root = os.fspath(ws.root)  # type: ignore[arg-type]
        for p in walk_local(ws, "", rules, should_stop):
            with contextlib.suppress(OSError):
                st = os.lstat(f"{root}/{p}")
                if stat_mod.S_ISREG(st.st_mode):
                    out[p] = Listed(p, st.st_size, st.st_mtime_ns)
        return out
    for entry in walk(ws, "", rules, should_stop):
        out[entry.path] = Listed(entry.path, entry.size, entry.mtime_ns)
    return out


def stat_file(ws: Workspace, path: str) -> Listed | None:
    """One file's listing now, or None when it is gone or no longer a regular file."""
    try:
        if is_local(ws):
            st = os.lstat(f"{os.fspath(ws.root)}/{path}")  # type: ignore[arg-type]
            return Listed(path, st.st_size, st.st_mtime_ns) if stat_mod.S_ISREG(st.st_mode) else None
        entry = ws.stat(path)
    except (OSError, ToolError):
        return None
    return Listed(path, entry.size, entry.mtime_ns) if entry.kind == "file" else None


class Reader:
    """Reads files of one workspace for one build; holds directory fds (close it)."""

    def __init__(self, ws: Workspace) -> None:
        self.ws = ws
        self.local = is_local(ws)
        self._root_fd = os.open(os.fspath(ws.root), _DIR_FLAGS) if self.local else -1  # type: ignore[arg-type]
        self._dir: tuple[str, int] | None = None  # the last directory opened (files come sorted)

    def close(self) -> None:
        if self._dir is not None:
            os.close(self._dir[1])
            self._dir = None
        if self._root_fd >= 0:
            os.close(self._root_fd)
            self._root_fd = -1

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def read(self, path: str, limit: int) -> tuple[bytes, int, int]:
        """(bytes — at most ``limit + 1`` of them, size, mtime_ns); FileNotFoundError when gone,
        ``Unreadable`` when it is not a readable regular file."""
        if not self.local:
            try:
                data = self.ws.read_bytes(path)
                entry = self.ws.stat(path)
            except ToolError as exc:
                if exc.kind == "not_found":
                    raise FileNotFoundError(path) from None
                raise Unreadable(exc.message) from None
            return data[: limit + 1], entry.size, entry.mtime_ns
        directory, _, name = path.rpartition("/")
        try:
            fd = os.open(name, _FILE_FLAGS, dir_fd=self._dir_fd(directory))
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise Unreadable(f"{path}: {exc.strerror}") from None
        try:
            st = os.fstat(fd)
            if not stat_mod.S_ISREG(st.st_mode):
                raise Unreadable(f"{path} is not a regular file")
            chunks = []
            left = limit + 1
            while left > 0:
                got = os.read(fd, min(left, 1 << 20))
                if not got:
                    break
                chunks.append(got)
                left -= len(got)
            return b"".join(chunks), st.st_size, st.st_mtime_ns
        finally:
            os.close(fd)

    def _dir_fd(self, directory: str) -> int:
        if not directory:
            return self._root_fd
        if self._dir is not None and self._dir[0] == directory:
            return self._dir[1]
        fd = os.dup(self._root_fd)
        try:
            for part in directory.split("/"):
                try:
                    nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    raise
                except OSError as exc:
                    raise Unreadable(f"{directory}: {exc.strerror}") from None
                os.close(fd)
                fd = nxt
        except BaseException:
            os.close(fd)
            raise
        if self._dir is not None:
            os.close(self._dir[1])
        self._dir = (directory, fd)
        return fd
