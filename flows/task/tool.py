"""The ``task`` tool and its hidden legacy alias ``parallel_task`` (SPEC X-3, X-4, S-2, K-2; REFERENCE 4.13).

``task`` is the one model-visible delegation schema: 1–32 child runs (``flows.task.schema``). The
tool validates (the kernel already did, K-4), plans the children (``flows.task.children``: agents
resolved — an unknown one fails the call before any child starts —, task ids, budget shares) and hands
the call to the session's ``task_children`` service, which decides *where* children run:

- ``InProcessChildren`` (embedded, and an orchestrator without a broker): sessions on this loop;
- on a fleet, the orchestrator's runner sends every child as an ``a3s.agent`` job and waits
  (``orchestrator.dispatch_agent``), and an agent run that is itself a job suspends instead of waiting
  (``workers.agent_jobs``: no job holds a worker slot while it waits for other jobs, A-4).

Each of them emits ``subagent_start`` when a child starts and exactly one ``subagent_end`` per start —
synthesised (``cancelled`` / ``timed_out``) when a child is aborted — and returns the children's
bounded ``TaskResult``s (``flows.task.result.task_outcome``). ``parallel_task`` accepts the legacy
2–32 foreground schema so persisted calls stay readable; it is never offered to the model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from flows.agent.conversation import MODEL_STATE_KEY
from flows.agent.tool_turn import SUSPEND_KEY
from flows.task.children import ChildSpec, budget_share, plan_children, with_budget
from flows.task.schema import ParallelTaskParams, TaskParams
from flows.task.settle import child_spend, known_spend, reported_usage, settle, total
from kernel.budget import Budget, Reservation
from kernel.context import ToolContext
from kernel.errors import Unsupported
from kernel.result import ToolResult
from kernel.spec import ToolSpec

TASK_CHILDREN_SERVICE = "task_children"
TASK_TIMEOUT_MS = 3_600_000

DESCRIPTION = (
    "Delegate work to sub-agents. `tasks` holds 1-32 independent child runs, each "
    "{agent, description, prompt, max_steps?, output_schema?}; several run concurrently. Agents: "
    "`general` (your tools), `explore` (read-only: find and read code), `verification` (read-only plus "
    "bash for checks), or a workspace agent. Each child starts fresh: put everything it needs in its "
    "prompt. You get each child's final answer (bounded) and its sources. A single task may set "
    "`background: true` to run on while you continue. `allow_partial_failure` keeps the successful "
    "results when some fail (`min_success_count` returns early once that many succeeded)."
)


@dataclass
class TaskCall:
    """One ``task`` call, planned: what a ``ChildRunner`` runs.

    ``reservation`` holds the children's shares on the parent's budget until the call is settled;
    a runner records which children ``started`` and what each ``spent`` (``flows.task.settle``)."""

    tool: str
    call_id: str
    specs: list[ChildSpec]
    allow_partial_failure: bool
    min_success_count: int | None
    timeout_ms: int | None
    background: bool
    reservation: Reservation | None = None
    started: set[int] = field(default_factory=set)
    spent: dict[int, dict[str, int]] = field(default_factory=dict)


class ChildRunner(Protocol):
    """Where a session's children run (see the module docstring)."""

    async def run(self, ctx: ToolContext, call: TaskCall) -> ToolResult: ...


def plan_call(ctx: ToolContext, tool: str, params: TaskParams | ParallelTaskParams) -> TaskCall:
    """Plan the children (an unknown agent fails here, before anything is held), then reserve their
    shares of the parent's budget: atomically, so concurrent calls never hand out the same remainder
    twice — the first holds what is left, a later one finds it held (nothing left for one each:
    ``budget_exhausted`` naming the resource)."""
    tracker = getattr(ctx, "budget", None)
    specs = plan_children(
        ctx.workspace,
        params.tasks,
        call_id=ctx.call_id,
        parent_model=ctx.session_state.get(MODEL_STATE_KEY),
    )
    budget = tracker.budget if tracker is not None else getattr(ctx.settings, "budget", None)
    reservation = tracker.reserve(len(specs)) if tracker is not None else None
    started = tracker.started_ms if tracker is not None else ctx.clock.now_ms()
    share = budget_share(budget, reservation, ctx.clock.now_ms(), started)
    return TaskCall(
        tool=tool,
        call_id=ctx.call_id,
        specs=with_budget(specs, share),
        allow_partial_failure=params.allow_partial_failure,
        min_success_count=params.min_success_count,
        timeout_ms=params.timeout_ms,
        background=bool(getattr(params.tasks[0], "background", False)),
        reservation=reservation,
    )


async def _run(ctx: ToolContext, tool: str, params: TaskParams | ParallelTaskParams) -> ToolResult:
    runner = ctx.services.get(TASK_CHILDREN_SERVICE)
    if runner is None:
        raise Unsupported(f"{tool}: this session cannot start child runs (no task runner configured)")
    call = plan_call(ctx, tool, params)
    result: ToolResult | None = None
    try:
        result = await runner.run(ctx, call)
        return result
    finally:
        # Returned, failed or cancelled: the reservation never outlives the call (a suspended
        # call's is dropped with its segment; the resumed run charges its children's spend).
        settle_call(getattr(ctx, "budget", None), call, result)


def settle_call(tracker: Any, call: TaskCall, result: ToolResult | None) -> None:
    """Settle ``call`` on the parent's budget (K-3; ``flows.task.settle``): release its reservation
    and charge what its children spent. A background child that started is charged its whole
    share (it reports later, not to this call); a suspended call (its children are fleet jobs) keeps
    its reservation for the rest of its segment and is charged when its results are gathered."""
    meta = result.metadata if result is not None and isinstance(result.metadata, dict) else {}
    if tracker is None or meta.get(SUSPEND_KEY):
        return
    if call.background:
        started = result is not None and result.exit_code == 0
        whole = call.reservation.whole() if call.reservation is not None else {}
        settle(tracker, call.reservation, whole if started else {})
        return
    reported = reported_usage(meta.get("tasks"))
    runner_tracks = bool(call.started) or result is None
    spends = [
        child_spend(
            call.reservation,
            spec.index,
            recorded=call.spent,
            reported=reported,
            started=call.started if runner_tracks else None,
        )
        for spec in call.specs
    ]
    settle(tracker, call.reservation, total(spends))


def charge_children(tracker: Any, specs: list[ChildSpec], results: list[Any]) -> None:
    """A resumed fleet run gathers a suspended call's children (``workers.agent_segments``): each
    is charged what its ``TaskResult`` says it spent, or — cut off by the fan-in or lost, its spend
    unknown — its whole share (every child was published when the run suspended)."""
    if tracker is None:
        return
    spends = []
    for spec, tr in zip(specs, results, strict=True):
        spend = known_spend(getattr(tr, "usage", None))
        if spend is None:
            spend = Reservation(1, _per_run(spec.budget)).whole()
        spends.append(spend)
    tracker.charge_delegated(total(spends))


def _per_run(share: Budget | None) -> dict[str, int | None]:
    if share is None:
        return {}
    return {
        "tool_calls": share.max_tool_calls,
        "output_bytes": share.max_output_bytes,
        "model_tokens": share.max_model_tokens,
    }


async def run_task(ctx: ToolContext, params: TaskParams) -> ToolResult:
    return await _run(ctx, "task", params)


async def run_parallel_task(ctx: ToolContext, params: ParallelTaskParams) -> ToolResult:
    return await _run(ctx, "parallel_task", params)


TASK_TOOL = ToolSpec(
    name="task",
    delegates=True,
    description=DESCRIPTION,
    params=TaskParams,
    run=run_task,
    # A fan-out waits for agent runs: an hour unless the host sets tool_timeouts_ms["task"];
    # `timeout_ms` bounds one call (and on a fleet each run segment has the job's time limit).
    timeout_ms=TASK_TIMEOUT_MS,
    examples=(
        {
            "tasks": [
                {
                    "agent": "explore",
                    "description": "Find config loading",
                    "prompt": "Where is the config file read? Cite paths and lines.",
                },
                {
                    "agent": "explore",
                    "description": "Find CLI entry",
                    "prompt": "Which function is the CLI's entry point?",
                },
            ]
        },
    ),
)

PARALLEL_TASK_TOOL = ToolSpec(
    name="parallel_task",
    delegates=True,
    description="Legacy alias of task for 2-32 foreground children (hidden; kept so persisted calls stay readable).",
    params=ParallelTaskParams,
    run=run_parallel_task,
    timeout_ms=TASK_TIMEOUT_MS,
    visible=False,
)

TASK_TOOLS = (TASK_TOOL, PARALLEL_TASK_TOOL)


def task_handle(result: ToolResult) -> dict[str, Any] | None:
    """The handle a background ``task`` call returned (None for a foreground call)."""
    meta = result.metadata if isinstance(result.metadata, dict) else {}
    handle = meta.get("background_task")
    return handle if isinstance(handle, dict) else None
