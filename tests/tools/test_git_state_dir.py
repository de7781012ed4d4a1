"""The git tool's checkout never writes ``.a3s/`` (SPEC B-6, K-3, K-8).

``.a3s/`` is the host's: skills and custom agents read when a session is built, workflow logs
replayed on resume, the search index, the ``.git`` link record. Every model-side file tool refuses
it, but a model-side ``git checkout`` of a commit whose tree held ``.a3s/git-link`` (or
``.a3s/agents/x.md``) wrote it there through libgit2, forced or not, and ``changed_paths`` hid it
(internal paths are filtered from the report).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pygit2
import pytest
from pygit2.enums import FileMode

from kernel import PermissionPolicy, SessionOptions
from orchestrator import Agent
from tools.git.testing import RepoBuilder


def _commit_with_state_dir(b: RepoBuilder, files: dict[str, bytes], branch: str) -> str:
    """A branch whose tree adds ``.a3s/<name>`` files (made without a work tree, as a hostile
    upstream would ship it)."""
    repo = b.repo
    inner = repo.TreeBuilder()
    for name, data in files.items():
        inner.insert(name, repo.create_blob(data), FileMode.BLOB)
    head = repo.head.peel(pygit2.Commit)
    outer = repo.TreeBuilder(head.tree)
    outer.insert(".a3s", inner.write(), FileMode.TREE)
    sig = b.signature()
    return str(repo.create_commit(f"refs/heads/{branch}", sig, sig, "state", outer.write(), [head.id]))


@pytest.fixture
def repo_session(tmp_path: Path) -> Iterator[tuple[object, RepoBuilder]]:
    b = RepoBuilder(tmp_path / "repo")
    b.commit({"a.txt": "a\n"}, "init")
    policy = PermissionPolicy(allow=["git", "read"])
    with Agent() as agent:
        yield agent.session(str(b.path), options=SessionOptions(permission_policy=policy)), b


@pytest.mark.parametrize("force", [False, True])
def test_b6_checkout_never_writes_the_state_dir(repo_session, force):
    """B-6, K-8: refused as permission_denied{protected_path}; nothing written, HEAD unchanged."""
    s, b = repo_session
    _commit_with_state_dir(b, {"git-link": b"forged\n", "agents.md": b"x\n"}, "evil")
    head = str(b.repo.head.target)
    result = s.model_tool_call("git", {"command": "checkout", "ref": "evil", "force": force})
    assert result.exit_code == 1
    assert result.error_kind["type"] == "permission_denied", result.output
    assert result.error_kind["reason"] == "protected_path"
    assert ".a3s" in result.output
    state = b.path / ".a3s"
    assert not (state / "git-link").exists() and not (state / "agents.md").exists()
    assert str(b.repo.head.target) == head and b.repo.head.shorthand == "main"


def test_b6_checkout_leaving_the_state_dir_alone_still_works(repo_session):
    """B-6: commits whose .a3s entry equals HEAD's (here: none) check out as before."""
    s, b = repo_session
    b.commit({"b.txt": "b\n"}, "second")
    b.repo.branches.local.create("other", b.repo.head.peel(pygit2.Commit).parents[0])
    result = s.model_tool_call("git", {"command": "checkout", "ref": "other"})
    assert result.exit_code == 0, result.output
    assert not (b.path / "b.txt").exists()
