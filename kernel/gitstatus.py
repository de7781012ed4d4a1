"""libgit2's status without holding the GIL: bash's change snapshot, the git tool's status and stash (SPEC B-2, K-6).

pygit2's ``Repository.status`` runs libgit2's whole status — an ``lstat`` and index comparison per
work-tree file, an entry per untracked file — while holding the GIL. A sandboxed command that makes
150,000 untracked files (one loop of ``touch``) then stopped *every* thread of the host process,
every session's event loop included, for 3.1 s per snapshot, two snapshots per ``bash`` call: the
snapshot's 400 ms budget only abandons its thread, it cannot stop one that holds the GIL (a clean
repository of 150,000 tracked files: 2.1-2.6 s). Here the same libgit2 call is made through cffi,
which releases the GIL around C calls, into the libgit2 that pygit2 already loaded (found in
``/proc/self/maps``, ``kernel/libgit2_ffi.py``), with ``git_status_foreach_ext`` and the options pygit2 uses for
``status(untracked_files="all")``: the results are identical (``tests/tools/test_status_gil.py``),
the GIL is taken only per changed entry, and the callback stops libgit2 once the deadline passed.

The git tool's ``status`` and ``stash`` made the same pygit2 call (``entries``): the call itself
still takes as long as libgit2 needs, but only its own worker thread waits for it.

Where this cannot be set up (no cffi ABI mode, a libgit2 not found in the process map, a missing
symbol), ``status`` answers None and ``entries`` falls back to pygit2's own call.
"""

from __future__ import annotations

import functools
import math
import os
import sys
import time
from typing import Any

from kernel.libgit2_ffi import bind

GIT_STATUS_OPTIONS_VERSION = 1
GIT_STATUS_SHOW_INDEX_AND_WORKDIR = 0
GIT_STATUS_OPT_INCLUDE_UNTRACKED = 1 << 0
GIT_STATUS_OPT_RECURSE_UNTRACKED_DIRS = 1 << 4
# git_status_options is filled by libgit2's own init function: give it room should a later
# libgit2 append fields (only the first three, stable since libgit2 0.2x, are set here).
_OPTIONS_BYTES = 512
_CDEF = """
typedef struct git_repository git_repository;
typedef struct { char **strings; size_t count; } git_strarray;
typedef struct {
    unsigned int version;
    int show;
    unsigned int flags;
    git_strarray pathspec;
    void *baseline;
    uint16_t rename_threshold;
} git_status_options;
int git_status_options_init(git_status_options *opts, unsigned int version);
int git_status_foreach_ext(git_repository *repo, const git_status_options *opts,
                           int (*callback)(const char *, unsigned int, void *), void *payload);
"""


class StatusStopped(Exception):
    """The deadline passed while libgit2 reported entries."""


@functools.cache
def _binding() -> tuple[Any, Any] | None:
    return bind(_CDEF, ("git_status_foreach_ext", "git_status_options_init"))


def status(repo: Any, deadline: float) -> dict[str, int] | None:
    """``{path: git_status_t flags}`` of every entry that is not current (ignored files not
    listed), like ``repo.status(untracked_files="all", ignored=False)`` — without the GIL while
    libgit2 works. None when this binding is unavailable; ``StatusStopped`` past ``deadline``
    (``time.monotonic``); ``pygit2.GitError`` when libgit2 fails."""
    binding = _binding()
    pointer = getattr(repo, "_pointer", None)
    if binding is None or not isinstance(pointer, bytes):
        return None
    ffi, lib = binding
    raw = ffi.cast("git_repository *", int.from_bytes(pointer, sys.byteorder))
    buffer = ffi.new("char[]", _OPTIONS_BYTES)
    opts = ffi.cast("git_status_options *", buffer)
    if lib.git_status_options_init(opts, GIT_STATUS_OPTIONS_VERSION) != 0:
        return None
    opts.show = GIT_STATUS_SHOW_INDEX_AND_WORKDIR
    opts.flags = GIT_STATUS_OPT_INCLUDE_UNTRACKED | GIT_STATUS_OPT_RECURSE_UNTRACKED_DIRS
    found: dict[str, int] = {}
    stopped: list[bool] = []

    def on_entry(path: Any, flags: int, _payload: Any) -> int:
        if time.monotonic() > deadline:
            stopped.append(True)
            return 1  # non-zero: libgit2 stops and returns it
        found[os.fsdecode(ffi.string(path))] = int(flags)
        return 0

    try:
        callback = ffi.callback("int(const char *, unsigned int, void *)", on_entry)
    except Exception:  # no executable closures here (a hardened host): pygit2's status instead
        return None
    code = lib.git_status_foreach_ext(raw, opts, callback, ffi.NULL)
    # ``repo`` (and so the git_repository) stays alive until here: it is this frame's argument.
    if stopped:
        raise StatusStopped
    if code < 0:
        import pygit2

        raise pygit2.GitError(f"libgit2 status failed ({code})")
    return found


def entries(repo: Any, deadline: float = math.inf) -> dict[str, int]:
    """``repo.status()`` (untracked files listed one by one, ignored ones not) as ``{path: flags}``,
    without the GIL where ``status`` can; pygit2's own call otherwise."""
    found = status(repo, deadline)
    if found is None:
        found = {path: int(flags) for path, flags in repo.status(untracked_files="all").items()}
    return found
