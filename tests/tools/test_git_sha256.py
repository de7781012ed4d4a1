"""A sha256 repository (``git init --object-format=sha256``) is ``unsupported``, said plainly (SPEC K-8, S-2).

libgit2 here (pygit2 1.21, libgit2 1.9) cannot open a repository in the sha256 object format: it
failed as ``not_found`` "no git repository found" / "not a git repository", which sent a user
looking for a missing ``.git``. A ``git:`` view of one, and the ``git`` tool in a work tree of one,
now fail ``unsupported`` naming the object format; ``bash`` in such a work tree still runs and
reports its changed files from the mtime snapshot instead of git status.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kernel.errors import Unsupported
from kernel.workspace_names import open_workspace
from orchestrator import Agent
from tests.tools.git_cli import git as _git


@pytest.fixture()
def sha256_repo(tmp_path: Path) -> Path:
    """A real sha256 repository with one commit, made by the git command line."""
    repo = tmp_path / "r256"
    repo.mkdir()
    _git(repo, "init", "-q", "--object-format=sha256")
    (repo / "a.txt").write_text("hello\n")
    _git(repo, "add", "a.txt")
    _git(repo, "commit", "-qm", "c")
    assert "objectformat = sha256" in (repo / ".git" / "config").read_text().lower()
    return repo


def _is_unsupported_sha256(message: str, kind: dict[str, object] | None) -> bool:
    return bool(kind) and kind.get("type") == "unsupported" and "sha256" in message and "not a" not in message


def test_k8_a_git_view_of_a_sha256_repository_is_unsupported_not_missing(
    sha256_repo: Path, agent: Agent
) -> None:
    for name in (f"git:{sha256_repo}@HEAD", f"git:{sha256_repo}"):
        with pytest.raises(Unsupported) as err:
            open_workspace(name)
        assert _is_unsupported_sha256(err.value.message, err.value.to_kind()), err.value.to_kind()
        assert "libgit2" in err.value.message
        with pytest.raises(Unsupported):
            agent.session(name)


def test_k8_the_git_tool_in_a_sha256_work_tree_is_unsupported(sha256_repo: Path, agent: Agent) -> None:
    session = agent.session(str(sha256_repo))
    for args in ({"command": "status"}, {"command": "log"}, {"command": "diff"}):
        res = session.tool("git", args)
        assert res.exit_code == 1, res.output
        assert _is_unsupported_sha256(res.output, res.error_kind), (args, res.error_kind, res.output)


def test_b2_bash_in_a_sha256_work_tree_reports_changes_from_mtimes(sha256_repo: Path, agent: Agent) -> None:
    session = agent.session(str(sha256_repo))
    res = session.tool("bash", {"command": "echo more >> a.txt; echo n > new.txt"})
    assert res.exit_code == 0, res.output
    assert res.metadata["changed_paths_source"] == "mtime", res.metadata
    assert res.metadata["changed_paths"] == ["a.txt", "new.txt"], res.metadata
