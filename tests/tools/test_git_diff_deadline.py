"""A work-tree ``git diff`` ends at its call's deadline or cancellation, and leaves the loop running (SPEC K-6, K-8).

pygit2's ``diff_to_workdir`` was one libgit2 call holding the GIL: it hashes every tracked
work-tree file and runs a submodule's whole status. 48 changed 16 MiB files took ~3.5 s here,
during which neither ``timeout_ms`` nor a cancellation could stop it (the per-file check came only
after) and every session's event loop stood still. Now the call is made without the GIL and
libgit2 asks between files whether to go on (``kernel/gitdiff.py``). Real repositories, real files.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from pathlib import Path

import pygit2
import pytest

from kernel.errors import ToolError
from kernel.testing import make_context
from kernel.workspace import LocalWorkspace
from tests.tools.loop_ticker import while_ticking
from tools.git import TOOL
from tools.git.read_ops import WORKDIR_DIFF_FLAGS
from tools.git.testing import RepoBuilder

CHANGED = 48
SPARSE_BYTES = 16 * 1024 * 1024  # zeros on disk for free; libgit2 still hashes each whole


def _many_changed(root: Path) -> RepoBuilder:
    """``CHANGED`` committed files, each now a 16 MiB (sparse) file: seconds of hashing for libgit2."""
    builder = RepoBuilder(root)
    builder.commit({f"f{i:02}.bin": f"{i}\n" for i in range(CHANGED)})
    for i in range(CHANGED):
        os.truncate(root / f"f{i:02}.bin", SPARSE_BYTES)
    return builder


async def _diff(root: Path, timeout_s: float, *, cancel_after: float | None = None) -> tuple[object, float]:
    ctx = make_context(LocalWorkspace(root), tool_name="git", timeout_s=timeout_s)
    if cancel_after is not None:
        asyncio.get_running_loop().call_later(cancel_after, ctx.cancelled.set)  # a closed session

    async def call() -> object:
        try:
            return await TOOL.run(ctx, TOOL.validate({"command": "diff"}))
        except ToolError as exc:
            return exc

    return await while_ticking(call)


async def test_k6_k8_workdir_diff_of_many_large_changed_files_stops_at_the_deadline(tmp_path: Path) -> None:
    _many_changed(tmp_path)
    started = time.monotonic()
    outcome, gap = await _diff(tmp_path, 0.5)
    elapsed = time.monotonic() - started
    assert isinstance(outcome, ToolError) and outcome.kind == "timeout", outcome
    assert outcome.data["op"] == "git"
    # The worker thread has returned (the await ended): nothing of the call runs past this point.
    assert elapsed < 1.3, f"the diff ran {elapsed:.2f} s past a 0.5 s deadline"
    assert gap < 0.3, f"the event loop stood still for {gap:.2f} s"


async def test_k6_workdir_diff_stops_when_the_call_is_cancelled(tmp_path: Path) -> None:
    _many_changed(tmp_path)
    started = time.monotonic()
    outcome, _ = await _diff(tmp_path, 60.0, cancel_after=0.3)
    assert isinstance(outcome, ToolError) and outcome.kind == "cancelled", outcome
    assert time.monotonic() - started < 1.2


async def test_k6_workdir_diff_without_the_gil_is_pygit2s_diff(tmp_path: Path) -> None:
    """Modified, deleted, untracked (in a new directory) and binary files: the same patch text
    as pygit2's own ``diff_to_workdir``."""
    builder = RepoBuilder(tmp_path)
    builder.commit({"keep.txt": "k\n", "mod.txt": "a\nb\n", "gone.txt": "g\n", "bin.dat": b"\0\1"})
    builder.write({"mod.txt": "a\nB\n", "gone.txt": None, "new/dir/n.txt": "n\n", "bin.dat": b"\0\2"})
    outcome, _ = await _diff(tmp_path, 60.0)
    assert not isinstance(outcome, ToolError), outcome
    repo = pygit2.Repository(str(tmp_path))
    theirs = repo.head.peel(pygit2.Commit).tree.diff_to_workdir(flags=WORKDIR_DIFF_FLAGS)
    assert outcome.output == theirs.patch  # type: ignore[attr-defined]
    assert outcome.metadata["files_changed"] == 4  # type: ignore[attr-defined]


# --- a big submodule --------------------------------------------------------------------------------


def _git(*args: str, cwd: Path) -> None:
    subprocess.run(
        ["git", "-c", "protocol.file.allow=always", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
    )


@pytest.fixture
def with_big_submodule(tmp_path: Path) -> Path:
    """A repository whose submodule ``sub`` has 16 files of 16 MiB whose stat data no longer
    matches its index (touched): its status hashes all of them (~1 s of libgit2)."""
    source = tmp_path / "source"
    RepoBuilder(source).commit({"a.txt": "a\n"})
    root = tmp_path / "root"
    RepoBuilder(root).commit({"top.txt": "t\n"})
    _git("submodule", "add", "-q", str(source), "sub", cwd=root)
    _git("commit", "-qm", "submodule", cwd=root)
    sub = root / "sub"
    for i in range(16):
        with open(sub / f"big{i:02}.bin", "wb") as fh:
            fh.truncate(SPARSE_BYTES)
    _git("add", ".", cwd=sub)
    _git("commit", "-qm", "big", cwd=sub)
    _git("commit", "-qam", "bump", cwd=root)
    later = time.time() + 5
    for i in range(16):
        os.utime(sub / f"big{i:02}.bin", (later, later))  # same size, new mtime: hashed to compare
    return root


async def test_k6_workdir_diff_of_a_repository_with_a_big_submodule_leaves_the_loop_running(
    with_big_submodule: Path,
) -> None:
    outcome, gap = await _diff(with_big_submodule, 120.0)
    assert not isinstance(outcome, ToolError), outcome
    assert gap < 0.3, f"the event loop stood still for {gap:.2f} s during the submodule's status"
