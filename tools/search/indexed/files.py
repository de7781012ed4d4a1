"""What the index builder sees of a workspace: its visible files and their bytes (SPEC Q-8).

Visibility is the search tool's (``tools.search.ignore``): ``.gitignore``/``.ignore``/``.rgignore``,
hidden entries, ``.git`` and ``.a3s`` skipped, symlinks and special files never followed.

Reads and stats of a local workspace go through the workspace's race-free boundary
(``kernel.beneath``: beneath the pinned root descriptor, no symlink followed at any component —
the walk never crossed one — regular files only, a FIFO or device refused without blocking), so a
model that swaps a directory for a symlink under a build can make a file unreadable, never make
the host read outside the workspace. At most ``limit + 1`` bytes are read. Git-tree workspaces
are streamed from their object store (``open_file``), never inflated whole.
"""

from __future__ import annotations

import contextlib
import os
import stat as stat_mod
from collections.abc import Callable
from dataclasses import dataclass

from kernel.errors import NotFound, ToolError
from kernel.workspace import Workspace
from tools.search.grep_local import beneath_of, is_local, walk_local
from tools.search.ignore import IgnoreRules, walk


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
        beneath = beneath_of(ws)
        for p in walk_local(ws, "", rules, should_stop):
            with contextlib.suppress(OSError, ToolError):
                st = beneath.lstat_strict(p)
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
            st = beneath_of(ws).lstat_strict(path)
            return Listed(path, st.st_size, st.st_mtime_ns) if stat_mod.S_ISREG(st.st_mode) else None
        entry = ws.stat(path)
    except (OSError, ToolError):
        return None
    return Listed(path, entry.size, entry.mtime_ns) if entry.kind == "file" else None


def _read_head(ws: Workspace, path: str, n: int) -> bytes:
    """The first ``n`` bytes of a non-local file, streamed where the workspace can (a git blob is
    never inflated whole); else ``read_bytes`` (bounded by ``MAX_READ_BYTES``)."""
    opener = getattr(ws, "open_file", None)
    if not callable(opener):
        return ws.read_bytes(path)[:n]
    with opener(path) as fh:
        return bytes(fh.read(n))


class Reader:
    """Reads files of one workspace for one build or query (a context manager, kept for callers
    that batch reads)."""

    def __init__(self, ws: Workspace) -> None:
        self.ws = ws
        self.local = is_local(ws)

    def close(self) -> None:
        """Nothing held between reads: every read opens and closes its own descriptor."""

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def read(self, path: str, limit: int) -> tuple[bytes, int, int]:
        """(bytes — at most ``limit + 1`` of them, size, mtime_ns); FileNotFoundError when gone,
        ``Unreadable`` when it is not a readable regular file."""
        if not self.local:
            try:
                entry = self.ws.stat(path)
                data = _read_head(self.ws, path, limit + 1)
            except ToolError as exc:
                if isinstance(exc, NotFound):
                    raise FileNotFoundError(path) from None
                raise Unreadable(exc.message) from None
            return data[: limit + 1], entry.size, entry.mtime_ns
        try:
            fd, st = beneath_of(self.ws).open_regular(path, follow_symlinks=False)
        except NotFound:
            raise FileNotFoundError(path) from None
        except FileNotFoundError:
            raise
        except (ToolError, OSError) as exc:
            raise Unreadable(f"{path}: {exc}") from None
        try:
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
