"""``ls`` cursor pages (SPEC B-1) and ``batch`` fan-out, steps, bindings and partial failure (SPEC X-2; REFERENCE 4.11)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from kernel import PermissionPolicy, SessionOptions, ToolCapabilities
from orchestrator import Agent


def test_b1_ls_pages_with_opaque_cursor(agent: Agent, tmp_path: Path) -> None:
    for i in range(25):
        (tmp_path / f"f{i:02d}.txt").write_text("x")
    (tmp_path / ".a3s").mkdir()
    s = agent.session(tmp_path)
    names: list[str] = []
    cursor = ""
    while True:
        res = s.tool("ls", {"limit": 10, "cursor": cursor})
        names += [e["name"] for e in res.metadata["entries"]]
        cursor = res.metadata["page"]["next_cursor"]
        if not cursor:
            break
    assert names == sorted(f"f{i:02d}.txt" for i in range(25))
    bad = s.tool("ls", {"cursor": "not-a-cursor!"})
    assert bad.error_kind and bad.error_kind["type"] == "invalid_argument"


def _register_sleepers(session: Any, read_only: bool) -> None:
    caps = ToolCapabilities.parallel_safe_read(16) if read_only else None

    async def sleeper(args: dict[str, Any]) -> str:
        await asyncio.sleep(0.2)
        return f"slept {args.get('i')}"

    session.register_tool(
        "sleeper", sleeper, description="x", parameters={"type": "object"}, capabilities=caps
    )


def test_x2_batch_fans_out_only_read_only_idempotent_calls(agent: Agent, workspace: Path) -> None:
    par = agent.session(workspace)
    _register_sleepers(par, read_only=True)
    calls = [{"tool": "sleeper", "args": {"i": i}} for i in range(8)]
    t0 = time.monotonic()
    res = par.tool("batch", {"invocations": calls})
    assert time.monotonic() - t0 < 1.0
    assert res.metadata["execution_mode"] == "parallel" and res.metadata["applied_concurrency"] == 8

    ser = agent.session(workspace)
    _register_sleepers(ser, read_only=False)
    t0 = time.monotonic()
    res = ser.tool("batch", {"invocations": calls[:4]})
    assert time.monotonic() - t0 >= 0.8
    assert res.metadata["execution_mode"] == "serial" and res.metadata["applied_concurrency"] == 1


def test_x2_batch_concurrency_is_clamped_to_16(agent: Agent, workspace: Path) -> None:
    s = agent.session(workspace)
    _register_sleepers(s, read_only=True)
    res = s.tool("batch", {"invocations": [{"tool": "sleeper", "args": {}}] * 20, "max_concurrency": 64})
    assert res.metadata["requested_concurrency"] == 64 and res.metadata["applied_concurrency"] == 16


def test_x2_partial_failure_names_failed_indexes_and_succeeds(agent: Agent, workspace: Path) -> None:
    res = agent.session(workspace).tool(
        "batch",
        {
            "invocations": [
                {"tool": "read", "args": {"file_path": "README.md"}},
                {"tool": "read", "args": {"file_path": "nope"}},
                {"tool": "ls", "args": {}},
            ]
        },
    )
    assert res.exit_code == 0
    assert res.metadata["status"] == "partial_failure" and res.metadata["failed_indices"] == [1]
    assert "Retry only failed indices [1]; do not repeat successful items." in res.output


def test_x2_batch_limits_and_static_rejections(agent: Agent, workspace: Path) -> None:
    s = agent.session(workspace)
    too_many = s.tool("batch", {"invocations": [{"tool": "ls", "args": {}}] * 33})
    assert too_many.error_kind and too_many.error_kind["type"] == "invalid_argument"
    nested = s.tool("batch", {"invocations": [{"tool": "batch", "args": {"invocations": []}}]})
    assert "nested batch calls are not allowed" in nested.output
    dup = s.tool(
        "batch",
        {"invocations": [{"id": "a", "tool": "ls", "args": {}}, {"id": "a", "tool": "ls", "args": {}}]},
    )
    assert "duplicate invocation id" in dup.output
    step0 = s.tool("batch", {"invocations": [{"tool": "ls", "args": {}, "step": 0}]})
    assert step0.error_kind and step0.error_kind["type"] == "invalid_argument"


def test_x2_steps_and_ref_bindings(agent: Agent, workspace: Path) -> None:
    s = agent.session(workspace)
    s.register_tool(
        "emit", lambda a: '{"path": "README.md", "n": [1, 2]}', description="x", parameters={"type": "object"}
    )
    res = s.tool(
        "batch",
        {
            "invocations": [
                {"id": "src", "tool": "emit", "args": {}, "step": 1},
                {"id": "r", "tool": "read", "args": {"file_path": {"$ref": "src.output.path"}}, "step": 2},
                {"tool": "read", "args": {"file_path": {"$ref": "r2.output"}}, "step": 1},
                {"tool": "read", "args": {"file_path": {"$ref": "src.output.missing"}}, "step": 3},
            ]
        },
    )
    meta = res.metadata
    assert meta["execution_mode"] == "staged" and meta["steps"] == [1, 2, 3]
    assert meta["results"][1]["success"] is True and "hello world" in res.output
    assert meta["failed_indices"] == [2, 3]
    assert [b["index"] for b in meta["binding_errors"]] == [2, 3]


def test_x2_all_failed_batch_is_partial_failure_error(agent: Agent, workspace: Path) -> None:
    res = agent.session(workspace).tool(
        "batch", {"invocations": [{"tool": "nope", "args": {}}, {"tool": "nope2", "args": {}}]}
    )
    assert res.exit_code == 1 and res.error_kind == {"type": "partial_failure", "failed": 2, "total": 2}


def test_x2_governed_batch_children_reenter_policy(agent: Agent, workspace: Path) -> None:
    opts = SessionOptions(permission_policy=PermissionPolicy(allow=["batch", "ls"], deny=["read"]))
    res = agent.session(workspace, opts).model_tool_call(
        "batch",
        {"invocations": [{"tool": "ls", "args": {}}, {"tool": "read", "args": {"file_path": "README.md"}}]},
    )
    assert res.exit_code == 0 and res.metadata["failed_indices"] == [1]
    assert res.metadata["results"][1]["error_kind"]["type"] == "permission_denied"
