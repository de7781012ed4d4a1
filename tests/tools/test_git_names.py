"""git status shows a file name with a newline or control character quoted (SPEC S-5, B-6; as ls).

An untracked file named ``nl\\n M fake.txt`` printed a second status entry, `` M fake.txt``, for a
file that does not exist. Metadata keeps the names exact.
"""

from __future__ import annotations

import os
from pathlib import Path

from kernel import PermissionPolicy, SessionOptions
from orchestrator import Agent
from tools.git.testing import RepoBuilder


def test_s5_status_quotes_names_that_would_forge_entries(tmp_path: Path) -> None:
    b = RepoBuilder(tmp_path / "repo")
    b.commit({"a.txt": "a\n"}, "init")
    (b.path / "nl\n M fake.txt").write_text("y\n")
    with open(os.fsencode(b.path) + b"/bad\xff.txt", "w") as fh:
        fh.write("x\n")
    with Agent() as agent:
        s = agent.session(
            str(b.path), options=SessionOptions(permission_policy=PermissionPolicy(allow=["git"]))
        )
        result = s.model_tool_call("git", {"command": "status"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[1:] == ["Changes (2):", '  ?? "bad\\xff.txt"', '  ?? "nl\\n M fake.txt"'], result.output
    assert sorted(f["path"] for f in result.metadata["files"]) == ["bad\udcff.txt", "nl\n M fake.txt"]


def test_k3_remote_urls_never_carry_their_password(tmp_path: Path) -> None:
    """K-3, S-5: a token in a remote URL's userinfo (``https://oauth2:glpat-…@gitlab.com``) was
    printed by ``git remote`` unless its shape was a known one, and ``metadata.remotes`` (handed to
    program scripts and events) carried it whole; now both show ``[REDACTED]``."""
    b = RepoBuilder(tmp_path / "repo")
    b.commit({"a.txt": "a\n"}, "init")
    token = "glpat-SECRETSECRETSECRET12"
    b.repo.remotes.create("origin", f"https://oauth2:{token}@gitlab.com/x/y.git")
    b.repo.remotes.create("plain", "git@github.com:x/y.git")
    with Agent() as agent:
        s = agent.session(
            str(b.path), options=SessionOptions(permission_policy=PermissionPolicy(allow=["git"]))
        )
        result = s.model_tool_call("git", {"command": "remote"})
    assert result.exit_code == 0, result.output
    assert token not in result.output and token not in repr(result.metadata)
    urls = {r["name"]: r["url"] for r in result.metadata["remotes"]}
    assert urls == {
        "origin": "https://oauth2:[REDACTED]@gitlab.com/x/y.git",
        "plain": "git@github.com:x/y.git",
    }
