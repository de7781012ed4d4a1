"""The session surface follows workspace capabilities, one rule per test (SPEC S-2, S-3; REFERENCE §2)."""

from __future__ import annotations

from pathlib import Path

import pygit2

from kernel.workspace import LocalWorkspace
from orchestrator import Agent


def _names(agent: Agent, ws: object) -> set[str]:
    return set(agent.session(ws).tool_names())  # type: ignore[arg-type]


def test_s2_read_capability_gives_read_and_ls(agent: Agent, workspace: Path) -> None:
    assert {"read", "ls"} <= _names(agent, LocalWorkspace(workspace, writable=False))


def test_s2_write_capability_gives_write_edit_patch(agent: Agent, workspace: Path) -> None:
    names = _names(agent, workspace)
    assert {"write", "edit", "patch"} <= names
    assert not {"write", "edit", "patch"} & _names(agent, LocalWorkspace(workspace, writable=False))


def test_s2_exec_capability_gives_bash(agent: Agent, workspace: Path) -> None:
    assert "bash" in _names(agent, workspace)
    assert "bash" not in _names(agent, LocalWorkspace(workspace, exec_=False))


def test_s2_git_capability_gives_git_only_in_a_repository(agent: Agent, workspace: Path) -> None:
    assert "git" not in _names(agent, workspace)
    pygit2.init_repository(str(workspace))
    assert "git" in _names(agent, workspace)


def test_s3_git_tree_workspace_is_read_only(agent: Agent, workspace: Path) -> None:
    repo = pygit2.init_repository(str(workspace))
    index = repo.index
    index.add_all()
    index.write()
    sig = pygit2.Signature("t", "t@example.com")
    repo.create_commit("HEAD", sig, sig, "init", index.write_tree(), [])
    names = _names(agent, f"git:{workspace}@HEAD")
    assert {"read", "ls", "git", "batch"} <= names
    assert not names & {"write", "edit", "patch", "bash", "download"}
    s = agent.session(f"git:{workspace}@HEAD")
    assert "hello world" in s.read_file("README.md")


def test_s2_runtime_builtins_are_always_there(agent: Agent, workspace: Path) -> None:
    assert "batch" in _names(agent, LocalWorkspace(workspace, writable=False))
