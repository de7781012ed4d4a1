"""Work-tree files that libgit2 would hold whole in memory, found before libgit2 is called.

libgit2 streams a plain work-tree file when it hashes it, but a file that a *filter* applies to
(``.gitattributes`` ``text``/``eol``/``ident``/``crlf``, or ``core.autocrlf``) is read whole, then
converted into a second buffer: measured on libgit2 1.9 with a planted ``* text eol=crlf``, a 64
MiB file cost the host process +192 MiB for ``status``/``diff`` and +225 MiB for ``stash`` or a
forced ``checkout`` (+65 MiB, one copy, without the filter: writing or restoring a blob holds it
whole). A model with sandboxed bash controls every work-tree file, ``.gitattributes`` included.

``large_work_tree_files`` walks the work tree (race-free, no symlink followed, bounded in
directories and time) and describes every regular file over ``MAX_WHOLE_FILE_BYTES``:

- ``filtered``: libgit2 would run a filter on it (``git_filter_list_load``, the list libgit2
  itself loads to hash it);
- ``tracked``: in the index;
- ``looks_changed``: libgit2 cannot trust the index's stat data for it (untracked, or size, mtime,
  inode or mode differ, or its mtime is not older than the index file: git's "racily clean" case),
  so an operation that looks at it reads it.

Ignored untracked files are left out: nothing reads them. The callers decide what to refuse
(``filtered_and_read`` for status/diff/bash's change snapshot; stash and checkout check more).
"""

from __future__ import annotations

import errno
import os
import stat as stat_mod
import time
from dataclasses import dataclass
from typing import Any

import pygit2
from pygit2.ffi import C, ffi

from kernel.beneath import O_LIST_DIR, Beneath, Fd
from kernel.errors import Timeout
from kernel.workspace import MAX_READ_BYTES

# A work-tree file libgit2 may hold whole: the limit of a whole-file read everywhere else.
MAX_WHOLE_FILE_BYTES = MAX_READ_BYTES
SKIPPED_DIRS = frozenset({".git", ".a3s"})


@dataclass(frozen=True, slots=True)
class LargeFile:
    path: str  # workspace-relative, '/'-separated
    size: int
    filtered: bool
    tracked: bool
    looks_changed: bool


def large_regular_files(
    beneath: Beneath, *, min_bytes: int, max_dirs: int, deadline: float | None
) -> list[tuple[str, os.stat_result]]:
    """(path, lstat) of every regular file over ``min_bytes`` beneath the pinned root.

    Directories are opened without following a symlink; ``.git``, ``.a3s`` and symlinks are not
    entered; no file is opened. ``Timeout`` past ``max_dirs`` directories or the deadline.
    """
    found: list[tuple[str, os.stat_result]] = []
    pending: list[str] = [""]
    dirs = 0
    while pending:
        rel = pending.pop()
        dirs += 1
        if dirs > max_dirs or (deadline is not None and time.monotonic() > deadline):
            raise Timeout(
                f"the work tree has too many directories to size its files before git reads them (> {dirs - 1})",
                op="git",
                duration_ms=None,
            )
        try:
            fd = Fd(beneath.open_strict(rel, O_LIST_DIR))
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.EACCES):
                continue
            raise
        with fd, os.scandir(fd.fd) as it:
            for de in it:
                path = f"{rel}/{de.name}" if rel else de.name
                try:
                    if de.is_dir(follow_symlinks=False):
                        if de.name not in SKIPPED_DIRS:
                            pending.append(path)
                    elif de.is_file(follow_symlinks=False):
                        st = de.stat(follow_symlinks=False)
                        if stat_mod.S_ISREG(st.st_mode) and st.st_size > min_bytes:
                            found.append((path, st))
                except OSError:
                    continue
    return sorted(found, key=lambda item: item[0])


def large_work_tree_files(
    repo: pygit2.Repository, beneath: Beneath, *, max_dirs: int, deadline: float | None
) -> list[LargeFile]:
    """Every work-tree file over ``MAX_WHOLE_FILE_BYTES`` that git does not ignore, described."""
    candidates = large_regular_files(
        beneath, min_bytes=MAX_WHOLE_FILE_BYTES, max_dirs=max_dirs, deadline=deadline
    )
    if not candidates:
        return []
    index = repo.index  # read from disk now: the stat data libgit2 will compare with
    index_mtime_ns = _index_mtime_ns(repo)
    out: list[LargeFile] = []
    for path, st in candidates:
        entry = C.git_index_get_bypath(index._index, path.encode("utf-8", "surrogateescape"), 0)
        tracked = entry != ffi.NULL
        if not tracked and repo.path_is_ignored(path):
            continue
        filtered = repo.load_filter_list(path) is not None
        looks_changed = True
        if tracked:
            looks_changed = _stat_differs(st, entry, index_mtime_ns)
        out.append(LargeFile(path, st.st_size, filtered, tracked, looks_changed))
    return out


def filtered_and_read(files: list[LargeFile]) -> list[LargeFile]:
    """The files a work-tree status or diff would read whole: tracked, stat changed, filtered.

    (An untracked file is listed, never hashed, by both.)
    """
    return [f for f in files if f.filtered and f.tracked and f.looks_changed]


def describe(files: list[LargeFile], *, limit: int = 5) -> str:
    shown = ", ".join(f"{f.path} ({f.size} bytes)" for f in files[:limit])
    return shown + (f" and {len(files) - limit} more" if len(files) > limit else "")


def _index_mtime_ns(repo: pygit2.Repository) -> int | None:
    try:
        return os.stat(os.path.join(repo.path, "index")).st_mtime_ns
    except OSError:
        return None


def _stat_differs(st: os.stat_result, e: Any, index_mtime_ns: int | None) -> bool:
    """What libgit2's diff checks before it trusts an index entry ``e`` (a cffi git_index_entry*):
    size, mtime, inode, mode, and git's racy-clean rule. Any doubt counts as changed."""
    mtime_ns = int(e.mtime.seconds) * 1_000_000_000 + int(e.mtime.nanoseconds)
    if int(e.file_size) != st.st_size & 0xFFFFFFFF:
        return True
    if mtime_ns != st.st_mtime_ns:
        return True
    if int(e.ino) != st.st_ino & 0xFFFFFFFF:
        return True
    if (int(e.mode) & 0o100) != (st.st_mode & 0o100):
        return True
    # git's racy-clean rule, at whole seconds as libgit2 may apply it: a file not older than the
    # index by a second is read to be sure.
    return index_mtime_ns is None or int(e.mtime.seconds) >= index_mtime_ns // 1_000_000_000
