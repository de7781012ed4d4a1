"""``dynamic_workflow``: the workflow runtime as a built-in orchestrator tool (SPEC S-2, F-2, F-7, K-1).

Every session registers it (``session.workflow(...)`` calls it host-direct); it is hidden from the
model unless the host offers it (``SessionOptions.offer_dynamic_workflow``) — a hidden tool costs no
schema tokens and, called by a model anyway, meets the permission policy like any call.

Where its steps run is decided by who called and where: under a trusted host-direct call on a fleet
session, through the session's step runner service (``services["workflow_step_runner"]``: each step a
Celery job, the driver staying in this process); otherwise as nested kernel calls of this invocation
(``ctx.invoke``), so the kernel gives them their origin — ``trusted_host_nested`` under
``session.workflow(...)``, ``governed_nested`` under a model's call. The history goes to
``services["workflow_logs"]`` when the session has one (the fleet's Redis streams), else to the
workspace's ``.a3s/workflow/<run_id>.jsonl``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from flows.workflow.driver import (
    DEFAULT_MAX_CONCURRENT_GENERATIONS,
    DEFAULT_MAX_CONCURRENT_STEPS,
    DEFAULT_TIMEOUT_MS,
    MAX_RESULT_BYTES,
    StepCall,
    StepRunner,
    WorkflowDriver,
    WorkflowLimits,
    WorkflowOutcome,
)
from flows.workflow.log import EventLogs, FileEventLogs
from kernel.context import ToolContext
from kernel.errors import ToolError, Unsupported, error_from_kind
from kernel.origin import ControlPlane, Origin
from kernel.result import ToolResult
from kernel.spec import ToolSpec
from tools._jsontext import pretty_or_compact
from tools.program.source import check_inputs, load_source

MAX_TIMEOUT_MS = 24 * 3_600_000
STEP_RUNNER_SERVICE = "workflow_step_runner"
LOGS_SERVICE = "workflow_logs"


class Limits(BaseModel):
    model_config = ConfigDict(extra="forbid")
    # camelCase: the reference's wire names (values above the maximum are clamped, as there)
    maxConcurrentSteps: int = Field(
        default=DEFAULT_MAX_CONCURRENT_STEPS, ge=1, description="Concurrent steps, 1-32 (default 4)."
    )
    maxConcurrentGenerations: int = Field(
        default=DEFAULT_MAX_CONCURRENT_GENERATIONS,
        ge=1,
        description="Concurrent generate_object steps, 1-4 (default 1).",
    )
    timeoutMs: int = Field(default=DEFAULT_TIMEOUT_MS, ge=1, le=MAX_TIMEOUT_MS, description="The whole run.")


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid")
    source: str | None = Field(
        default=None, description="JavaScript defining `async function run(wf, input)`."
    )
    path: str | None = Field(
        default=None, description="Workspace-relative .js or .mjs file instead of source."
    )
    input: Any = Field(
        default_factory=dict, description="JSON value passed as `input` (its `query` keys recovery)."
    )
    run_id: str | None = Field(
        default=None, description="Resume (or name) this run; a new id is made when absent."
    )
    name: str = Field(default="", max_length=200, description="A label for the run's spec.")
    limits: Limits = Field(default_factory=Limits)


class NestedStepRunner:
    """Embedded: each step is a nested kernel call of the workflow's invocation."""

    def __init__(self, ctx: ToolContext) -> None:
        self.ctx = ctx

    async def run_step(self, call: StepCall) -> ToolResult:
        return await self.ctx.invoke(call.tool, call.args)


def _trusted_host(ctx: ToolContext) -> bool:
    return ctx.origin is Origin.HOST_DIRECT and ctx.control_plane is ControlPlane.TRUSTED


def _logs(ctx: ToolContext) -> EventLogs:
    service = ctx.services.get(LOGS_SERVICE)
    if service is not None:
        return service  # type: ignore[no-any-return]
    root = ctx.workspace.root
    if root is None or "write" not in ctx.workspace.capabilities:
        raise Unsupported(
            "dynamic workflows keep their history in <workspace>/.a3s/workflow/: they need a local, "
            "writable workspace (or a fleet session, which keeps it in Redis)"
        )
    return FileEventLogs(root)


async def run(ctx: ToolContext, params: Params) -> ToolResult:
    source = load_source(ctx.workspace, params.source, params.path)
    check_inputs(params.input, "workflow input")
    runner: StepRunner | None = ctx.services.get(STEP_RUNNER_SERVICE) if _trusted_host(ctx) else None
    if runner is None:
        runner = NestedStepRunner(ctx)
    limits = WorkflowLimits(
        params.limits.maxConcurrentSteps, params.limits.maxConcurrentGenerations, params.limits.timeoutMs
    )
    run_id = params.run_id if params.run_id is not None else ctx.new_id("wf")
    driver = WorkflowDriver(
        _logs(ctx),
        runner,
        now_ms=ctx.clock.now_ms,
        progress=lambda event: ctx.emit_delta({"workflow": {"run_id": run_id, **_progress_view(event)}}),
    )
    outcome = await driver.run(
        source,
        params.input,
        run_id,
        name=params.name or (params.path or ""),
        limits=limits,
        deadline=ctx.deadline,
    )
    return await report(outcome)


def _progress_view(event: dict[str, Any]) -> dict[str, Any]:
    """What a live display needs of an event (no step outputs: they can be large)."""
    keep = ("type", "step_id", "step_name", "attempt", "error")
    return {k: event[k] for k in keep if k in event}


async def report(outcome: WorkflowOutcome) -> ToolResult:
    data = outcome.to_json()
    counts: dict[str, int] = {}
    for step in outcome.steps:
        counts[step.status] = counts.get(step.status, 0) + 1
    tally = ", ".join(f"{n} {status}" for status, n in sorted(counts.items())) or "no steps"
    lines = [f"Workflow {outcome.run_id} {outcome.status} ({tally})."]
    lines += [
        f"- {s.step_id}: {s.tool} {s.status} (exit {s.exit_code}, {s.duration_ms} ms)" for s in outcome.steps
    ]
    if outcome.logs:
        lines += ["Console:", *outcome.logs]
    meta = {"workflow": {k: v for k, v in data.items() if k != "output"}, "output": outcome.output}
    if outcome.status == "completed":
        # Indented when that stays within the result limit, else compact (the driver checked that
        # it fits): built in a thread, so a 1 MiB result never stalls the event loop.
        pretty = await pretty_or_compact(outcome.output, MAX_RESULT_BYTES, default=str)
        return ToolResult.success("dynamic_workflow", "\n".join([*lines, "Result:", pretty]) + "\n", meta)
    err: ToolError = error_from_kind(outcome.error_kind, outcome.error)
    result = ToolResult.failure("dynamic_workflow", err, meta)
    result.output = "\n".join([lines[0], outcome.error, *lines[1:]]) + "\n"
    return result


TOOL = ToolSpec(
    name="dynamic_workflow",
    description=(
        "Run a durable workflow script: `async function run(wf, input)` where `await wf.step(stepId, toolName, "
        "args)` runs one tool call as a step and returns {output, exitCode, metadata}. Steps run concurrently "
        "with Promise.all (up to limits.maxConcurrentSteps). Re-running with the same run_id and input.query "
        "resumes: completed steps return their recorded output without running again."
    ),
    params=Params,
    run=run,
    orchestrator=True,
    visible=False,
    timeout_ms=MAX_TIMEOUT_MS,
    examples=(
        {
            "source": "async function run(wf, input) {\n  const [a, b] = await Promise.all([\n"
            "    wf.step('grep', 'search', {mode: 'grep', query: input.query}),\n"
            "    wf.step('files', 'search', {mode: 'glob', query: '**/*.py'}),\n  ]);\n"
            "  return {matches: a.output, files: b.output};\n}",
            "input": {"query": "TODO"},
        },
    ),
)


def workflow_tool(offered: bool) -> ToolSpec:
    """The session's ``dynamic_workflow``: model-visible only when the host offers it."""
    return dataclasses.replace(TOOL, visible=True) if offered else TOOL


_TOP = {"runId": "run_id"}
_LIMITS = {
    "max_concurrent_steps": "maxConcurrentSteps",
    "max_concurrent_generations": "maxConcurrentGenerations",
    "timeout_ms": "timeoutMs",
}


def normalize_workflow_options(options: dict[str, Any]) -> dict[str, Any]:
    """``session.workflow(...)`` → ``dynamic_workflow`` arguments (``runId``/``run_id``, snake limits)."""
    out = {_TOP.get(k, k): v for k, v in options.items() if v is not None}
    limits = out.get("limits")
    if isinstance(limits, dict):
        out["limits"] = {_LIMITS.get(k, k): v for k, v in limits.items() if v is not None}
    return out
