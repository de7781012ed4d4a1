"""Agent runs as fleet jobs, seen from the orchestrator (SPEC A-4, X-3, F-1, F-5; issue 9).

``AgentJobRunner`` is the fleet's ``CeleryRunner`` whose branches are ``a3s.agent`` jobs
(``workers.agent_protocol``) instead of tool calls: same run registration, batched publishing,
result-list fan-in, heartbeats and cancellation (flag + revoke + settle). A branch's ``args`` hold
the envelope's body — ``{"kind": "run", "snapshot": …, "run": {prompt, agent, …}}`` for a batch
job, ``{"kind": "child", "child": …, "child_session_id": …}`` for a ``task`` child (its parent's
snapshot is the run's, stored once by digest) — and ``label``, the Flower label's extra fields.
Every job reports to this run's result list; a run that suspends on a worker (its own children are
jobs too) reports from its last continuation, so a branch's result may come from another task id.

``FleetChildren`` is the ``task_children`` service of an orchestrator session on a fleet: each child
is one ``a3s.agent`` job through the session's ``AgentJobRunner``; the fan-in, events and background
handles are the embedded ones (``flows.task.inprocess.ChildFanOut``). The parent waits here, in the
orchestrator — no worker slot is held while children run.
"""

from __future__ import annotations

import json
from typing import Any

from flows.fanout import Branch
from flows.task.children import ChildSpec
from flows.task.inprocess import ChildFanOut
from flows.task.result import TaskResult
from flows.task.tool import TaskCall
from kernel.context import ToolContext
from kernel.errors import ToolError
from kernel.result import ToolResult
from orchestrator.dispatch import CeleryRunner, _Run
from workers.agent_protocol import AGENT_TASK, AgentEnvelope, ListTarget, task_result_key
from workers.protocol import job_label


class AgentJobRunner(CeleryRunner):
    """``CeleryRunner`` for ``a3s.agent`` branches (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("idempotent", False)  # an agent job keys its own segments (step store)
        super().__init__(*args, **kwargs)

    def _message(self, run: _Run, index: int, branch: Branch) -> dict[str, Any]:
        body = dict(branch.args)
        label_fields = dict(body.pop("label", None) or {})
        body.setdefault("agent_run_id", run.task_ids[index])
        if body.get("kind") == "child":
            body.setdefault("snapshot_digest", run.snapshot_digest)
        env = AgentEnvelope.model_validate(
            {
                **body,
                "report": ListTarget(run_id=run.run_id, index=index).model_dump(),
                "description": branch.description[:500],
            }
        )
        label = job_label(run.run_id, index, branch.description, task=AGENT_TASK, **label_fields)
        return {
            "task": AGENT_TASK,
            "task_id": run.task_ids[index],
            "kwargs": {"envelope": env.model_dump(mode="json", exclude_none=True)},
            **label.send_options(),
            "ignore_result": True,
        }

    async def task_result(self, task_id: str) -> dict[str, Any] | None:
        """A background child's stored result (``None`` while it runs)."""
        raw = await self._client().get(task_result_key(task_id))
        return json.loads(raw) if raw else None


class FleetChildren(ChildFanOut):
    """``task`` children as ``a3s.agent`` jobs, awaited by an orchestrator-side parent."""

    def __init__(self, runner: AgentJobRunner) -> None:
        super().__init__()
        self.runner = runner

    async def run_one(self, ctx: ToolContext, call: TaskCall, spec: ChildSpec, session_id: str) -> TaskResult:
        branch = Branch(
            "agent",
            {
                "kind": "child",
                "child": spec.to_json(),
                "child_session_id": session_id,
                "label": {"agent": spec.agent.name, "parent_session": ctx.session_id},
            },
            spec.description,
        )
        try:
            result = await self.runner.run_branch(call.call_id, spec.index, branch)
        except ToolError as err:  # the broker is unreachable, Redis lost the run…
            result = ToolResult.failure("task", err)
        return child_result(result, spec, session_id)


def child_result(result: ToolResult, spec: ChildSpec, session_id: str) -> TaskResult:
    """A child job's result as the parent sees it (a job that failed before running is synthesised)."""
    meta = result.metadata if isinstance(result.metadata, dict) else {}
    found = meta.get("task_result")
    if isinstance(found, dict):
        return TaskResult.from_json(found)
    return spec.aborted(
        session_id,
        completion="cancelled" if (result.error_kind or {}).get("type") == "cancelled" else "failed",
        error_kind=result.error_kind or {"type": "internal_error", "message": result.output[:500]},
    )


def fleet_task_services(app: Any, snapshot: Any, settings: Any, session_id: str) -> dict[str, Any]:
    """The services an orchestrator session on a fleet gets: children as ``a3s.agent`` jobs."""
    runner = AgentJobRunner(app, snapshot, settings, session_id=session_id)
    return {"task_children": FleetChildren(runner), "agent_job_runner": runner}
