"""Budget (hard denial before side effects, soft thresholds) and the invocation lifecycle (SPEC K-3; REFERENCE 5.2)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kernel import Budget, SessionOptions
from kernel.errors import KernelFault
from kernel.lifecycle import Lifecycle, State
from orchestrator import Agent


def test_k3_budget_denies_before_side_effects_and_emits_thresholds(agent: Agent, workspace: Path) -> None:
    ran: list[int] = []
    s = agent.session(workspace, SessionOptions(budget=Budget(max_tool_calls=3)))
    s.register_tool(
        "effect", lambda a: ran.append(1) or "done", description="x", parameters={"type": "object"}
    )
    results = [s.tool("effect", {}) for _ in range(4)]
    assert [r.exit_code for r in results] == [0, 0, 0, 1]
    assert results[3].error_kind and results[3].error_kind["type"] == "budget_exhausted"
    assert results[3].error_kind["resource"] == "tool_calls"
    assert len(ran) == 3  # the denied call never ran
    kinds = [(e.data["kind"], e.data["resource"]) for e in s.events() if e.type == "budget_threshold"]
    assert kinds == [("soft", "tool_calls"), ("hard", "tool_calls")]


def test_k3_output_byte_budget_counts_projected_output(agent: Agent, workspace: Path) -> None:
    s = agent.session(workspace, SessionOptions(budget=Budget(max_output_bytes=100)))
    first = s.tool("read", {"file_path": "notes.txt"})
    assert first.exit_code == 0
    second = s.tool("read", {"file_path": "README.md"})
    assert second.error_kind and second.error_kind["resource"] == "output_bytes"


def test_k3_wall_time_budget(agent: Agent, workspace: Path) -> None:
    s = agent.session(workspace, SessionOptions(budget=Budget(max_wall_time_ms=1)))
    import time

    time.sleep(0.01)
    res = s.tool("ls", {})
    assert res.error_kind and res.error_kind["resource"] == "wall_time_ms"


def test_k3_a_running_call_ends_where_the_wall_time_budget_ends(agent: Agent, workspace: Path) -> None:
    """K-3: the wall-time budget is a deadline for what runs, not only a check before it: a call
    admitted with 1.5 s left (a 20 s ``bash``, a nested workflow, a ``task`` whose children got the
    same remainder) ends there as ``budget_exhausted{wall_time_ms}``. Before, it ran to its own
    timeout — a workflow's is 24 h."""
    import asyncio
    import time

    from kernel import PermissionPolicy

    options = SessionOptions(
        budget=Budget(max_wall_time_ms=1500), permission_policy=PermissionPolicy(allow=["*"])
    )
    s = agent.session(workspace, options)

    async def slow(_args: Any) -> str:
        await asyncio.sleep(20)
        return "too late"

    s.register_tool("slow", slow, description="x", parameters={"type": "object"})
    started = time.monotonic()
    res = s.tool("slow", {})
    assert time.monotonic() - started < 5
    assert res.error_kind is not None and res.error_kind["type"] == "budget_exhausted", res.error_kind
    assert res.error_kind["resource"] == "wall_time_ms"
    s = agent.session(workspace, options)
    started = time.monotonic()
    res = s.model_tool_call("bash", {"command": "sleep 20; echo too late", "timeout": 30000})
    assert time.monotonic() - started < 5
    assert res.error_kind is not None and res.error_kind["resource"] == "wall_time_ms", res.error_kind


def test_lifecycle_has_exactly_one_terminal_transition() -> None:
    lc = Lifecycle()
    lc.to(State.ADMITTED)
    lc.to(State.GATE_PENDING)
    lc.to(State.RUNNING)
    lc.to(State.COMPLETED)
    with pytest.raises(KernelFault):
        lc.to(State.FAILED)
    early = Lifecycle()
    early.to(State.REJECTED)  # terminal straight from created
    assert early.history == [State.CREATED, State.REJECTED]
    backwards = Lifecycle()
    backwards.to(State.RUNNING)
    with pytest.raises(KernelFault):
        backwards.to(State.ADMITTED)


@pytest.mark.parametrize(
    ("args", "state"),
    [
        ({"file_path": "README.md"}, "completed"),
        ({"file_path": "missing.md"}, "failed"),
        ({"bogus": 1}, "failed"),
    ],
)
def test_lifecycle_state_reported_in_tool_end(
    agent: Agent, workspace: Path, args: dict[str, Any], state: str
) -> None:
    s = agent.session(workspace)
    s.tool("read", args)
    ends = [e.data["state"] for e in s.events() if e.type == "tool_end"]
    assert ends == [state]


def test_lifecycle_rejected_for_policy_denials(agent: Agent, workspace: Path) -> None:
    s = agent.session(workspace)
    s.model_tool_call("read", {"file_path": "README.md"})
    assert [e.data["state"] for e in s.events() if e.type == "tool_end"] == ["rejected"]


def test_k3_k8_reservations_divide_what_is_left_and_settle_once() -> None:
    """K-3/K-8: ``reserve`` is atomic — eight threads reserving one run each on 7 calls left get 7
    shares whose sum is what was left, the eighth ``budget_exhausted{resource}``; what is held counts
    in every check; ``settle`` charges the spend and releases the rest exactly once."""
    import threading

    from kernel.budget import BudgetTracker
    from kernel.errors import BudgetExhausted

    tracker = BudgetTracker(Budget(max_tool_calls=8, max_model_tokens=1000), started_ms=0)
    tracker.check_before_call(0)  # the delegating call itself: 7 left
    got: list[Any] = []
    refused: list[BudgetExhausted] = []
    gate = threading.Barrier(8)

    def take() -> None:
        gate.wait()
        try:
            got.append(tracker.reserve(1))
        except BudgetExhausted as err:
            refused.append(err)

    threads = [threading.Thread(target=take) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(r.share("tool_calls") for r in got) <= 7 and len(got) >= 1
    assert refused and all(e.to_kind()["resource"] == "tool_calls" for e in refused)
    assert tracker.reserved["tool_calls"] == sum(r.share("tool_calls") for r in got) == 7
    with pytest.raises(BudgetExhausted, match="held by running task calls"):
        tracker.check_before_call(0)  # nothing left that is not held
    for r in got:
        tracker.settle(r, {"tool_calls": 1, "prompt_tokens": 10})
        tracker.settle(r, {"tool_calls": 1, "prompt_tokens": 10})  # a second settle does nothing
    assert tracker.reserved == {"tool_calls": 0, "output_bytes": 0, "model_tokens": 0}
    assert tracker.tool_calls == 1 + len(got) and tracker.prompt_tokens == 10 * len(got)
    two = tracker.reserve(2)  # what is left, divided
    assert two.share("tool_calls") == (8 - tracker.tool_calls) // 2
    assert two.share("model_tokens") == (1000 - 10 * len(got)) // 2 and two.share("output_bytes") is None


def test_k3_a_held_call_counts_for_every_check_but_not_in_usage_until_settled() -> None:
    """K-3: a fleet workflow step is held (``hold_call``) while its job runs: a concurrent step sees
    it, the snapshot its worker starts from (``usage``) does not, and ``settle`` charges it once."""
    from kernel.budget import Budget, BudgetTracker
    from kernel.errors import BudgetExhausted

    tracker = BudgetTracker(Budget(max_tool_calls=2), 0, {"tool_calls": 1})
    held = tracker.hold_call(0)
    assert tracker.usage()["tool_calls"] == 1
    with pytest.raises(BudgetExhausted):
        tracker.hold_call(0)
    tracker.settle(held, {"tool_calls": 1, "output_bytes": 7})
    tracker.settle(held, {"tool_calls": 1, "output_bytes": 7})  # once
    assert tracker.usage()["tool_calls"] == 2 and tracker.usage()["output_bytes"] == 7
    assert tracker.reserved["tool_calls"] == 0


def test_k3_a_refusal_counts_held_calls_as_made_and_metered_adds_up_one_calls_spend() -> None:
    """K-3: a call refused while others are held (running on workers) reads as embedded — the held
    calls are calls made, not ``task`` holds; ``metered`` counts what is charged in its context only
    (what a worker reports back for one job), a held call once, when settled."""
    import asyncio

    from kernel.budget import Budget, BudgetTracker, metered
    from kernel.errors import BudgetExhausted

    tracker = BudgetTracker(Budget(max_tool_calls=3), 0, {"tool_calls": 1})
    first, second = tracker.hold_call(0), tracker.hold_call(0)
    with pytest.raises(BudgetExhausted) as refused:
        tracker.hold_call(0)
    assert refused.value.message == "Budget exhausted: tool_calls 3 of 3 used"
    tracker.settle(first, {"tool_calls": 1})
    tracker.settle(second, {"tool_calls": 0})  # the worker refused it: nothing spent
    assert tracker.held_calls == 0 and tracker.reserved["tool_calls"] == 0 and tracker.tool_calls == 2

    other = BudgetTracker(Budget(), 0)

    async def job() -> dict[str, int]:
        with metered() as meter:
            other.check_before_call(0)

            async def nested() -> None:
                other.check_before_call(0)
                other.charge_output(5)

            await asyncio.gather(nested(), nested())
            held = other.hold_call(0)
            other.settle(held, {"tool_calls": 1, "output_bytes": 2})
        return meter

    other.check_before_call(0)  # outside: not this call's
    meter = asyncio.run(job())
    assert meter["tool_calls"] == 4 and meter["output_bytes"] == 12, meter
    assert other.tool_calls == 5


def test_k3_a_delegating_call_held_for_a_worker_gets_what_is_left_and_its_worker_spends_no_more() -> None:
    """K-3: a call sent to a worker is held with an allotment — the call alone (no nested call, no
    model request), or for a tool that delegates (``batch``, ``task``…) everything left, held, so a
    concurrent call is refused. Under ``metered(allotment)`` the worker's copy of the budget (which
    knows nothing of the session's other calls) refuses nested calls, shares and model requests past
    it, with embedded's message."""
    from kernel.budget import Allotment, Budget, BudgetTracker, metered
    from kernel.errors import BudgetExhausted

    session = BudgetTracker(Budget(max_tool_calls=6, max_model_tokens=50), 0, {"tool_calls": 1})
    plain = session.hold_call(0)
    assert plain.allotment == Allotment(tool_calls=1, output_bytes=None, model_tokens=0)
    batch = session.hold_call(0, delegates=True)
    assert batch.allotment == Allotment(tool_calls=4, output_bytes=None, model_tokens=50)
    with pytest.raises(BudgetExhausted):
        session.hold_call(0, delegates=True)  # all that is left is held
    session.settle(plain, {"tool_calls": 1})
    session.settle(batch, {"tool_calls": 2})
    assert session.reserved == {"tool_calls": 0, "output_bytes": 0, "model_tokens": 0}
    assert session.tool_calls == 4 and session.held_calls == 0

    def copy() -> BudgetTracker:  # a worker's: from the snapshot taken before either hold (1 call used)
        return BudgetTracker(Budget(max_tool_calls=6, max_model_tokens=50), 0, {"tool_calls": 1})

    worker = copy()
    assert batch.allotment is not None
    with metered(Allotment.from_json(batch.allotment.to_json())) as meter:
        worker.check_before_call(0)  # the batch itself
        for _ in range(3):
            worker.check_before_call(0)  # three children: its allotment of 4 is spent
        with pytest.raises(BudgetExhausted) as refused:
            worker.check_before_call(0)
        assert (
            refused.value.message
            == "Budget exhausted: tool_calls 5 of 6 used, 1 held by the session's other calls"
        )
    assert meter["tool_calls"] == 4
    worker = copy()
    with metered(Allotment(tool_calls=3, model_tokens=20)):
        worker.check_before_call(0)  # a `task` call: its children's shares come out of 2 calls
        assert worker.reserve(2).per_run == {"tool_calls": 1, "output_bytes": None, "model_tokens": 10}
    worker = copy()
    with metered(Allotment(tool_calls=1, model_tokens=0)):
        with pytest.raises(BudgetExhausted):
            worker.check_before_model(0)  # a plain call asks no model
        worker.check_before_call(0)
        with pytest.raises(BudgetExhausted):
            worker.check_before_call(0)  # nor makes a nested call
    worker.check_before_call(0)  # outside any allotment: the copy's own limit
