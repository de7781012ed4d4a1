"""The work-tree diff asks whether to stop at most once per 10 ms, not once per file (SPEC K-6, K-8).

``kernel/gitdiff.py`` runs libgit2's ``git_diff_tree_to_workdir`` without the GIL and stops it
between work-tree items. Its progress callback was a cffi Python callback, taking the GIL per item:
with a pure-Python thread spinning beside it, 100,000 files took 19 s instead of 3.2 s. Now the
callback libgit2 calls is C (``kernel/_throttle.c``): it reads the clock per item and calls back
into Python (``should_stop``) only before the first item and then once per ``ASK_INTERVAL_NS``.
These tests count ``should_stop`` calls rather than time ratios. Real repositories, real files.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pygit2
import pytest

from kernel import gitdiff
from tools.git.read_ops import WORKDIR_DIFF_FLAGS
from tools.git.testing import RepoBuilder

FILES = 3000
BIG = 48
SPARSE_BYTES = 16 * 1024 * 1024  # zeros on disk for free; libgit2 still hashes each whole


class Counter:
    def __init__(self, stop: Callable[[], bool] = lambda: False) -> None:
        self.calls = 0
        self.stop = stop

    def __call__(self) -> bool:
        self.calls += 1
        return self.stop()


def _tree(root: Path) -> tuple[pygit2.Repository, Any]:
    repo = pygit2.Repository(str(root))
    return repo, repo.head.peel(pygit2.Commit).tree


@pytest.fixture
def many_files(tmp_path: Path) -> Path:
    """``FILES`` committed small files in 30 directories, a few of them now changed."""
    builder = RepoBuilder(tmp_path)
    builder.commit({f"d{i % 30:02}/f{i}.txt": f"{i}\n" for i in range(FILES)} | {"bin.dat": b"\0\1"})
    builder.write({"d01/f1.txt": "one\n", "d02/f2.txt": None, "new/dir/n.txt": "n\n", "bin.dat": b"\0\2"})
    return tmp_path


@pytest.fixture
def big_files(tmp_path: Path) -> Path:
    """``BIG`` committed files, each now a 16 MiB (sparse) file: seconds of hashing for libgit2."""
    builder = RepoBuilder(tmp_path)
    builder.commit({f"f{i:02}.bin": f"{i}\n" for i in range(BIG)})
    for i in range(BIG):
        os.truncate(tmp_path / f"f{i:02}.bin", SPARSE_BYTES)
    return tmp_path


def test_k6_the_installed_package_carries_the_diff_throttle() -> None:
    """The test environment has the C callback built, so these tests never silently exercise only
    the per-item fallback; its payload is the struct gitdiff.py declares."""
    from kernel import _throttle

    assert gitdiff.throttle is _throttle
    binding = gitdiff._binding()
    assert binding is not None
    ffi, _ = binding
    assert ffi.sizeof("throttle_payload") == _throttle.PAYLOAD_SIZE
    assert _throttle.PROGRESS > 0


@pytest.mark.parametrize("interval_ns", [gitdiff.ASK_INTERVAL_NS, 0, 60 * 10**9])
def test_k6_throttled_workdir_diff_is_pygit2s_diff(many_files: Path, interval_ns: int) -> None:
    """Modified, deleted, untracked (in a new directory) and binary files among 3000: the same
    deltas and byte-identical patch as pygit2's own ``diff_to_workdir``, however often it asks."""
    repo, tree = _tree(many_files)
    ours = gitdiff.tree_to_workdir(repo, tree, WORKDIR_DIFF_FLAGS, Counter(), ask_interval_ns=interval_ns)
    theirs = tree.diff_to_workdir(flags=WORKDIR_DIFF_FLAGS)
    assert ours is not None
    assert ours.patch.encode() == theirs.patch.encode()
    assert [(d.status, d.old_file.path, d.new_file.path) for d in ours.deltas] == [
        (d.status, d.old_file.path, d.new_file.path) for d in theirs.deltas
    ]
    assert len(ours) == 4


def test_k6_throttled_diff_does_not_take_the_gil_per_file(many_files: Path) -> None:
    """Per-item Python callbacks (each taking the GIL) were one per file and directory; now the C
    callback asks before the first item, then only once the interval has passed since the last
    answer — so never more than once per ``ASK_INTERVAL_NS`` of the walk."""
    repo, tree = _tree(many_files)
    once = Counter()
    assert (
        gitdiff.tree_to_workdir(repo, tree, WORKDIR_DIFF_FLAGS, once, ask_interval_ns=60 * 10**9) is not None
    )
    assert once.calls == 1, "a walk shorter than the interval asks exactly once, before its first item"

    default = Counter()
    started = time.monotonic()
    assert gitdiff.tree_to_workdir(repo, tree, WORKDIR_DIFF_FLAGS, default) is not None
    elapsed = time.monotonic() - started
    assert 1 <= default.calls <= 1 + elapsed * 1e9 / gitdiff.ASK_INTERVAL_NS, (default.calls, elapsed)

    every = Counter()
    assert gitdiff.tree_to_workdir(repo, tree, WORKDIR_DIFF_FLAGS, every, ask_interval_ns=0) is not None
    assert every.calls >= FILES, "interval 0: asked before every item, as the per-item callback did"


def test_k6_without_the_extension_the_per_item_python_callback_runs(
    many_files: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where ``kernel._throttle`` was not built: libgit2 calls the Python callback per item, with
    the same diff."""
    monkeypatch.setattr(gitdiff, "throttle", None)
    repo, tree = _tree(many_files)
    counter = Counter()
    ours = gitdiff.tree_to_workdir(repo, tree, WORKDIR_DIFF_FLAGS, counter)
    assert ours is not None and ours.patch == tree.diff_to_workdir(flags=WORKDIR_DIFF_FLAGS).patch
    assert counter.calls >= FILES


def test_k6_k8_a_deadline_passing_mid_walk_stops_the_throttled_diff(big_files: Path) -> None:
    """48 changed 16 MiB files take seconds to hash; a 0.3 s deadline ends the walk within one
    file's hash (plus at most one interval) of passing."""
    repo, tree = _tree(big_files)
    started = time.monotonic()
    deadline = started + 0.3
    counter = Counter(lambda: time.monotonic() >= deadline)
    with pytest.raises(gitdiff.DiffStopped):
        gitdiff.tree_to_workdir(repo, tree, WORKDIR_DIFF_FLAGS, counter)
    elapsed = time.monotonic() - started
    assert counter.calls >= 2, "it asked again mid-walk, not only before the first item"
    assert elapsed < 1.1, f"the diff ran {elapsed - 0.3:.2f} s past a 0.3 s deadline"


@pytest.mark.parametrize("interval_ns", [gitdiff.ASK_INTERVAL_NS, 60 * 10**9])
def test_k6_k8_an_expired_deadline_stops_the_throttled_diff_before_the_walk(
    big_files: Path, interval_ns: int
) -> None:
    """An already-expired deadline or a prior cancel: the first item asks at once, and the walk
    ends there — no file is hashed (however long the interval)."""
    repo, tree = _tree(big_files)
    counter = Counter(lambda: True)
    started = time.monotonic()
    with pytest.raises(gitdiff.DiffStopped):
        gitdiff.tree_to_workdir(repo, tree, WORKDIR_DIFF_FLAGS, counter, ask_interval_ns=interval_ns)
    assert counter.calls == 1
    assert time.monotonic() - started < 0.5, "48 files of 16 MiB were not hashed"
