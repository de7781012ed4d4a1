"""Model-side ``write``/``edit``/``patch`` may not touch git metadata (issue 15 item 3; SPEC B-6, K-8).

An edit of ``.git/config`` (``core.fsmonitor``, ``core.worktree``) let later git calls reach outside
the workspace and made the user's next ``git status`` run a command. Governed origins (``agent``,
``governed_nested``, governed host-direct) now get ``permission_denied`` (reason ``protected_path``)
for anything inside a ``.git`` directory or file, at any depth and under any spelling that leads
there, and nothing is written. The trusted host-direct plane keeps full access.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from kernel import PermissionPolicy, SessionOptions
from orchestrator import Agent
from tools.git.testing import RepoBuilder

ALLOW_ALL = PermissionPolicy(allow=["write", "edit", "patch", "read", "batch"])


def _tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink() and ".a3s" not in p.parts
    }


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    b = RepoBuilder(tmp_path / "repo")
    b.commit({"a.txt": "alpha\n", "src/app.py": "x = 1\n"}, "init")
    root = b.path
    # A nested repository and a linked-worktree-style .git file, both at depth.
    nested = RepoBuilder(root / "vendor" / "lib")
    nested.commit({"lib.txt": "lib\n"}, "lib")
    (root / "wt").mkdir()
    (root / "wt" / ".git").write_text("gitdir: ../.git/worktrees/wt\n")
    os.symlink(".git", root / "git_alias")
    os.symlink(".git/hooks", root / "hooks_alias")
    return root


PROTECTED_PATHS = [
    ".git/config",
    ".git/hooks/pre-commit",
    ".git/info/exclude",
    ".git/new-file",
    "./.git/config",
    "src/../.git/config",
    ".git/../.git/HEAD",
    ".GIT/config",
    ".Git/hooks/post-checkout",
    ".git./config",
    ".git /config",
    "git~1/config",
    "git_alias/config",
    "hooks_alias/pre-push",
    "vendor/lib/.git/config",
    "vendor/lib/.git/hooks/pre-commit",
    "wt/.git",
    "src/.git",
]


def _governed(session: Any, plane: str, name: str, args: dict[str, Any]) -> Any:
    return session.model_tool_call(name, args) if plane == "agent" else session.governed_tool(name, args)


@pytest.mark.parametrize("plane", ["agent", "governed_host_direct"])
@pytest.mark.parametrize("path", PROTECTED_PATHS)
def test_governed_write_edit_patch_refuse_git_metadata(repo: Path, plane: str, path: str) -> None:
    before = _tree(repo)
    with Agent() as agent:
        session = agent.session(repo, SessionOptions(permission_policy=ALLOW_ALL))
        attempts = [
            ("write", {"file_path": path, "content": "[core]\n\tfsmonitor = touch /tmp/pwned\n"}),
            ("edit", {"file_path": path, "old_string": "[core]", "new_string": "[core]\n\tworktree = /"}),
            ("patch", {"diff": f"--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+evil\n"}),
            ("patch", {"diff": f"--- a/{path}\n+++ b/{path}\n@@ -1 +1 @@\n-[core]\n+[core]\n"}),
        ]
        for name, args in attempts:
            res = _governed(session, plane, name, args)
            assert res.exit_code == 1, (name, path, res.output)
            assert res.error_kind is not None and res.error_kind["type"] == "permission_denied", (
                name,
                path,
                res.error_kind,
                res.output,
            )
            assert res.error_kind.get("reason") == "protected_path", res.error_kind
    assert _tree(repo) == before


@pytest.mark.parametrize("plane", ["agent", "governed_host_direct"])
def test_every_file_a_patch_touches_is_checked_renames_and_deletes_included(repo: Path, plane: str) -> None:
    before = _tree(repo)
    diffs = [
        # Two files: the first is harmless, the second is git metadata; nothing may be written.
        "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-alpha\n+ALPHA\n"
        "--- a/.git/config\n+++ b/.git/config\n@@ -1 +1 @@\n-[core]\n+[core]\n",
        # Rename into git metadata (a hook that would run later) and out of it.
        "diff --git a/a.txt b/.git/hooks/post-checkout\nsimilarity index 100%\n"
        "rename from a.txt\nrename to .git/hooks/post-checkout\n",
        "diff --git a/.git/HEAD b/stolen-head\nsimilarity index 100%\nrename from .git/HEAD\nrename to stolen-head\n",
        # Delete.
        "--- a/.git/HEAD\n+++ /dev/null\n@@ -1 +0,0 @@\n-ref: refs/heads/main\n",
        # The apply_patch envelope.
        "*** Begin Patch\n*** Add File: .git/hooks/pre-commit\n+#!/bin/sh\n*** End Patch",
        "*** Begin Patch\n*** Update File: a.txt\n*** Move to: git_alias/hooks/pre-commit\n@@\n-alpha\n+x\n*** End Patch",
    ]
    with Agent() as agent:
        session = agent.session(repo, SessionOptions(permission_policy=ALLOW_ALL))
        for diff in diffs:
            res = _governed(session, plane, "patch", {"diff": diff})
            assert res.error_kind is not None and res.error_kind["type"] == "permission_denied", (
                diff,
                res.output,
            )
        res = _governed(
            session, plane, "patch", {"file_path": ".git/config", "diff": "@@\n-[core]\n+[core]\n"}
        )
        assert res.error_kind is not None and res.error_kind["type"] == "permission_denied"
    assert _tree(repo) == before


@pytest.mark.parametrize("redirect", ["symlink", "gitdir_file"])
def test_redirected_git_dirs_inside_the_workspace_are_protected(tmp_path: Path, redirect: str) -> None:
    """A root ``.git`` symlink or ``gitdir:`` file leads to the real git dir under another name."""
    b = RepoBuilder(tmp_path / "repo")
    b.commit({"a.txt": "a\n"}, "init")
    os.rename(b.path / ".git", b.path / "store")
    if redirect == "symlink":
        os.symlink("store", b.path / ".git")
    else:
        (b.path / ".git").write_text("gitdir: store\n")
    before = (b.path / "store" / "config").read_bytes()
    with Agent() as agent:
        session = agent.session(b.path, SessionOptions(permission_policy=ALLOW_ALL))
        for path in ("store/config", "store/hooks/pre-commit", "./store/../store/HEAD"):
            res = session.model_tool_call("write", {"file_path": path, "content": "x"})
            assert res.error_kind is not None and res.error_kind.get("reason") == "protected_path", res.output
        ok = session.model_tool_call("write", {"file_path": "storefront.txt", "content": "fine\n"})
        assert ok.exit_code == 0, ok.output
    assert (b.path / "store" / "config").read_bytes() == before


def test_trusted_host_direct_keeps_access_and_ordinary_files_still_work(repo: Path) -> None:
    with Agent() as agent:
        session = agent.session(repo, SessionOptions(permission_policy=ALLOW_ALL))
        trusted = session.tool("write", {"file_path": ".git/info/exclude", "content": "*.log\n"})
        assert trusted.exit_code == 0, trusted.output
        for name in (".gitignore", ".github/workflows/ci.yml", "src/.gitkeep", "gitignore.txt", ".gitx/a"):
            res = session.model_tool_call("write", {"file_path": name, "content": "ok\n"})
            assert res.exit_code == 0, (name, res.output)
    assert (repo / ".git" / "info" / "exclude").read_text() == "*.log\n"


@pytest.mark.parametrize("plane", ["agent", "governed_host_direct"])
def test_governed_download_refuses_git_metadata_before_any_request(repo: Path, plane: str) -> None:
    """SPEC D-1, B-6, K-8: ``download`` writes files too. A model-side download of a hook into
    ``.git/hooks/`` would run on the user's next commit, outside every sandbox — refused like
    ``write`` (``protected_path``), under every spelling, before the server sees a request. The
    trusted host-direct plane keeps full access."""
    from tests.tools.netserver import LoopbackServer, Ranged

    server = LoopbackServer()
    try:
        url = server.route("/hook", Ranged(b"#!/bin/sh\ntouch /tmp/pwned\n"))
        before = _tree(repo)
        options = SessionOptions(
            net_allow=("127.0.0.1",),
            permission_policy=PermissionPolicy(allow=["download"]),
            confirmation=lambda request: True,
        )
        with Agent() as agent:
            session = agent.session(repo, options)
            for path in PROTECTED_PATHS:
                args = {"url": url, "file_path": path, "overwrite": True}
                res = _governed(session, plane, "download", args)
                assert res.error_kind is not None and res.error_kind["type"] == "permission_denied", (
                    path,
                    res.output,
                )
                assert res.error_kind.get("reason") == "protected_path", res.error_kind
            assert server.hits() == []
            assert _tree(repo) == before
            res = session.tool("download", {"url": url, "file_path": ".git/hooks/trusted-hook"})
            assert res.exit_code == 0, res.output
            assert (repo / ".git" / "hooks" / "trusted-hook").exists()
    finally:
        server.close()
