"""``git worktree remove`` looks at the linked work tree's status without stopping the event loop (SPEC K-6).

The dirty check before removing a linked worktree was pygit2's ``Repository.status``: one libgit2
call holding the GIL, which hashes every file whose stat data changed and runs the status of every
submodule inside. 16 touched 16 MiB files stood every session's event loop still for ~1 s. Now the
check is libgit2's status through cffi (``kernel/gitstatus.py``). Real repositories, real files.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from kernel.errors import ToolError
from kernel.testing import make_context
from kernel.workspace import LocalWorkspace
from tests.tools.loop_ticker import while_ticking
from tools.git import TOOL
from tools.git.testing import RepoBuilder

BIG = 16
BIG_BYTES = 16 * 1024 * 1024


async def _git(root: Path, **args: object) -> object:
    ctx = make_context(LocalWorkspace(root), tool_name="git", timeout_s=120)
    return await TOOL.run(ctx, TOOL.validate(args))


async def test_k6_worktree_remove_of_a_big_linked_work_tree_leaves_the_loop_running(tmp_path: Path) -> None:
    builder = RepoBuilder(tmp_path)
    for i in range(BIG):
        (tmp_path / f"big{i:02}.bin").touch()
        os.truncate(tmp_path / f"big{i:02}.bin", BIG_BYTES)  # sparse: no disk written
        builder.repo.index.add(f"big{i:02}.bin")
    builder.commit({"a.txt": "a\n"})
    await _git(tmp_path, command="worktree", subcommand="create", name="wt", path="wt")
    later = time.time() + 5
    for i in range(BIG):
        os.utime(tmp_path / "wt" / f"big{i:02}.bin", (later, later))  # same size: hashed to compare
    result, gap = await while_ticking(
        lambda: _git(tmp_path, command="worktree", subcommand="remove", name="wt")  # type: ignore[arg-type,return-value]
    )
    assert result.metadata["removed"] is True, result  # type: ignore[attr-defined]
    assert not (tmp_path / "wt").exists()
    assert gap < 0.3, f"the event loop stood still for {gap:.2f} s during the work tree's status"


async def test_k6_worktree_remove_still_refuses_a_dirty_linked_work_tree(tmp_path: Path) -> None:
    builder = RepoBuilder(tmp_path)
    builder.commit({"a.txt": "a\n"})
    await _git(tmp_path, command="worktree", subcommand="create", name="wt", path="wt")
    (tmp_path / "wt" / "a.txt").write_text("changed\n")
    (tmp_path / "wt" / "new.txt").write_text("new\n")
    with pytest.raises(ToolError) as info:
        await _git(tmp_path, command="worktree", subcommand="remove", name="wt")
    assert info.value.kind == "version_conflict", info.value
    assert info.value.data["paths"] == ["a.txt", "new.txt"], info.value.data
    assert (tmp_path / "wt" / "a.txt").exists()
