"""The git tool never writes or deletes through a symlink the model planted (SPEC B-6, K-3, K-8).

Found by the issue-15 attack run: libgit2 writes checked-out files by path and follows a symlink it
does not know about. A sandboxed command (which may write anything in the workspace) made ``evil``
a symlink to a directory outside, then model-side ``git stash`` (untracked files included: the
model's own content) and ``git checkout stash@{0}^3 --force`` wrote that content outside the
workspace as the host user (root on CI); ``git stash`` alone, after a tracked directory was swapped
for such a symlink, overwrote the outside file of the same name with HEAD's content; a tracked file
swapped for a symlink to an outside file was overwritten by a forced checkout. Every attack runs
through the public path: model-origin calls on an embedded session, bash in the real sandbox.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kernel import PermissionPolicy, SessionOptions
from orchestrator import Agent
from tests.tools.bash_sandbox_support import host_visible_dir, needs_bwrap
from tools.git.testing import Link, RepoBuilder

pytestmark = needs_bwrap


@pytest.fixture
def session(tmp_path: Path) -> Iterator[tuple[object, Path]]:
    b = RepoBuilder(tmp_path / "repo")
    b.commit({"a.txt": "a\n", "dir/t.txt": "tracked\n"}, "init")
    b.commit({"a.txt": "a2\n"}, "second")
    policy = PermissionPolicy(allow=["bash", "git", "read"])
    with Agent() as agent:
        yield agent.session(str(b.path), options=SessionOptions(permission_policy=policy)), b.path


def _contents(directory: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in directory.iterdir()}


def _ok(result) -> None:  # type: ignore[no-untyped-def]
    assert result.exit_code == 0, result.output


def test_b6_checkout_of_model_content_never_lands_outside(session):
    s, _root = session
    with host_visible_dir() as outside:
        _ok(s.model_tool_call("bash", {"command": "mkdir evil && echo payload > evil/owned.txt"}))
        _ok(s.model_tool_call("git", {"command": "stash", "message": "x", "include_untracked": True}))
        _ok(s.model_tool_call("bash", {"command": f"ln -s {outside} evil"}))
        for force in (False, True):
            result = s.model_tool_call("git", {"command": "checkout", "ref": "stash@{0}^3", "force": force})
            if force:  # discarding local changes removes the link; the content lands inside
                _ok(result)
            else:
                assert result.error_kind["type"] == "version_conflict", result.output
                assert "evil" in result.output and "symlink" in result.output
            assert _contents(outside) == {}
        assert not (_root / "evil").is_symlink()
        assert (_root / "evil" / "owned.txt").read_text() == "payload\n"


def test_b6_stash_refuses_to_reset_through_a_swapped_directory(session):
    s, root = session
    with host_visible_dir() as outside:
        (outside / "t.txt").write_text("outside original\n")
        _ok(
            s.model_tool_call(
                "bash", {"command": f"rm -rf dir && ln -s {outside} dir && echo changed > a.txt"}
            )
        )
        result = s.model_tool_call("git", {"command": "stash", "message": "y"})
        assert result.error_kind["type"] == "version_conflict", result.output
        assert "dir" in result.output and "symlink" in result.output
        assert _contents(outside) == {"t.txt": "outside original\n"}
        assert (root / "a.txt").read_text() == "changed\n"  # nothing was stashed either


def test_b6_forced_checkout_does_not_write_through_a_swapped_file(session):
    s, root = session
    with host_visible_dir() as outside:
        (outside / "x").write_text("outside original\n")
        _ok(s.model_tool_call("bash", {"command": f"rm a.txt && ln -s {outside}/x a.txt"}))
        result = s.model_tool_call("git", {"command": "checkout", "ref": "main"})
        assert result.error_kind["type"] == "version_conflict", result.output
        _ok(s.model_tool_call("git", {"command": "checkout", "ref": "main", "force": True}))
        assert _contents(outside) == {"x": "outside original\n"}
        assert not (root / "a.txt").is_symlink() and (root / "a.txt").read_text() == "a2\n"


def test_b6_tracked_symlinks_still_check_out(tmp_path):
    """A symlink the repository itself records is libgit2's to replace (it does so safely)."""
    b = RepoBuilder(tmp_path / "repo")
    with host_visible_dir() as outside:
        b.commit({"a.txt": "a\n", "link": Link(str(outside))}, "with a link")
        b.commit({"link": None, "link/inside.txt": "now a directory\n"}, "link becomes a directory")
        with Agent() as agent:
            s = agent.session(
                str(b.path), options=SessionOptions(permission_policy=PermissionPolicy(allow=["git"]))
            )
            _ok(s.model_tool_call("git", {"command": "checkout", "ref": "HEAD~1"}))
            assert (b.path / "link").is_symlink()
            _ok(s.model_tool_call("git", {"command": "checkout", "ref": "main"}))
        assert (b.path / "link" / "inside.txt").read_text() == "now a directory\n"
        assert _contents(outside) == {}
