"""One child run: its own session, started at ``agent`` origin, bounded result (SPEC X-3, K-2; issue 9).

``plan_children`` turns a validated ``task`` call into ``ChildSpec``s before anything runs: every
agent is resolved (an unknown one is ``not_found`` and no child starts), each child gets a task id,
its model (the agent's, else the parent session's) and its *share of the budget*: what the call
reserved of the parent's remaining tool calls, output bytes and model tokens (what is neither spent
nor held by another running call, divided by the number of children, at least 1 each —
``kernel.budget.BudgetTracker.reserve``), and the parent's remaining wall time (children run side by
side, so each may use all of it).

``run_child`` runs one spec — the same code embedded (a session built on the parent's loop) and on a
worker (a session built by the worker's factory): a *new* session with its own id on the parent's
workspace, inheriting the parent's permission rules, confirmation handler, hooks, limits and sandbox
settings (the JSON part of the options on a worker, where host callables do not travel). Its model
calls are the agent loop's: every tool call is ``invoke_agent`` — origin ``agent`` whatever started
the parent (K-2). On top of the inherited hooks the child gets two of its own:

- a guard: only the agent's tools (never ``task``/``parallel_task``: a child does not delegate), and
  for read-only agents only calls the tool declares read-only for these arguments (K-5);
- a collector of the source anchors its tool results name (``read``, ``search``…).

A child with an ``output_schema`` is told to finish with a JSON value matching it; the final text is
parsed and validated (draft 2020-12) and repaired as ``flows.task.runs.advance`` says.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from flows.task.agents import AgentDef, resolve_agent
from flows.task.result import Completion, TaskResult, anchors_of
from flows.task.runs import DEFAULT_MAX_STEPS, Finished, RunPlan, Suspended, advance
from kernel.budget import Budget, Reservation
from kernel.events import EventSink
from kernel.hooks import PostToolInput, PreToolInput
from kernel.options import SessionOptions
from kernel.policy import Deny
from kernel.workspace import Workspace

# Options a child never inherits as such: its MCP servers come from the process (a child must not
# start the parent's servers again), its services are its own.
_PER_SESSION_SERVICES = frozenset({"event_sink", "task_children", "workflow_step_runner", "workflow_logs"})


@dataclass(frozen=True)
class ChildSpec:
    """Everything a child run needs, JSON-safe (it crosses Redis as a job on a fleet)."""

    index: int
    task_id: str
    agent: AgentDef
    description: str
    prompt: str
    max_steps: int
    output_schema: dict[str, Any] | None = None
    model: str | None = None
    budget: Budget | None = None

    def aborted(
        self,
        session_id: str = "",
        *,
        completion: Completion = "cancelled",
        error_kind: dict[str, Any] | None = None,
        duration_ms: int = 0,
    ) -> TaskResult:
        """This child's result when it never finished (``TaskResult.aborted`` with its identity)."""
        return TaskResult.aborted(
            task_id=self.task_id,
            index=self.index,
            agent=self.agent.name,
            description=self.description,
            session_id=session_id,
            completion=completion,
            error_kind=error_kind,
            duration_ms=duration_ms,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "task_id": self.task_id,
            "agent": {
                **self.agent.to_json(),
                "system_prompt": self.agent.system_prompt,
                "read_only_exempt": sorted(self.agent.read_only_exempt),
            },
            "description": self.description,
            "prompt": self.prompt,
            "max_steps": self.max_steps,
            "output_schema": self.output_schema,
            "model": self.model,
            "budget": self.budget.to_json() if self.budget is not None else None,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ChildSpec:
        a = data["agent"]
        agent = AgentDef(
            name=a["name"],
            description=a.get("description") or "",
            system_prompt=a.get("system_prompt") or "",
            tools=tuple(a["tools"]) if a.get("tools") is not None else None,
            read_only=bool(a.get("read_only")),
            read_only_exempt=frozenset(a.get("read_only_exempt") or ()),
            model=a.get("model"),
            max_steps=a.get("max_steps"),
            source=a.get("source") or "builtin",
        )
        budget = data.get("budget")
        return cls(
            index=int(data["index"]),
            task_id=str(data["task_id"]),
            agent=agent,
            description=str(data["description"]),
            prompt=str(data["prompt"]),
            max_steps=int(data["max_steps"]),
            output_schema=data.get("output_schema"),
            model=data.get("model"),
            budget=Budget.from_json(budget) if budget is not None else None,
        )


def budget_share(
    budget: Budget | None, reservation: Reservation | None, now_ms: int, started_ms: int
) -> Budget | None:
    """A child's budget: its share of what the parent's call reserved (``BudgetTracker.reserve``)
    and the parent's remaining wall time (see the module docstring)."""
    if budget is None:
        return None
    per = reservation.per_run if reservation is not None else {}
    wall = budget.max_wall_time_ms
    return Budget(
        max_tool_calls=per.get("tool_calls"),
        max_output_bytes=per.get("output_bytes"),
        max_wall_time_ms=None if wall is None else max(1, wall - (now_ms - started_ms)),
        soft_ratio=budget.soft_ratio,
        max_model_tokens=per.get("model_tokens"),
    )


def plan_children(
    workspace: Workspace,
    items: Sequence[Any],
    *,
    call_id: str,
    parent_model: str | None,
) -> list[ChildSpec]:
    """Validated ``task`` items → child specs without budgets (agents resolved first: an unknown
    one fails the call before anything is reserved); ``with_budget`` gives them their share."""
    agents = [resolve_agent(workspace, item.agent) for item in items]
    specs = []
    for i, (item, agent) in enumerate(zip(items, agents, strict=True)):
        steps = item.max_steps or agent.max_steps or DEFAULT_MAX_STEPS
        specs.append(
            ChildSpec(
                index=i,
                task_id=f"{call_id}.{i}",
                agent=agent,
                description=item.description,
                prompt=item.prompt,
                max_steps=steps,
                output_schema=item.output_schema,
                model=agent.model or parent_model,
            )
        )
    return specs


def with_budget(specs: Sequence[ChildSpec], share: Budget | None) -> list[ChildSpec]:
    return [replace(spec, budget=share) for spec in specs]


@dataclass
class _ChildGuard:
    """The child's own pre-hook (agent surface, read-only rule) and post-hook (source anchors)."""

    agent: AgentDef
    allowed: frozenset[str] = frozenset()
    kernel: Any = None
    anchors: list[str] = field(default_factory=list)

    def pre(self, call: PreToolInput) -> Deny | None:
        if call.tool not in self.allowed:
            return Deny(f"agent '{self.agent.name}' cannot use tool '{call.tool}'")
        if self.agent.read_only and call.tool not in self.agent.read_only_exempt and self.kernel is not None:
            from kernel.hooks import thaw

            caps = self.kernel.capabilities_of(self.kernel.registry.scoped(), call.tool, thaw(call.args))
            if caps is None or not caps.read_only:
                return Deny(
                    f"agent '{self.agent.name}' is read-only: this '{call.tool}' call would change state"
                )
        return None

    def post(self, call: PostToolInput) -> None:
        if len(self.anchors) < 4 * 64:
            self.anchors.extend(anchors_of(call.result.metadata))


def child_options(parent: SessionOptions, guard: _ChildGuard, budget: Budget | None) -> SessionOptions:
    """The parent's options for a child: same rules, hooks and limits, the child's guard and budget."""
    return replace(
        parent,
        pre_tool_hooks=(*parent.pre_tool_hooks, guard.pre),
        post_tool_hooks=(*parent.post_tool_hooks, guard.post),
        budget=budget if budget is not None else parent.budget,
        services={k: v for k, v in parent.services.items() if k not in _PER_SESSION_SERVICES},
        mcp_servers=None,
        mcp_workspace_config=False,
        offer_dynamic_workflow=False,
    )


_COMPLETIONS: dict[str, Completion] = {
    "end_turn": "completed",
    "max_steps": "max_steps",
    "cancelled": "cancelled",
    "timeout": "timed_out",
}


def child_plan(spec: ChildSpec, surface: list[str]) -> RunPlan:
    return RunPlan(
        prompt=spec.prompt,
        max_steps=spec.max_steps,
        model=spec.model,
        system=spec.agent.system_prompt,
        tools=spec.agent.surface(surface),
        output_schema=spec.output_schema,
    )


def task_result(spec: ChildSpec, done: Finished, anchors: Sequence[str], duration_ms: int) -> TaskResult:
    """A finished child run as the parent sees it."""
    completion: Completion = "completed" if done.success else _COMPLETIONS.get(done.stop_reason, "failed")
    if completion == "completed" and not done.success:
        completion = "failed"
    return TaskResult.build(
        task_id=spec.task_id,
        index=spec.index,
        agent=spec.agent.name,
        description=spec.description,
        session_id=done.session_id,
        completion=completion,
        text=done.text,
        structured=done.structured,
        has_structured=done.has_structured,
        anchors=anchors,
        error_kind=done.error if not done.success else None,
        steps=done.steps,
        usage=done.usage,
        duration_ms=duration_ms,
    )


async def run_child(
    factory: Any,
    workspace: Workspace | str,
    parent_options: SessionOptions,
    spec: ChildSpec,
    *,
    session_id: str,
    sinks: Sequence[EventSink] = (),
    on_spent: Callable[[dict[str, int]], None] | None = None,
) -> TaskResult:
    """Run one child to its end (see the module docstring); never raises for a child's failure.
    ``on_spent`` hears what the child's session spent when it ends, however it ends (cancelled
    included): its parent is charged that, not its whole share."""
    started = time.monotonic()
    guard = _ChildGuard(spec.agent)
    core = None
    try:
        core = factory.build(
            workspace, child_options(parent_options, guard, spec.budget), session_id=session_id, sinks=sinks
        )
        plan = child_plan(spec, core.kernel.registry.names())
        guard.allowed = frozenset(plan.tools or ())
        guard.kernel = core.kernel
        outcome = await advance(core, plan, prompt=spec.prompt)
        if isinstance(outcome, Suspended):  # a child has no `task`: its guard refuses it
            outcome = Finished(
                "",
                False,
                "error",
                {"type": "unsupported", "message": "a child cannot delegate"},
                core.id,
                plan.steps_used,
                plan.usage,
            )
        return task_result(spec, outcome, guard.anchors, int((time.monotonic() - started) * 1000))
    finally:
        if on_spent is not None:
            on_spent(session_spent(core))
        if core is not None:
            await close_core(core)


def session_spent(core: Any) -> dict[str, int]:
    """What a child session's budget tracker counted (nothing for a session never built)."""
    tracker = getattr(getattr(core, "kernel", None), "budget", None)
    if tracker is None:
        return {}
    usage = tracker.usage()
    keys = ("tool_calls", "output_bytes", "prompt_tokens", "completion_tokens", "cached_tokens")
    return {k: int(usage.get(k) or 0) for k in keys}


async def close_core(core: Any) -> None:
    """Close a child session from its own loop (``SessionCore.close`` would wait on this very loop)."""
    aclose = getattr(core, "aclose", None)
    if aclose is not None:
        await aclose()
    else:
        core.kernel.close()
