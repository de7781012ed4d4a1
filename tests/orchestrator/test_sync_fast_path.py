"""The synchronous fast path of ``session.tool`` (issue 13 item 7): a plain host-tool handler called
from synchronous code runs on the caller's thread — and nothing of the governed pipeline is skipped.

Each test runs the same call through the inline path (``register_tool(..., inline=True)``, the
default) and, where it matters, through the loop path (``inline=False``) and compares what a user
can observe: the result, its projection and evidence (R-6), the events (S-5), hooks (K-3), budget,
validation (K-4), slots, deadlines and cancellation on close (K-6), contained exceptions (K-8).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from kernel import Budget, Deny, SessionOptions
from kernel.slots import Slots
from orchestrator import Agent, Session

OBJECT = {"type": "object", "properties": {"n": {"type": "integer"}}, "additionalProperties": False}


@pytest.fixture()
def agent() -> Any:
    with Agent() as a:
        yield a


def _session(agent: Agent, tmp_path: Path, **options: Any) -> Session:
    return agent.session(tmp_path, SessionOptions(artifact_store="memory", **options))


def _register(session: Session, name: str, fn: Any, *, inline: bool = True) -> None:
    session.register_tool(name, fn, description=name, parameters=OBJECT, inline=inline)


def _events(session: Session, call_ids: set[str] | None = None) -> list[tuple[str, str, str]]:
    return [(e.type, e.tool, e.origin) for e in session.events() if call_ids is None or e.call_id in call_ids]


def test_a_plain_handler_runs_on_the_callers_thread_and_a_loop_handler_does_not(
    agent: Agent, tmp_path: Path
) -> None:
    session = _session(agent, tmp_path)
    threads: dict[str, int] = {}

    def fast(args: dict[str, Any]) -> str:
        threads["fast"] = threading.get_ident()
        return "ok"

    def slow(args: dict[str, Any]) -> str:
        threads["slow"] = threading.get_ident()
        return "ok"

    _register(session, "fast", fast)
    _register(session, "slow", slow, inline=False)
    assert session.tool("fast", {}).exit_code == 0 and session.tool("slow", {}).exit_code == 0
    assert threads["fast"] == threading.get_ident() != threads["slow"]


def test_s5_r6_inline_and_loop_calls_emit_the_same_events_and_evidence(agent: Agent, tmp_path: Path) -> None:
    session = _session(agent, tmp_path)
    for name, inline in (("inline_tool", True), ("loop_tool", False)):
        _register(session, name, lambda args: "x" * 10 + str(args.get("n")), inline=inline)
    a = session.tool("inline_tool", {"n": 1})
    b = session.tool("loop_tool", {"n": 1})
    assert (
        (a.output, a.exit_code, a.error_kind)
        == (b.output, b.exit_code, b.error_kind)
        == ("x" * 10 + "1", 0, None)
    )
    ev_a, ev_b = a.metadata["a3s_tool_result_evidence"], b.metadata["a3s_tool_result_evidence"]
    assert {k: v for k, v in ev_a.items() if k != "tool"} == {k: v for k, v in ev_b.items() if k != "tool"}
    assert a.metadata.keys() == b.metadata.keys()
    by_tool: dict[str, list[Any]] = {}
    for event in session.events():
        by_tool.setdefault(event.tool, []).append(event)
    shapes = {tool: [(e.type, e.origin, sorted(e.data)) for e in events] for tool, events in by_tool.items()}
    assert shapes["inline_tool"] == shapes["loop_tool"]
    assert [e.type for e in by_tool["inline_tool"]] == ["tool_start", "tool_end"]
    assert by_tool["inline_tool"][0].origin == "host_direct_trusted"
    assert by_tool["inline_tool"][-1].data["state"] == "completed"
    assert session.active_tools() == []


def test_k4_invalid_arguments_fail_before_the_handler_runs(agent: Agent, tmp_path: Path) -> None:
    session = _session(agent, tmp_path)
    calls: list[Any] = []
    _register(session, "t", lambda args: calls.append(args) or "ok")
    result = session.tool("t", {"n": "not a number"})
    assert result.exit_code == 1 and result.error_kind["type"] == "invalid_argument"
    assert "/n" in result.output and calls == []


def test_k3_pre_hooks_deny_and_rewrite_inline_calls_and_rewrites_are_validated_again(
    agent: Agent, tmp_path: Path
) -> None:
    seen: list[tuple[str, Any]] = []

    def hook(call: Any) -> Any:
        seen.append((call.origin, dict(call.args)))
        if call.args.get("n") == 13:
            return Deny("unlucky")
        if call.args.get("n") == 7:
            return {"n": 8}
        if call.args.get("n") == 9:
            return {"n": "nine"}  # invalid: validated again
        return None

    session = _session(agent, tmp_path, pre_tool_hooks=[hook])
    got: list[Any] = []
    _register(session, "t", lambda args: got.append(threading.get_ident()) or f"n={args['n']}")
    denied = session.tool("t", {"n": 13})
    assert denied.error_kind["type"] == "hook_denied" and "unlucky" in denied.output
    assert session.tool("t", {"n": 7}).output == "n=8"
    assert session.tool("t", {"n": 9}).error_kind["type"] == "invalid_argument"
    assert got == [threading.get_ident()]  # only the rewritten call ran, on this thread
    assert [origin for origin, _ in seen] == ["host_direct_trusted"] * 3
    ends = [e for e in session.events() if e.type == "tool_end"]
    assert [e.data["state"] for e in ends] == ["rejected", "completed", "failed"]


def test_k3_an_async_hook_sends_the_call_to_the_loop_and_still_runs(agent: Agent, tmp_path: Path) -> None:
    async def hook(call: Any) -> Any:
        return {"n": call.args["n"] + 1}

    session = _session(agent, tmp_path, pre_tool_hooks=[hook])
    where: list[int] = []
    _register(session, "t", lambda args: where.append(threading.get_ident()) or f"n={args['n']}")
    assert session.tool("t", {"n": 1}).output == "n=2"
    assert where and where[0] != threading.get_ident()


def test_k3_a_sync_hook_returning_an_awaitable_is_awaited_on_the_loop(agent: Agent, tmp_path: Path) -> None:
    async def rewrite(n: int) -> dict[str, int]:
        return {"n": n * 10}

    def hook(call: Any) -> Any:
        return rewrite(call.args["n"])  # a plain function handing back a coroutine

    session = _session(agent, tmp_path, pre_tool_hooks=[hook])
    _register(session, "t", lambda args: f"n={args['n']}")
    assert session.tool("t", {"n": 4}).output == "n=40"


def test_k3_post_hook_replacement_is_redacted_and_projected(agent: Agent, tmp_path: Path) -> None:
    from kernel.result import ToolResult

    token = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"

    def post(call: Any) -> Any:
        return ToolResult.success(call.tool, f"replaced, token {token}")

    session = _session(agent, tmp_path, post_tool_hooks=[post])
    _register(session, "t", lambda args: f"original {token}")
    result = session.tool("t", {})
    assert result.output.startswith("replaced") and token not in result.output
    assert "a3s_tool_result_evidence" in result.metadata


def test_budget_counts_inline_calls_and_rejects_past_the_limit(agent: Agent, tmp_path: Path) -> None:
    session = _session(agent, tmp_path, budget=Budget(max_tool_calls=2))
    calls: list[int] = []
    _register(session, "t", lambda args: calls.append(1) or "ok")
    assert [session.tool("t", {}).exit_code for _ in range(2)] == [0, 0]
    third = session.tool("t", {})
    assert third.error_kind["type"] == "budget_exhausted" and len(calls) == 2
    assert any(e.type == "budget_threshold" and e.data["kind"] == "hard" for e in session.events())


def test_k8_a_raising_handler_is_a_failed_result_with_its_events(agent: Agent, tmp_path: Path) -> None:
    session = _session(agent, tmp_path)

    def boom(args: dict[str, Any]) -> str:
        raise LookupError("no such thing")

    _register(session, "t", boom)
    result = session.tool("t", {})
    assert result.exit_code == 1 and "LookupError" in result.output and "Traceback" not in result.output
    types = [e.type for e in session.events()]
    assert types == ["tool_start", "tool_error", "tool_end"]
    assert session.active_tools() == []


def test_a_late_inline_body_is_a_timeout_and_a_loop_body_is_abandoned_on_time(
    agent: Agent, tmp_path: Path
) -> None:
    """The documented difference: an inline body cannot be abandoned; its overrun becomes ``timeout``."""
    session = _session(agent, tmp_path, tool_timeouts_ms={"late": 100, "late_loop": 100})
    _register(session, "late", lambda args: time.sleep(0.4) or "done")
    _register(session, "late_loop", lambda args: time.sleep(0.4) or "done", inline=False)
    t0 = time.monotonic()
    inline = session.tool("late", {})
    inline_s = time.monotonic() - t0
    assert inline.error_kind["type"] == "timeout" and inline.error_kind["op"] == "late"
    assert inline_s >= 0.4 and inline.error_kind["duration_ms"] >= 400
    t0 = time.monotonic()
    abandoned = session.tool("late_loop", {})
    assert abandoned.error_kind["type"] == "timeout" and time.monotonic() - t0 < 0.4
    ends = [e.data["state"] for e in session.events() if e.type == "tool_end"]
    assert ends == ["failed", "failed"]


def test_slots_bound_inline_and_loop_calls_together_without_overtaking(agent: Agent, tmp_path: Path) -> None:
    """tool_slots=1: four threads calling inline and a loop-path call never run the tool twice at once."""
    session = _session(agent, tmp_path, tool_slots={"t": 1})
    running, peak, lock = [0], [0], threading.Lock()

    def body(args: dict[str, Any]) -> str:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.01)
        with lock:
            running[0] -= 1
        return "ok"

    _register(session, "t", body)
    results: list[int] = []

    def caller() -> None:
        for _ in range(10):
            results.append(session.tool("t", {}).exit_code)

    threads = [threading.Thread(target=caller) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert results == [0] * 40 and peak[0] == 1


def test_k6_close_marks_a_running_inline_call_cancelled_and_waits_for_it(
    agent: Agent, tmp_path: Path
) -> None:
    session = _session(agent, tmp_path)
    started = threading.Event()
    release = threading.Event()

    def body(args: dict[str, Any]) -> str:
        started.set()
        release.wait(10)
        return "finished"

    _register(session, "t", body)
    box: list[Any] = []
    caller = threading.Thread(target=lambda: box.append(session.tool("t", {})))
    caller.start()
    assert started.wait(10)
    closer = threading.Thread(target=session.close)
    closer.start()
    time.sleep(0.1)
    assert closer.is_alive()  # close waits for the running call to settle
    release.set()
    caller.join(10)
    closer.join(10)
    (result,) = box
    assert result.error_kind == {"type": "cancelled", "op": "t"} and "session closed" in result.output
    assert [e.data["state"] for e in session.events() if e.type == "tool_end"] == ["cancelled"]
    after = session.tool("t", {})
    assert after.error_kind["type"] == "cancelled"


def test_a_blocking_call_from_the_loop_thread_is_still_refused(agent: Agent, tmp_path: Path) -> None:
    session = _session(agent, tmp_path)
    _register(session, "plain", lambda args: "ok")

    async def nested(args: dict[str, Any]) -> str:
        try:
            session.tool("plain", {})
        except RuntimeError as exc:
            return f"refused: {exc}"
        return "ran"

    session.register_tool("nested", nested, description="n", parameters={"type": "object"})
    assert session.tool("nested", {}).output.startswith("refused: blocking SDK call")


async def test_slots_are_fifo_and_a_cancelled_waiter_passes_its_slot_on() -> None:
    import asyncio

    slots = Slots(1)
    assert slots.try_acquire() and not slots.try_acquire()
    order: list[str] = []

    async def take(name: str) -> None:
        await slots.acquire()
        order.append(name)

    first = asyncio.create_task(take("first"))
    doomed = asyncio.create_task(take("doomed"))
    last = asyncio.create_task(take("last"))
    await asyncio.sleep(0)
    assert not slots.try_acquire()  # free slots go to the queue first
    doomed.cancel()
    slots.release()
    await first
    slots.release()
    await last
    assert order == ["first", "last"] and doomed.cancelled()
    slots.release()
    assert slots.in_use == 0 and slots.try_acquire()
