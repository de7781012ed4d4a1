"""``PermissionPolicy(allow_read_only=True)``: read-only calls pass, everything else still asks (SPEC K-3, R-5).

It is the default of ``a3s-fleet run`` (issue 8 item 4). Whether a call is read-only comes from the
tool's declared capabilities for *that call's* arguments (``git status`` is, ``git commit`` is not),
deny and ask rules still win, and the flag travels in the snapshot, so a worker rebuilding the
session from it enforces it too.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from flows.sessions import options_from_snapshot
from kernel import PermissionPolicy, SessionOptions
from kernel.policy import Allow, Ask, Deny
from orchestrator import Agent


def test_k3_decide_allows_read_only_only_where_no_deny_or_ask_rule_matches() -> None:
    policy = PermissionPolicy(deny=["read(secret*)"], ask=["ls"], allow_read_only=True)
    assert isinstance(policy.decide("read", "src/app.py", read_only=True), Allow)
    assert isinstance(policy.decide("read", "secret.txt", read_only=True), Deny)
    assert isinstance(policy.decide("ls", None, read_only=True), Ask)
    assert isinstance(policy.decide("write", "x", read_only=False), Ask)
    assert isinstance(PermissionPolicy().decide("read", "x", read_only=True), Ask)  # off by default
    assert PermissionPolicy.from_json(policy.to_json()) == policy
    assert "allow_read_only" not in PermissionPolicy().to_json()


def test_k3_read_only_calls_run_and_mutating_ones_are_denied_without_confirmation(
    agent: Agent, workspace: Path
) -> None:
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    options = SessionOptions(
        permission_policy=PermissionPolicy(deny=["read(notes.txt)"], allow_read_only=True),
        artifact_store="memory",
    )
    session = agent.session(workspace, options)
    assert session.model_tool_call("read", {"file_path": "README.md"}).exit_code == 0
    assert session.model_tool_call("ls", {}).exit_code == 0
    assert session.model_tool_call("search", {"mode": "glob", "query": "*.py"}).exit_code == 0
    assert session.model_tool_call("git", {"command": "status"}).exit_code == 0
    denied = session.model_tool_call("read", {"file_path": "notes.txt"})
    assert denied.error_kind and denied.error_kind["type"] == "permission_denied"
    wrote = session.model_tool_call("write", {"file_path": "new.txt", "content": "x"})
    assert wrote.error_kind and wrote.error_kind["type"] == "permission_denied"
    assert not (workspace / "new.txt").exists()

    # What a worker rebuilds from the snapshot enforces the same policy.
    restored = options_from_snapshot(session.snapshot(), {})
    resumed = agent.resume(session.snapshot(), restored)
    assert resumed.kernel.policy.allow_read_only
    assert resumed.model_tool_call("ls", {}).exit_code == 0
    again = resumed.model_tool_call("write", {"file_path": "new.txt", "content": "x"})
    assert again.error_kind and again.error_kind["type"] == "permission_denied"
