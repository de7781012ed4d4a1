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

import os
import stat as stat_mod
from dataclasses import dataclass
from typing import Any

import pygit2
from pygit2.ffi import C, ffi

from kernel.beneath import O_READ, Beneath
from kernel.gitsafe import WorkTreeAttributes, work_tree_entries
from kernel.workspace import MAX_READ_BYTES

# A work-tree file libgit2 may hold whole: the limit of a whole-file read everywhere else.
MAX_WHOLE_FILE_BYTES = MAX_READ_BYTES


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
    """(path, lstat) of every regular file over ``min_bytes`` beneath the pinned root
    (``kernel.gitsafe.work_tree_entries``' walk: no symlink followed, no file opened; ``Timeout``
    past ``max_dirs`` directories or the deadline)."""
    found: list[tuple[str, os.stat_result]] = []
    for rel, de in work_tree_entries(
        beneath, max_dirs=max_dirs, deadline=deadline, what="size its files before git reads them"
    ):
        try:
            if de.is_file(follow_symlinks=False):
                st = de.stat(follow_symlinks=False)
                if stat_mod.S_ISREG(st.st_mode) and st.st_size > min_bytes:
                    found.append((f"{rel}/{de.name}" if rel else de.name, st))
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


# Words an attribute file must hold for libgit2 to run a content filter (crlf/eol conversion,
# ident; a driver ``filter=`` too, conservatively; ``working-tree-encoding``) — or to define a macro
# that does: a file without any of them sets none.
FILTER_WORDS = (b"text", b"eol", b"crlf", b"ident", b"filter", b"encoding")
MAX_ATTRIBUTE_FILE_BYTES = 1 << 20  # a bigger attribute file counts as one that may set filters
MAX_INDEX_SCAN_BYTES = 64 << 20  # a bigger index counts as one that may stage attribute files


def filters_possible(repo: pygit2.Repository, beneath: Beneath, seen: WorkTreeAttributes) -> bool:
    """Whether libgit2 could apply a content filter to any work-tree file; False only when sure.

    The size walk (``large_regular_files``: an ``lstat`` per file) doubled the cost of bash's
    change snapshot on a 30,000-file tree; it is only needed when a filter can apply, which takes
    ``core.autocrlf`` or an attribute that names one: in the user's global or system attributes,
    ``.git/info/attributes``, a work-tree ``.gitattributes`` (``seen``: what
    ``kernel.gitsafe.check_work_tree`` met on its own walk), or — libgit2 falls back to the index
    for a directory whose file is missing — a staged ``.gitattributes`` of a walked directory.
    """
    try:
        config = repo.config
        if str(config["core.autocrlf"]).lower() not in ("false", "0", "no", "off", ""):
            return True
    except KeyError:
        pass
    if "core.attributesFile" in repo.config:
        return True  # the user's global attributes: trusted, not read here
    home = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    for path in (os.path.join(home, "git", "attributes"), "/etc/gitattributes"):
        if os.path.lexists(path):
            return True
    if _names_a_filter(os.path.join(repo.path, "info", "attributes")):
        return True
    if any(_names_a_filter(path, beneath) for path in seen.files):
        return True
    return _staged_without_file(repo, seen)


def _staged_without_file(repo: pygit2.Repository, seen: WorkTreeAttributes) -> bool:
    """A walked directory has a ``.gitattributes`` in the index but none in the work tree."""
    try:
        with open(os.path.join(repo.path, "index"), "rb") as fh:
            raw = fh.read(MAX_INDEX_SCAN_BYTES + 1)
    except FileNotFoundError:
        return False
    except OSError:
        return True
    if len(raw) > MAX_INDEX_SCAN_BYTES:
        return True
    if b"attributes" not in raw:  # paths are stored whole (v2/v3) or prefix-compressed (v4)
        return False
    index = repo.index
    present = set(seen.files)
    for rel in seen.dirs:
        path = f"{rel}/.gitattributes" if rel else ".gitattributes"
        if (
            path not in present
            and C.git_index_get_bypath(index._index, path.encode("utf-8", "surrogateescape"), 0) != ffi.NULL
        ):
            return True
    return False


def _names_a_filter(path: str, beneath: Beneath | None = None) -> bool:
    """The attribute file holds a filter word (or cannot be read, or is big: assume it does)."""
    try:
        if beneath is not None:
            fd = beneath.open_strict(path, O_READ)
        else:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    except OSError:
        return True
    try:
        if not stat_mod.S_ISREG(os.fstat(fd).st_mode):
            return True
        data = os.read(fd, MAX_ATTRIBUTE_FILE_BYTES + 1)
    except OSError:
        return True
    finally:
        os.close(fd)
    if len(data) > MAX_ATTRIBUTE_FILE_BYTES:
        return True
    lowered = data.lower()
    return any(word in lowered for word in FILTER_WORDS)


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
