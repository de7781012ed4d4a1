"""The kernel's origin rules, permission gate, hooks and confirmation, end to end (SPEC K-1..K-4, S-4)."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from kernel import Deny, PermissionPolicy, SessionOptions, ToolResult
from kernel.errors import InvalidArgument
from kernel.spec import ToolSpec
from orchestrator import Agent

ECHO_SCHEMA = {
    "type": "object",
    "properties": {"text": {"type": "string"}, "n": {"type": "integer", "minimum": 0}},
    "required": ["text"],
    "additionalProperties": False,
}


def _origins(session: Any, tool: str) -> list[str]:
    return [e.origin for e in session.events() if e.type == "tool_start" and e.tool == tool]


def test_k1_trusted_host_direct_skips_deny_policy_but_not_pre_hook(agent: Agent, workspace: Path) -> None:
    seen: list[str] = []

    def hook(inp: Any) -> Any:
        seen.append(inp.origin)
        if inp.args.get("file_path") == "secret.txt":
            return Deny("no secrets", retryable=False)
        return None

    opts = SessionOptions(permission_policy=PermissionPolicy(deny=["read"]), pre_tool_hooks=[hook])
    s = agent.session(workspace, opts)
    ok = s.tool("read", {"file_path": "README.md"})
    assert ok.exit_code == 0 and "hello world" in ok.output
    blocked = s.tool("read", {"file_path": "secret.txt"})
    assert blocked.exit_code == 1
    assert blocked.error_kind == {
        "type": "hook_denied",
        "reason": "no secrets",
        "retryable": False,
        "retry_after_ms": None,
    }
    assert seen == ["host_direct_trusted", "host_direct_trusted"]


def test_k1_governed_host_direct_is_denied_by_policy(agent: Agent, workspace: Path) -> None:
    s = agent.session(
        workspace, SessionOptions(permission_policy=PermissionPolicy(deny=["read(*.md)"], allow=["read"]))
    )
    denied = s.governed_tool("read", {"file_path": "README.md"})
    assert denied.exit_code == 1
    assert denied.error_kind and denied.error_kind["type"] == "permission_denied"
    assert "blocked by permission policy" in denied.output
    allowed = s.governed_tool("read", {"file_path": "notes.txt", "limit": 1})
    assert allowed.exit_code == 0
    assert [e.type for e in s.events() if e.type == "permission_denied"] == ["permission_denied"]


def test_k1_host_direct_batch_children_are_trusted_host_nested(agent: Agent, workspace: Path) -> None:
    s = agent.session(workspace, SessionOptions(permission_policy=PermissionPolicy(deny=["read"])))
    res = s.tool("batch", {"invocations": [{"tool": "read", "args": {"file_path": "README.md"}}]})
    assert res.exit_code == 0, res.output
    assert _origins(s, "read") == ["trusted_host_nested"]


def test_k1_governed_batch_children_are_governed_nested(agent: Agent, workspace: Path) -> None:
    s = agent.session(
        workspace, SessionOptions(permission_policy=PermissionPolicy(allow=["batch"], deny=["read"]))
    )
    res = s.governed_tool("batch", {"invocations": [{"tool": "read", "args": {"file_path": "README.md"}}]})
    assert _origins(s, "read") == ["governed_nested"]
    # The child went through the full gate and was refused; the batch itself reports it.
    assert res.exit_code == 1
    assert res.metadata["results"][0]["error_kind"]["type"] == "permission_denied"


def test_k1_agent_batch_children_are_governed_nested(agent: Agent, workspace: Path) -> None:
    s = agent.session(workspace, SessionOptions(permission_policy=PermissionPolicy(allow=["batch", "read"])))
    res = s.model_tool_call("batch", {"invocations": [{"tool": "read", "args": {"file_path": "README.md"}}]})
    assert res.exit_code == 0
    assert _origins(s, "batch") == ["agent"]
    assert _origins(s, "read") == ["governed_nested"]


def test_k2_host_tool_nested_calls_are_governed_even_under_trusted_host_direct(
    agent: Agent, workspace: Path
) -> None:
    """A custom tool nests only through InvocationRuntime, which always yields governed_nested."""
    s = agent.session(workspace, SessionOptions(permission_policy=PermissionPolicy(deny=["read"])))

    async def wrapper(args: dict[str, Any], runtime: Any) -> ToolResult:
        return await runtime.invoke_tool("read", {"file_path": "README.md"})

    s.register_tool("wrapper", wrapper, description="nests a read", parameters={"type": "object"})
    res = s.tool("wrapper", {})
    assert _origins(s, "read") == ["governed_nested"]
    assert res.error_kind and res.error_kind["type"] == "permission_denied"


def test_k2_dynamic_tools_cannot_claim_builtin_or_orchestrator_trust(agent: Agent, workspace: Path) -> None:
    s = agent.session(workspace, SessionOptions(permission_policy=PermissionPolicy(deny=["read"])))

    async def body(ctx: Any, args: Any) -> ToolResult:
        return await ctx.invoke("read", {"file_path": "README.md"})

    fake = ToolSpec(
        name="fake_batch", description="x", parameters={"type": "object"}, run=body, orchestrator=True
    )
    s.kernel.registry.register(fake)
    s.tool("fake_batch", {})
    assert _origins(s, "read") == ["governed_nested"]
    with pytest.raises(InvalidArgument):
        s.kernel.registry.register(
            ToolSpec(
                name="x2",
                description="x",
                parameters={"type": "object"},
                run=body,
                orchestrator=True,
                builtin=True,
            )
        )


def test_s2_builtins_cannot_be_shadowed_or_unregistered(agent: Agent, workspace: Path) -> None:
    s = agent.session(workspace)
    with pytest.raises(InvalidArgument):
        s.register_tool("read", lambda a: "x", description="shadow", parameters={"type": "object"})
    assert s.unregister_tool("read") is False
    s.register_tool("mine", lambda a: "x", description="mine", parameters={"type": "object"})
    assert s.unregister_tool("mine") is True


def test_k4_invalid_args_never_reach_tool_body_or_confirmation(agent: Agent, workspace: Path) -> None:
    calls: list[Any] = []
    confirmations: list[Any] = []

    def confirm(req: Any) -> bool:
        confirmations.append(req)
        return True

    s = agent.session(workspace, SessionOptions(confirmation=confirm))
    s.register_tool("echo", lambda a: calls.append(a) or "ok", description="echo", parameters=ECHO_SCHEMA)
    bad = s.governed_tool("echo", {"text": "x", "n": -1})
    assert bad.exit_code == 1 and bad.error_kind and bad.error_kind["type"] == "invalid_argument"
    assert "/n:" in bad.output
    extra = s.model_tool_call("read", {"file_path": "README.md", "bogus": 1})
    assert extra.error_kind and extra.error_kind["type"] == "invalid_argument"
    assert "/bogus" in extra.output
    nested = s.model_tool_call("read", {"files": [{"path": "a", "limit": "3"}]})
    assert "/files/0/limit" in nested.output
    assert calls == [] and confirmations == []
    good = s.governed_tool("echo", {"text": "x"})
    assert good.exit_code == 0 and len(calls) == 1 and len(confirmations) == 1


def test_k3_pre_hook_rewrite_is_validated_again(agent: Agent, workspace: Path) -> None:
    s = agent.session(workspace, SessionOptions(pre_tool_hooks=[lambda inp: {"file_path": 42}]))
    res = s.tool("read", {"file_path": "README.md"})
    assert res.error_kind and res.error_kind["type"] == "invalid_argument"
    s2 = agent.session(
        workspace, SessionOptions(pre_tool_hooks=[lambda inp: {"file_path": "notes.txt", "limit": 1}])
    )
    res2 = s2.tool("read", {"file_path": "README.md"})
    assert res2.exit_code == 0 and "line 1" in res2.output


def test_k3_pre_hook_rewrite_cannot_escape_permission_policy(agent: Agent, workspace: Path) -> None:
    hook = lambda inp: {"file_path": "README.md"}  # noqa: E731
    opts = SessionOptions(
        permission_policy=PermissionPolicy(allow=["read(notes.txt)"], deny=["read(README.md)"]),
        pre_tool_hooks=[hook],
    )
    res = agent.session(workspace, opts).governed_tool("read", {"file_path": "notes.txt"})
    assert res.error_kind and res.error_kind["type"] == "permission_denied"


def test_k3_post_hook_sees_result_and_can_replace_it(agent: Agent, workspace: Path) -> None:
    seen: list[Any] = []

    def post(inp: Any) -> ToolResult:
        seen.append((inp.tool, inp.result.exit_code, inp.duration_ms >= 0))
        return ToolResult.success(inp.tool, "replaced")

    res = agent.session(workspace, SessionOptions(post_tool_hooks=[post])).tool("ls", {})
    assert res.output == "replaced" and seen == [("ls", 0, True)]
    assert res.metadata["a3s_tool_result_evidence"]["original_bytes"] == len("replaced")


def test_k3_ask_without_confirmation_handler_is_denied(agent: Agent, workspace: Path) -> None:
    res = agent.session(workspace).model_tool_call("read", {"file_path": "README.md"})
    assert res.error_kind == {"type": "permission_denied", "reason": "missing_confirmation_manager"}


def test_k3_confirmation_sync_async_reject_and_timeout(agent: Agent, workspace: Path) -> None:
    async def approve(req: Any) -> bool:
        assert req.tool == "read" and req.origin == "agent"
        return True

    assert (
        agent.session(workspace, SessionOptions(confirmation=approve))
        .model_tool_call("read", {"file_path": "README.md"})
        .exit_code
        == 0
    )
    rejected = agent.session(workspace, SessionOptions(confirmation=lambda r: False)).model_tool_call(
        "read", {"file_path": "README.md"}
    )
    assert rejected.error_kind == {"type": "confirmation_rejected", "reason": "rejected"}

    async def slow(req: Any) -> bool:
        await asyncio.sleep(5)
        return True

    opts = SessionOptions(confirmation=slow, confirmation_timeout_ms=100)
    timed = agent.session(workspace, opts).model_tool_call("read", {"file_path": "README.md"})
    assert timed.error_kind == {"type": "confirmation_rejected", "reason": "timeout"}


def test_k3_allow_rule_skips_confirmation_and_deny_beats_ask_beats_allow(
    agent: Agent, workspace: Path
) -> None:
    asked: list[str] = []
    opts = SessionOptions(
        permission_policy=PermissionPolicy(allow=["read", "ls"], ask=["read(notes*)"], deny=["read(*.md)"]),
        confirmation=lambda r: asked.append(r.args["file_path"]) or True,
    )
    s = agent.session(workspace, opts)
    assert s.model_tool_call("read", {"file_path": "src/app.py"}).exit_code == 0
    assert s.model_tool_call("read", {"file_path": "notes.txt", "limit": 1}).exit_code == 0
    assert s.model_tool_call("read", {"file_path": "README.md"}).error_kind["type"] == "permission_denied"  # type: ignore[index]
    assert asked == ["notes.txt"]


def test_k3_skill_restriction_applies_to_model_side_only(agent: Agent, workspace: Path) -> None:
    opts = SessionOptions(
        skill_allowed_tools=frozenset({"ls"}), permission_policy=PermissionPolicy(allow=["*"])
    )
    s = agent.session(workspace, opts)
    assert s.model_tool_call("read", {"file_path": "README.md"}).error_kind == {
        "type": "permission_denied",
        "reason": "skill_restriction",
    }
    assert s.model_tool_call("ls", {}).exit_code == 0
    assert s.tool("read", {"file_path": "README.md"}).exit_code == 0


def test_k6_close_cancels_running_host_direct_call(workspace: Path) -> None:
    agent = Agent()
    try:
        s = agent.session(workspace)
        started = threading.Event()

        async def forever(args: dict[str, Any]) -> str:
            started.set()
            await asyncio.sleep(60)
            return "never"

        s.register_tool("forever", forever, description="sleeps", parameters={"type": "object"})
        box: list[ToolResult] = []
        t = threading.Thread(target=lambda: box.append(s.tool("forever", {})))
        t.start()
        assert started.wait(5)
        assert [a["tool"] for a in s.active_tools()] == ["forever"]
        t0 = time.monotonic()
        s.close()
        t.join(5)
        assert time.monotonic() - t0 < 5
        assert box and box[0].error_kind == {"type": "cancelled", "op": "forever"}
        assert s.active_tools() == []
        after = s.tool("ls", {})
        assert after.error_kind and after.error_kind["type"] == "cancelled"
    finally:
        agent.close()


def test_k3_timeout_is_typed_with_op_and_duration(agent: Agent, workspace: Path) -> None:
    s = agent.session(workspace, SessionOptions(tool_timeouts_ms={"slow": 200}))

    async def slow(args: dict[str, Any]) -> str:
        await asyncio.sleep(10)
        return "late"

    s.register_tool("slow", slow, description="slow", parameters={"type": "object"})
    t0 = time.monotonic()
    res = s.tool("slow", {})
    assert time.monotonic() - t0 < 2
    assert res.error_kind and res.error_kind["type"] == "timeout" and res.error_kind["op"] == "slow"
    assert 150 <= res.error_kind["duration_ms"] < 2000


def test_k3_per_tool_slots_serialize_calls(agent: Agent, workspace: Path) -> None:
    s = agent.session(workspace, SessionOptions(tool_slots={"one_at_a_time": 1}))
    running = 0
    peak = 0

    async def body(args: dict[str, Any]) -> str:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.05)
        running -= 1
        return "ok"

    s.register_tool("one_at_a_time", body, description="x", parameters={"type": "object"})

    async def many() -> list[ToolResult]:
        return list(await asyncio.gather(*(s.tool_async("one_at_a_time", {}) for _ in range(4))))

    results = asyncio.run(many())
    assert all(r.exit_code == 0 for r in results) and peak == 1


def test_k3_recursion_depth_is_limited(agent: Agent, workspace: Path) -> None:
    s = agent.session(
        workspace, SessionOptions(max_nesting_depth=3, permission_policy=PermissionPolicy(allow=["*"]))
    )

    async def recurse(args: dict[str, Any], runtime: Any) -> ToolResult:
        return await runtime.invoke_tool("recurse", {})

    s.register_tool("recurse", recurse, description="x", parameters={"type": "object"})
    res = s.tool("recurse", {})
    kinds = [e.data.get("error_kind", {}).get("type") for e in s.events() if e.type == "tool_error"]
    assert "recursion_limit" in kinds
    assert res.exit_code == 1


def test_k3_unknown_tool_fails_with_evidence(agent: Agent, workspace: Path) -> None:
    res = agent.session(workspace).tool("nope", {})
    assert res.error_kind == {"type": "not_found", "path": "nope"}
    assert res.output == "Unknown tool: nope"
    assert "a3s_tool_result_evidence" in res.metadata and "a3s_tool_result_transform_binding" in res.metadata


def test_k3_output_is_sanitised_by_secret_redactor(agent: Agent, workspace: Path) -> None:
    (workspace / "leak.txt").write_text("key=AKIAABCDEFGHIJKLMNOP\n")
    res = agent.session(workspace).tool("read", {"file_path": "leak.txt"})
    assert "AKIA" not in res.output and "[REDACTED]" in res.output


def test_s5_events_are_ordered_per_call_with_ids_origin_and_timing(agent: Agent, workspace: Path) -> None:
    s = agent.session(workspace)
    s.tool("batch", {"invocations": [{"tool": "ls", "args": {}}, {"tool": "nope", "args": {}}]})
    events = list(s.events())
    batch_start = next(e for e in events if e.tool == "batch" and e.type == "tool_start")
    children = [e for e in events if e.parent_call_id == batch_start.call_id]
    assert {e.tool for e in children} == {"ls", "nope"}
    for call_id in {e.call_id for e in events}:
        types = [e.type for e in events if e.call_id == call_id]
        assert types[0] == "tool_start" and types[-1] == "tool_end"
        assert [e.seq for e in events if e.call_id == call_id] == sorted(
            e.seq for e in events if e.call_id == call_id
        )
    end = next(e for e in events if e.type == "tool_end" and e.tool == "batch")
    assert end.data["duration_ms"] >= 0 and end.origin == "host_direct_trusted"
    assert any(e.type == "tool_error" and e.tool == "nope" for e in events)


def test_s4_hidden_tools_are_callable_but_still_governed(agent: Agent, workspace: Path) -> None:
    """Visibility is not authorization: a hidden alias costs no schema tokens yet still passes the kernel."""
    ran: list[int] = []
    s = agent.session(workspace, SessionOptions(permission_policy=PermissionPolicy(deny=["alias"])))
    s.register_tool(
        "alias",
        lambda a: ran.append(1) or "ok",
        description="x",
        parameters={"type": "object"},
        visible=False,
    )
    assert "alias" not in {d["name"] for d in s.tool_definitions()}
    denied = s.model_tool_call("alias", {})
    assert denied.error_kind and denied.error_kind["type"] == "permission_denied" and ran == []
    assert s.tool("alias", {}).exit_code == 0 and ran == [1]


def test_k7_docs_say_host_direct_is_not_end_user_authorization() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "kernel.md").read_text()
    assert "Host-direct is not end-user authorization (K-7)" in text
    assert "authenticate and authorize" in text
