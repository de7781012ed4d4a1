"""``changed_paths``: which workspace files a bash call changed, from cheap before/after snapshots (REFERENCE 4.7).

Two snapshot kinds, chosen by the workspace:

- **git** (the workspace root holds ``.git``): the working-tree status (``git status --porcelain``
  semantics, untracked files listed individually) read with pygit2, plus size and mtime of every
  dirty path, so a file that was already modified and is modified again is still reported. We use
  libgit2 rather than a ``git`` subprocess on purpose: a host ``git status`` would run a configured
  ``core.fsmonitor`` hook or clean filter — code execution outside the sandbox. libgit2 runs
  neither; what it does honour (``core.worktree``, includes, excludes files, a FIFO ``.gitignore``)
  is vetted or neutralised by ``kernel.gitsafe`` before it opens the repository.
- **mtime** (no repository, or one libgit2 cannot read at all: a sha256 repository): size and
  mtime of every regular file under the root (``.git`` and ``.a3s`` skipped, symlinks not
  followed), at most ``MTIME_SNAPSHOT_MAX_FILES`` files and ``MTIME_SNAPSHOT_MAX_ENTRIES``
  directory entries of any kind, read one entry at a time (a huge directory is never listed whole).

Either kind keeps at most ``SNAPSHOT_MAX_PATH_CHARS`` characters of paths (8 Mi): past that it is
"unknown" too, so deep, long names cannot make a snapshot hold tens of megabytes for a whole command.

Each snapshot runs in a worker thread under a ``SNAPSHOT_BUDGET_S`` (400 ms) budget; when either
side runs out of budget or files, ``changed_paths`` is None ("unknown"), never a partial guess.
A snapshot thread that overruns is abandoned (its result is dropped; libgit2 cannot be interrupted).
"""

from __future__ import annotations

import asyncio
import os
import stat as stat_mod
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from tools._offthread import abandon

SNAPSHOT_BUDGET_S = 0.4
MTIME_SNAPSHOT_MAX_FILES = 20_000
# Every directory entry the mtime walk reads counts (directories, symlinks, FIFOs too): a
# directory of a million symlinks holds no regular file, yet costs as much to read.
MTIME_SNAPSHOT_MAX_ENTRIES = 2 * MTIME_SNAPSHOT_MAX_FILES
# The paths a snapshot keeps, in characters: 20,000 files of ~3.7 KiB paths (deep directories of
# 250-byte names) held 73 MB per snapshot — and the "before" one lives as long as the command.
SNAPSHOT_MAX_PATH_CHARS = 8 * 1024 * 1024
DEADLINE_CHECK_EVERY = 256  # entries between two looks at the clock
MAX_DIRTY_PATHS_STATTED = 5_000
MAX_CHANGED_PATHS = 1_000
# The reported list's bytes too: 1,000 paths of ~4 KiB each (deep directories of 250-byte names)
# made 3.8 MB of metadata on a call whose output is capped at 100 KiB.
MAX_CHANGED_PATHS_BYTES = 64 * 1024
SKIPPED_DIRS = frozenset({".git", ".a3s"})

SnapshotKind = Literal["git", "mtime"]
Entry = tuple[int, int, int]  # (git status flags or 0, size or -1, mtime_ns or -1)


@dataclass(frozen=True, slots=True)
class Snapshot:
    kind: SnapshotKind
    entries: dict[str, Entry]


class _Unknown(Exception):
    """The snapshot cannot be taken (over budget, too many files, not a readable repository)."""


class _NotReadable(Exception):
    """libgit2 cannot read this repository at all (``unsupported``: its object format)."""


async def take_snapshot(root: Path) -> Snapshot | None:
    """A snapshot of ``root`` within the budget, or None when it could not be taken in time."""
    loop = asyncio.get_running_loop()
    deadline = time.monotonic() + SNAPSHOT_BUDGET_S
    future = loop.run_in_executor(None, _snapshot, root, deadline)
    try:
        kind, entries = await asyncio.wait_for(asyncio.shield(future), SNAPSHOT_BUDGET_S)
    except TimeoutError:
        abandon(future)  # the walk ends on its own; its outcome is never logged
        return None
    except (_Unknown, OSError):
        return None
    return Snapshot(kind, entries)


def _snapshot(root: Path, deadline: float) -> tuple[SnapshotKind, dict[str, Entry]]:
    if not (root / ".git").exists() or _is_placeholder(root):
        return "mtime", _mtime_snapshot(root, deadline)
    try:
        return "git", _git_snapshot(root, deadline)
    except _NotReadable:
        # A repository libgit2 cannot open at all (sha256 object format): the work tree is still
        # there, so the mtime snapshot tells the changes instead of leaving them unknown.
        return "mtime", _mtime_snapshot(root, deadline)


def _is_placeholder(root: Path) -> bool:
    """An empty ``.git`` the sandbox keeps for a concurrent command (``rootgit``): no repository."""
    from tools.bash.rootgit import is_placeholder

    try:
        return is_placeholder(os.lstat(root / ".git"))
    except OSError:
        return False


def changed_paths(before: Snapshot | None, after: Snapshot | None) -> list[str] | None:
    """Sorted workspace-relative paths whose snapshot entry differs; None when unknown."""
    if before is None or after is None or before.kind != after.kind:
        return None
    keys = before.entries.keys() | after.entries.keys()
    return sorted(k for k in keys if before.entries.get(k) != after.entries.get(k))


def reported_paths(changed: list[str]) -> tuple[list[str], bool]:
    """The first of ``changed`` within ``MAX_CHANGED_PATHS`` paths and ``MAX_CHANGED_PATHS_BYTES``
    bytes (UTF-8, the encoded path), and whether any were left out."""
    kept: list[str] = []
    size = 0
    for path in changed:
        size += len(os.fsencode(path))
        if len(kept) == MAX_CHANGED_PATHS or size > MAX_CHANGED_PATHS_BYTES:
            return kept, True
        kept.append(path)
    return kept, False


def _git_snapshot(root: Path, deadline: float) -> dict[str, Entry]:
    import pygit2

    from kernel import gitstatus
    from kernel.beneath import Beneath
    from kernel.errors import ToolError, Unsupported
    from kernel.gitblob import check_object_database
    from kernel.gitsafe import check_work_tree, layout_of_git_dir
    from kernel.gittree import open_repository
    from kernel.gitwhole import filtered_and_read, filters_possible, large_work_tree_files

    try:
        # libgit2 blocks (holding the GIL: the whole process) on a FIFO .gitignore and honours some
        # repository config: both are vetted first, and the work directory is pinned (kernel/gitsafe.py).
        beneath = Beneath(str(root))
        try:
            attributes = check_work_tree(beneath, max_dirs=MTIME_SNAPSHOT_MAX_FILES, deadline=deadline)
            try:
                repo = open_repository(root)
            except Unsupported as exc:
                raise _NotReadable(str(exc)) from exc
            # A FIFO planted in .git/objects (one `mkfifo` in the sandbox) froze the process the same
            # way at the status below (the HEAD tree is read): the object database is vetted too.
            check_object_database(
                layout_of_git_dir(Path(repo.path)).common_dir / "objects", deadline=deadline
            )
            # libgit2 reads a changed file whole when a filter applies (kernel/gitwhole.py): over the
            # limit the snapshot is unknown instead (its thread cannot be stopped once in libgit2).
            # Sizing every file costs an lstat each: only when a filter can apply at all.
            if filters_possible(repo, beneath, attributes):
                large = large_work_tree_files(
                    repo, beneath, max_dirs=MTIME_SNAPSHOT_MAX_FILES, deadline=deadline
                )
                if filtered_and_read(large):
                    raise _Unknown("a changed work-tree file over the limit is filtered")
        finally:
            beneath.close()
        # Without the GIL (kernel/gitstatus.py): pygit2's status held it — every thread of the
        # host stopped — for seconds on a big work tree, however short the snapshot's budget.
        status = gitstatus.status(repo, deadline)
        if status is None:
            status = repo.status(untracked_files="all")
    except (pygit2.GitError, KeyError, ValueError, ToolError, gitstatus.StatusStopped) as exc:
        raise _Unknown(str(exc)) from exc
    if time.monotonic() > deadline:
        raise _Unknown
    entries: dict[str, Entry] = {}
    chars = 0
    for i, (path, flags) in enumerate(status.items()):
        if flags == pygit2.enums.FileStatus.CURRENT or flags & pygit2.enums.FileStatus.IGNORED:
            continue
        chars += len(path)
        if chars > SNAPSHOT_MAX_PATH_CHARS:
            raise _Unknown("the dirty paths are too long to keep")
        size, mtime = -1, -1
        if i < MAX_DIRTY_PATHS_STATTED:
            try:
                st = os.lstat(root / path)
                size, mtime = st.st_size, st.st_mtime_ns
            except OSError:
                pass
        entries[path] = (int(flags), size, mtime)
    return entries


def _mtime_snapshot(root: Path, deadline: float) -> dict[str, Entry]:
    """Size and mtime of every regular file, read incrementally: each directory is a ``scandir``
    iterator pulled one entry at a time, so the caps stop the walk inside a huge directory (``os.walk``
    read whole listings first). Directories are opened beneath the root refusing every symlink, by
    descriptor, so a concurrent swap cannot walk the snapshot outside the workspace."""
    from kernel.beneath import O_LIST_DIR, Beneath

    entries: dict[str, Entry] = {}
    pulled = 0
    chars = 0
    pending = [""]  # workspace-relative directories still to read ("" is the root)
    beneath = Beneath(str(root))
    try:
        while pending:
            rel_dir = pending.pop()
            if time.monotonic() > deadline:
                raise _Unknown
            try:
                fd = (
                    beneath.open_strict(rel_dir, O_LIST_DIR)
                    if rel_dir
                    else os.open(".", O_LIST_DIR, dir_fd=beneath.root_fd)
                )
            except OSError:
                continue  # gone, or a symlink now: not a directory of this workspace
            try:
                with os.scandir(fd) as listing:
                    for entry in listing:
                        pulled += 1
                        if pulled > MTIME_SNAPSHOT_MAX_ENTRIES:
                            raise _Unknown
                        if pulled % DEADLINE_CHECK_EVERY == 0 and time.monotonic() > deadline:
                            raise _Unknown
                        rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
                        try:
                            st = entry.stat(follow_symlinks=False)
                        except OSError:
                            continue
                        if stat_mod.S_ISDIR(st.st_mode):
                            if entry.name not in SKIPPED_DIRS:
                                pending.append(rel)
                        elif stat_mod.S_ISREG(st.st_mode):
                            entries[rel] = (0, st.st_size, st.st_mtime_ns)
                            chars += len(rel)
                            if len(entries) > MTIME_SNAPSHOT_MAX_FILES or chars > SNAPSHOT_MAX_PATH_CHARS:
                                raise _Unknown
            finally:
                os.close(fd)
    finally:
        beneath.close()
    return entries
