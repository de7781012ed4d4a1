"""Fleet branches keep the session's host hooks (SPEC K-3, F-1): pre-hooks run before a branch is
sent — a denial never reaches a worker, a rewrite is what the worker runs — and post-hooks see the
worker's result."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kernel import Deny, SessionOptions, ToolResult
from orchestrator import Agent
from orchestrator.fanout import Branch
from tests.fleet.conftest import FleetEnv, WorkerProcess

pytestmark = pytest.mark.fleet


def test_k3_pre_and_post_hooks_apply_to_fleet_branches(
    fleet: FleetEnv, shared_workers: list[WorkerProcess], tmp_path: Path
) -> None:
    (tmp_path / "public.txt").write_text("public\n")
    (tmp_path / "secret.txt").write_text("secret\n")
    (tmp_path / "other.txt").write_text("other\n")
    seen: list[str] = []

    def pre(call: Any) -> Any:
        path = call.args.get("file_path")
        if path == "secret.txt":
            return Deny("no secrets", retryable=False)
        if path == "old.txt":
            return {"file_path": "other.txt"}
        return None

    def post(call: Any) -> ToolResult | None:
        seen.append(call.result.output.splitlines()[0])
        return None

    options = SessionOptions(pre_tool_hooks=[pre], post_tool_hooks=[post])
    with Agent(fleet.settings()) as agent:
        session = agent.session(tmp_path, options)
        fan = session.fan_out(
            [
                Branch("read", {"file_path": "public.txt"}, "public"),
                Branch("read", {"file_path": "secret.txt"}, "secret"),
                Branch("read", {"file_path": "old.txt"}, "rewritten"),
            ],
            allow_partial_failure=True,
        )
    public, secret, rewritten = (o.result for o in fan.outcomes)
    assert public is not None and "public" in public.output
    assert public.metadata["a3s_fleet"]["worker"]  # it really ran on a worker
    assert secret is not None and secret.error_kind == {
        "type": "hook_denied",
        "reason": "no secrets",
        "retryable": False,
        "retry_after_ms": None,
    }
    assert "a3s_fleet" not in secret.metadata  # refused here: never sent
    assert rewritten is not None and "other" in rewritten.output
    assert sorted(seen) == sorted(["     1\tpublic", "     1\tother"])
