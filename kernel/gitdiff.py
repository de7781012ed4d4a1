"""libgit2's tree-to-work-tree diff without holding the GIL, stopped between files (SPEC K-6).

pygit2's ``Tree.diff_to_workdir`` is one libgit2 call, made holding the GIL: it walks the whole
work tree, hashes every tracked file (a tree entry has no stat data to trust) and, for a
submodule, runs that repository's whole status. A work tree of 100,000 files took 3.4 s, during
which every thread of the host — every session's event loop — stood still, and neither the call's
deadline nor its cancellation could reach it (the git tool's per-file checks came only after).

Here the same call is made through cffi (which releases the GIL around C calls) into the libgit2
pygit2 loaded (``kernel/libgit2_ffi.py``), with libgit2's ``progress_cb``: called before
each work-tree item is compared, it asks ``should_stop`` and a true answer ends libgit2's walk
there. The ``git_diff`` it makes is handed to pygit2 (``Diff.from_c``, which then owns it), so the
caller sees the very object ``diff_to_workdir`` returns. What stays uninterruptible: one file's
hash and one submodule's status (libgit2 reports no progress inside either; both GIL-free).

A Python callback needs the GIL, and taking it per work-tree item cost 100,000 files 3.2 s -> 19 s
(on a busier machine: ~5 s -> 69-321 s) while a pure-Python thread spun beside the call (each item
queued for the GIL); throttled as below, 9.6-15.5 s there (docs/workspace-tools.md). So the callback
given to libgit2 is C (``kernel/_throttle.c``, optional): per item it reads CLOCK_MONOTONIC and
only once ``ASK_INTERVAL_NS`` (10 ms) has passed since the last answer calls ``ask``, a cffi
Python callback running ``should_stop``; the first item asks at once, so an expired deadline or a
prior cancel still stops the walk before it starts. 10 ms: a stop comes at most 10 ms (plus one
item) later than per item — far inside the tool's deadline slack — while a busy Python thread,
which hands the GIL over only after its 5 ms switch interval, can delay at most one ask per 10 ms
of libgit2's work. Where the extension was not built, the per-item Python callback runs instead.

Where this cannot be set up (no cffi ABI mode, no libgit2 in the process map, a missing symbol,
no executable closures) ``tree_to_workdir`` answers None and the caller uses pygit2's own call.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

from kernel.libgit2_ffi import bind

try:
    from kernel import _throttle as throttle
except ImportError:  # no C compiler at install time: libgit2 calls the Python callback per item
    throttle = None  # type: ignore[assignment]

GIT_DIFF_OPTIONS_VERSION = 1
# How often, at most, the C progress callback asks ``should_stop`` (see the docstring).
ASK_INTERVAL_NS = 10_000_000
# git_diff_options is filled by libgit2's own init function: room for the fields not declared below.
_OPTIONS_BYTES = 1024
_CDEF = """
typedef struct git_repository git_repository;
typedef struct git_tree git_tree;
typedef struct git_diff git_diff;
typedef struct { char **strings; size_t count; } git_strarray;
typedef struct {
    unsigned int version;
    uint32_t flags;
    int ignore_submodules;
    git_strarray pathspec;
    void *notify_cb;
    int (*progress_cb)(const git_diff *, const char *, const char *, void *);
    void *payload;
} git_diff_options;
int git_diff_options_init(git_diff_options *opts, unsigned int version);
int git_diff_tree_to_workdir(git_diff **diff, git_repository *repo, git_tree *old_tree,
                             const git_diff_options *opts);
void git_diff_free(git_diff *diff);
typedef struct {
    int (*ask)(void);
    int64_t interval_ns;
    int64_t next_ns;
} throttle_payload;  /* struct throttle of kernel/_throttle.c */
"""
_PROGRESS = "int(*)(const git_diff *, const char *, const char *, void *)"


class DiffStopped(Exception):
    """``should_stop`` answered true while libgit2 walked the work tree."""


@functools.cache
def _binding() -> tuple[Any, Any] | None:
    import pygit2

    if not hasattr(pygit2.Diff, "from_c"):
        return None  # no way to hand the git_diff to pygit2
    return bind(_CDEF, ("git_diff_tree_to_workdir", "git_diff_options_init", "git_diff_free"))


def _address(ffi: Any, obj: Any, ctype: str) -> Any:
    pointer = getattr(obj, "_pointer", None)
    if not isinstance(pointer, bytes):
        return None
    return ffi.cast(ctype, int.from_bytes(pointer, sys.byteorder))


def tree_to_workdir(
    repo: Any,
    tree: Any,
    flags: int,
    should_stop: Callable[[], bool],
    *,
    ask_interval_ns: int = ASK_INTERVAL_NS,
) -> Any:
    """``tree.diff_to_workdir(flags=flags)`` as a ``pygit2.Diff``, made without the GIL and ended
    early (``DiffStopped``) once ``should_stop()`` is true between two work-tree items: asked
    before the first item, then at most once per ``ask_interval_ns`` (per item without the
    ``kernel._throttle`` extension). None when this binding is unavailable; ``pygit2.GitError``
    when libgit2 fails."""
    binding = _binding()
    if binding is None:
        return None
    ffi, lib = binding
    raw_repo = _address(ffi, repo, "git_repository *")
    raw_tree = _address(ffi, tree, "git_tree *")
    if raw_repo is None or raw_tree is None:
        return None
    buffer = ffi.new("char[]", _OPTIONS_BYTES)
    opts = ffi.cast("git_diff_options *", buffer)
    if lib.git_diff_options_init(opts, GIT_DIFF_OPTIONS_VERSION) != 0:
        return None
    opts.flags = int(flags)
    stopped: list[bool] = []

    def ask() -> int:
        if should_stop():
            stopped.append(True)
            return -1  # libgit2 ends the walk and returns this
        return 0

    def on_item(_diff: Any, _old: Any, _new: Any, _payload: Any) -> int:
        return ask()

    payload = None
    try:
        if throttle is not None and ffi.sizeof("throttle_payload") == throttle.PAYLOAD_SIZE:
            callback = ffi.callback("int(void)", ask)
            payload = ffi.new("throttle_payload *")
            payload.ask = callback
            payload.interval_ns = ask_interval_ns
            payload.next_ns = 0  # the first item asks at once
            opts.progress_cb = ffi.cast(_PROGRESS, throttle.PROGRESS)
            opts.payload = payload
        else:
            callback = ffi.callback("int(const git_diff *, const char *, const char *, void *)", on_item)
            opts.progress_cb = callback
    except Exception:  # no executable closures here (a hardened host): pygit2's diff instead
        return None
    out = ffi.new("git_diff **")
    code = lib.git_diff_tree_to_workdir(out, raw_repo, raw_tree, opts)
    # ``repo``, ``tree``, ``callback`` and ``payload`` stay alive until here: this frame holds them.
    if stopped or code < 0:
        if out[0] != ffi.NULL:
            lib.git_diff_free(out[0])
        if stopped:
            raise DiffStopped
        import pygit2

        raise pygit2.GitError(f"libgit2 work-tree diff failed ({code})")
    import pygit2

    # pygit2 takes the git_diff over (its Diff frees it) and keeps ``repo`` alive with it.
    return pygit2.Diff.from_c(bytes(ffi.buffer(out, ffi.sizeof("git_diff *"))), repo)
