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

from dataclasses import dataclass
from typing import Any, Protocol

from flows.agent.conversation import MODEL_STATE_KEY
from flows.agent.tool_turn import SUSPEND_KEY
from flows.task.children import ChildSpec, plan_children
from flows.task.schema import ParallelTaskParams, TaskParams
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
    """One ``task`` call, planned: what a ``ChildRunner`` runs."""

    tool: str
    call_id: str
    specs: list[ChildSpec]
    allow_partial_failure: bool
    min_success_count: int | None
    timeout_ms: int | None
    background: bool


class ChildRunner(Protocol):
    """Where a session's children run (see the module docstring)."""

    async def run(self, ctx: ToolContext, call: TaskCall) -> ToolResult: ...


def plan_call(ctx: ToolContext, tool: str, params: TaskParams | ParallelTaskParams) -> TaskCall:
    options = ctx.settings
    tracker = getattr(ctx, "budget", None)
    used = tracker.usage() if tracker is not None else {}
    started = tracker.started_ms if tracker is not None else ctx.clock.now_ms()
    specs = plan_children(
        ctx.workspace,
        params.tasks,
        call_id=ctx.call_id,
        parent_model=ctx.session_state.get(MODEL_STATE_KEY),
        budget=getattr(options, "budget", None),
        budget_used=used,
        now_ms=ctx.clock.now_ms(),
        started_ms=started,
    )
    return TaskCall(
        tool=tool,
        call_id=ctx.call_id,
        specs=specs,
        allow_partial_failure=params.allow_partial_failure,
        min_success_count=params.min_success_count,
        timeout_ms=params.timeout_ms,
        background=bool(getattr(params.tasks[0], "background", False)),
    )


async def _run(ctx: ToolContext, tool: str, params: TaskParams | ParallelTaskParams) -> ToolResult:
    runner = ctx.services.get(TASK_CHILDREN_SERVICE)
    if runner is None:
        raise Unsupported(f"{tool}: this session cannot start child runs (no task runner configured)")
    call = plan_call(ctx, tool, params)
    result = await runner.run(ctx, call)
    tracker = getattr(ctx, "budget", None)
    if call.background:
        if result.exit_code == 0 and tracker is not None:
            charge_share(tracker, call.specs[0].budget)
    else:
        charge_children(tracker, result)
    return result


def charge_share(tracker: Any, share: Any) -> None:
    """A background child reports later (to the session, not to this call): the share it was handed
    is charged when it starts, so a budget cannot be handed out again and again."""
    if share is None:
        return
    tracker.charge_delegated(
        {
            "tool_calls": share.max_tool_calls or 0,
            "output_bytes": share.max_output_bytes or 0,
            "prompt_tokens": share.max_model_tokens or 0,  # counted with the parent's model tokens
        }
    )


def charge_children(tracker: Any, result: ToolResult) -> None:
    """Charge the parent's budget with what the finished children of ``result`` spent (K-3).

    Their budgets were shares of the parent's remainder; without this the parent's count never
    moved and every later ``task`` call handed out the same remainder again. A suspended call (a
    fleet run's children are jobs) is charged when its results are gathered; a background child is
    charged its whole share when it starts (``charge_share``)."""
    meta = result.metadata if isinstance(result.metadata, dict) else {}
    if tracker is None or meta.get(SUSPEND_KEY):
        return
    for child in meta.get("tasks") or ():
        usage = child.get("usage") if isinstance(child, dict) else None
        if isinstance(usage, dict):
            tracker.charge_delegated(usage)


async def run_task(ctx: ToolContext, params: TaskParams) -> ToolResult:
    return await _run(ctx, "task", params)


async def run_parallel_task(ctx: ToolContext, params: ParallelTaskParams) -> ToolResult:
    return await _run(ctx, "parallel_task", params)


TASK_TOOL = ToolSpec(
    name="task",
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
