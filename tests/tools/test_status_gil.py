"""No status of a big work tree stops the host process: bash's change snapshot, the git tool (SPEC B-2, K-6).

pygit2's ``Repository.status`` holds the GIL for the whole libgit2 call: with 150,000 untracked
files (one ``touch`` loop in the sandbox) every thread of the host — every session's event loop —
stood still for 3.1 s per snapshot, two per ``bash`` call, whatever the snapshot's 400 ms budget.
The git tool's ``status`` made the same call (inside its worker thread: the event loop stood still).
``kernel/gitstatus.py`` makes the same call without the GIL. Real repositories, real files.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path

import pygit2
import pytest

from kernel import gitstatus
from kernel.testing import make_context
from kernel.workspace import LocalWorkspace
from tools.bash import changes
from tools.git import TOOL as GIT

UNTRACKED = 100_000


def _commit(repo: pygit2.Repository, root: Path, names: list[str]) -> None:
    for name in names:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(f"{name}\n")
        repo.index.add(name)
    repo.index.write()
    tree = repo.index.write_tree()
    sig = pygit2.Signature("t", "t@example.com")
    parents = [] if repo.head_is_unborn else [repo.head.target]
    repo.create_commit("HEAD", sig, sig, "c", tree, parents)


def _longest_stall(work) -> tuple[object, float]:
    """Run ``work`` in a thread while this thread ticks every 5 ms: its result and the longest
    gap between ticks (how long the GIL was withheld)."""
    box: dict[str, object] = {}
    thread = threading.Thread(target=lambda: box.setdefault("result", work()))
    longest = 0.0
    thread.start()
    last = time.monotonic()
    while thread.is_alive():
        time.sleep(0.005)
        now = time.monotonic()
        longest = max(longest, now - last)
        last = now
    thread.join()
    return box.get("result"), longest


@pytest.fixture(scope="module")
def huge_tree(tmp_path_factory) -> Path:
    """A repository with one commit and ``UNTRACKED`` untracked files (one ``touch`` loop's worth)."""
    root = tmp_path_factory.mktemp("huge")
    repo = pygit2.init_repository(str(root))
    _commit(repo, root, ["a.txt"])
    many = root / "many"
    many.mkdir()
    for i in range(UNTRACKED):
        os.close(os.open(many / f"f{i}", os.O_CREAT | os.O_WRONLY, 0o644))
    return root


def test_b2_k6_status_snapshot_of_a_huge_work_tree_leaves_the_gil_free(huge_tree):
    entries, stall = _longest_stall(lambda: changes._git_snapshot(huge_tree, time.monotonic() + 120))
    assert isinstance(entries, dict) and len(entries) == UNTRACKED
    # pygit2's own status held the GIL for the whole call: 1.5-3 s here for 100,000 files.
    assert stall < 0.3, f"the snapshot withheld the GIL for {stall:.2f} s"


async def test_k6_git_tool_status_of_a_huge_work_tree_leaves_the_event_loop_running(huge_tree):
    ctx = make_context(LocalWorkspace(huge_tree), tool_name="git")
    call = asyncio.create_task(GIT.run(ctx, GIT.validate({"command": "status"})))
    longest = 0.0
    last = time.monotonic()
    while not call.done():
        await asyncio.sleep(0.005)
        now = time.monotonic()
        longest = max(longest, now - last)
        last = now
    result = await call
    assert result.metadata["dirty_count"] == UNTRACKED, result.metadata
    assert longest < 0.3, f"the event loop stood still for {longest:.2f} s"


def test_b2_status_without_the_gil_matches_pygit2(tmp_path):
    repo = pygit2.init_repository(str(tmp_path))
    _commit(repo, tmp_path, ["keep.txt", "mod.txt", "gone.txt", "staged.txt", "dir/deep/x.txt", "ün.txt"])
    (tmp_path / ".gitignore").write_text("*.log\nbuild/\n")
    (tmp_path / "mod.txt").write_text("changed\n")
    (tmp_path / "gone.txt").unlink()
    (tmp_path / "staged.txt").write_text("staged\n")
    repo.index.add("staged.txt")
    (tmp_path / "new dir" / "sub").mkdir(parents=True)
    (tmp_path / "new dir" / "sub" / "n.txt").write_text("n\n")
    (tmp_path / "x.log").write_text("ignored\n")
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "out").write_text("ignored\n")
    (tmp_path / "ün.txt").write_text("changed too\n")
    repo.index.remove("keep.txt")
    repo.index.write()
    ours = gitstatus.status(repo, time.monotonic() + 60)
    theirs = {
        path: int(flags)
        for path, flags in repo.status(untracked_files="all").items()
        if not flags & pygit2.enums.FileStatus.IGNORED
    }
    assert ours == theirs and len(ours) == 7, (ours, theirs)


def test_b2_status_without_the_gil_stops_at_the_deadline(tmp_path):
    repo = pygit2.init_repository(str(tmp_path))
    for i in range(10):
        (tmp_path / f"u{i}").write_text("u\n")
    with pytest.raises(gitstatus.StatusStopped):
        gitstatus.status(repo, time.monotonic() - 1)
