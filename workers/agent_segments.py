"""The segments of an agent run on a worker: run, suspend, resume (SPEC A-4, X-3, K-2; issue 9).

``AgentSegments`` is the half of ``workers.agent_jobs.AgentJobs`` that runs one segment of an agent
run (see that module's docstring for the job around it):

- ``child`` — ``flows.task.children.run_child`` on the parent's workspace and rules (the embedded code);
- ``run`` / ``resume`` — the agent loop (``flows.task.runs.advance``) on the run's session, restored
  from its snapshot with ``SuspendingChildren`` as its ``task`` runner. A run that suspends stores its
  snapshot (by digest) and its suspension *before* publishing its children and deadlines; a resumed
  run turns the children's results into its pending calls' results — one ``subagent_end`` per child.
"""

from __future__ import annotations

import abc
import time
from typing import Any

from flows.sessions import SessionCore, options_from_snapshot
from flows.task.children import ChildSpec, run_child
from flows.task.inprocess import as_tool_result, end_data, start_data
from flows.task.result import TaskResult, task_outcome
from flows.task.runs import Finished, RunPlan, Suspended, advance, plan_run
from flows.task.tool import TASK_CHILDREN_SERVICE, TaskCall, charge_children
from kernel.context import ToolContext
from kernel.errors import ToolError, Transport
from kernel.events import Event
from kernel.result import ToolResult
from workers.agent_protocol import (
    AGENT_TASK,
    AgentEnvelope,
    EventTarget,
    FanInTarget,
    child_task_id,
    suspension_id,
)
from workers.protocol import job_label, snapshot_digest, snapshot_json
from workers.state.redis_client import redis_errors
from workers.state.suspend import SUSPEND_TTL_MS, Group


class AgentSegments(abc.ABC):
    """Segment execution; ``workers.agent_jobs.AgentJobs`` provides the job around it: the runtime,
    the envelope, the suspension store, the delivery and the three methods below."""

    rt: Any
    env: AgentEnvelope
    store: Any
    delivery: Any
    attempt: int

    @abc.abstractmethod
    def done(self, result: ToolResult, report: dict[str, Any] | None = None) -> dict[str, Any]:
        """The outcome of a finished segment (``{"kind": "done", …}``)."""

    @abc.abstractmethod
    def _own_report(self) -> dict[str, Any] | None:
        """Where this job's finished run reports."""

    @abc.abstractmethod
    def _send(self, env: AgentEnvelope, task_id: str, label: Any, countdown: float | None = None) -> None:
        """Publish one ``a3s.agent`` job."""

    async def _execute(self) -> dict[str, Any]:
        env = self.env
        if env.kind == "child":
            return await self._child()
        if env.kind == "run":
            snapshot = env.snapshot if env.snapshot is not None else self._stored(env.snapshot_digest or "")
            assert env.run is not None
            return await self._drive(snapshot, None, self._own_report())
        return await self._resume()

    async def _child(self) -> dict[str, Any]:
        env = self.env
        assert env.child is not None and env.child_session_id is not None and env.snapshot_digest
        spec = ChildSpec.from_json(env.child)
        parent = self._stored(env.snapshot_digest)
        options = options_from_snapshot(parent, {})
        sink = self.rt.events.sink(env.child_session_id)
        result = await run_child(
            self.rt.factory, parent["workspace"], options, spec, session_id=env.child_session_id, sinks=[sink]
        )
        return self.done(as_tool_result("task", result))

    async def _resume(self) -> dict[str, Any]:
        env = self.env
        assert env.sid is not None
        susp = self.store.load(env.sid)
        if susp is None:
            raise Transport(
                f"fleet: suspended run {env.sid} is no longer in redis (expired or lost)", op="redis"
            )
        st = susp.state
        snapshot = self._stored(st["snapshot_digest"])
        resume = {"susp": susp}
        return await self._drive(snapshot, resume, st.get("report"))

    async def _drive(
        self, snapshot: dict[str, Any], resume: dict[str, Any] | None, report: dict[str, Any] | None
    ) -> dict[str, Any]:
        """Run (or resume) the loop for this segment; finish, or suspend on pending ``task`` calls."""
        env = self.env
        sid = suspension_id(env.agent_run_id, env.segment)
        # A redelivered segment that had suspended publishes its children again (the first attempt of a
        # first delivery cannot have suspended: one round trip saved).
        retried = self.attempt > 1 or bool(getattr(self.delivery, "redelivered", False))
        existing = self.store.load(sid) if retried else None
        if existing is not None:
            self._publish_children(existing.state)
            return {"kind": "suspended", "sid": sid}
        children = SuspendingChildren(self)
        core = self._parent_core(snapshot, children)
        children.core = core
        try:
            if resume is None:
                assert env.run is not None
                try:
                    plan = self._plan(core)
                except ToolError as err:
                    return self.done(ToolResult.failure("agent", err), report)
                outcome = await advance(core, plan, prompt=env.run.prompt)
            else:
                st = resume["susp"].state
                plan = RunPlan.from_json(st["plan"])
                tool_results = self._gather(core, resume["susp"])
                outcome = await advance(core, plan, prompt=None, tool_results=tool_results)
            if isinstance(outcome, Finished):
                return self.done(outcome.to_tool_result(), report)
            return self._suspend(core, plan, outcome, children, sid, report)
        finally:
            await core.aclose()

    def _plan(self, core: SessionCore) -> RunPlan:
        req = self.env.run
        assert req is not None
        return plan_run(
            core,
            req.prompt,
            agent=req.agent,
            max_steps=req.max_steps,
            output_schema=req.output_schema,
            model=req.model,
        )

    def _parent_core(self, snapshot: dict[str, Any], children: SuspendingChildren) -> SessionCore:
        sid = str(snapshot.get("session_id"))
        services = {"event_sink": self.rt.events.sink(sid), TASK_CHILDREN_SERVICE: children}
        return self.rt.factory.resume(snapshot, options_from_snapshot(snapshot, services))

    def _stored(self, digest: str) -> dict[str, Any]:
        return self.rt.stored_snapshot(digest)

    # ---- suspending -------------------------------------------------------------------------------

    def _suspend(
        self,
        core: SessionCore,
        plan: RunPlan,
        outcome: Suspended,
        children: SuspendingChildren,
        sid: str,
        report: dict[str, Any] | None,
    ) -> dict[str, Any]:
        env = self.env
        model_ids = _model_call_ids(outcome.run, core)
        snapshot = core.snapshot()
        body = snapshot_json(snapshot)
        digest = snapshot_digest(body)
        with redis_errors("fleet.snapshot"):
            self.rt.client.set(self.rt.keys.snapshot(digest), body, px=SUSPEND_TTL_MS)
        groups = []
        for call in children.pending:
            groups.append(
                {
                    "call_id": call.call_id,
                    "model_call_id": model_ids.get(call.call_id) or "",
                    "tool": call.tool,
                    "allow_partial_failure": call.allow_partial_failure,
                    "min_success_count": call.min_success_count,
                    "timeout_ms": call.timeout_ms,
                    "specs": [s.to_json() for s in call.specs],
                }
            )
        root = self._root()
        state = {
            "agent_run_id": env.agent_run_id,
            "segment_next": env.segment + 1,
            "snapshot_digest": digest,
            "session_id": core.id,
            "plan": plan.to_json(),
            "report": report,
            "cancel_keys": root,
            "description": env.description,
            "agent": (env.run.agent if env.run else None) or "general",
            "label_run_id": (report or {}).get("run_id") or env.agent_run_id,
            "label_slot": (report or {}).get("index", 0),
            "groups": groups,
        }
        rules = [
            Group(
                total=len(g["specs"]),
                need=(g["min_success_count"] or 1) if g["allow_partial_failure"] else len(g["specs"]),
                partial=bool(g["allow_partial_failure"]),
            )
            for g in groups
        ]
        self.store.create(sid, state, rules)
        for g in groups:
            for s in g["specs"]:
                data = start_data(ChildSpec.from_json(s), _child_session(core.id, s["task_id"]))
                core.kernel.sink.emit(
                    Event("subagent_start", g["call_id"], g["tool"], "agent", _now_ms(), None, data)
                )
        self._publish_children(state)
        return {"kind": "suspended", "sid": sid}

    def _root(self) -> list[str]:
        """The cancel keys children and continuations inherit: this run's first job's task id."""
        keys = list(self.env.cancel_keys)
        if self.env.kind == "run" and self.delivery.task_id not in keys:
            keys.append(self.delivery.task_id)
        return keys[-8:]

    def _publish_children(self, state: dict[str, Any]) -> None:
        sid = suspension_id(state["agent_run_id"], int(state["segment_next"]) - 1)
        for j, g in enumerate(state["groups"]):
            for s in g["specs"]:
                i = int(s["index"])
                tid = child_task_id(sid, j, i)
                env = AgentEnvelope(
                    kind="child",
                    agent_run_id=tid,
                    snapshot_digest=state["snapshot_digest"],
                    child=s,
                    child_session_id=_child_session(state["session_id"], s["task_id"]),
                    report=FanInTarget(sid=sid, group=j, index=i),
                    cancel_keys=list(state.get("cancel_keys") or []),
                    description=str(s.get("description") or "")[:500],
                )
                label = job_label(
                    g["call_id"],
                    i,
                    str(s.get("description") or ""),
                    task=AGENT_TASK,
                    agent=s["agent"]["name"],
                    parent_run_id=state.get("label_run_id"),
                )
                self._send(env, tid, label)
            if g.get("timeout_ms"):
                env = AgentEnvelope(kind="deadline", agent_run_id=f"{sid}:g{j}", sid=sid, group=j)
                label = job_label(g["call_id"], f"deadline g{j}", "task deadline", task=AGENT_TASK)
                self._send(env, f"{sid}:g{j}:deadline", label, countdown=g["timeout_ms"] / 1000)

    # ---- resuming ---------------------------------------------------------------------------------

    def _gather(self, core: SessionCore, susp: Any) -> dict[str, ToolResult]:
        """Each pending ``task`` call's result from its children's (one ``subagent_end`` per child)."""
        out: dict[str, ToolResult] = {}
        for j, g in enumerate(susp.state["groups"]):
            settled = susp.settled.get(j, "")
            results = []
            specs = [ChildSpec.from_json(s) for s in g["specs"]]
            for spec in specs:
                raw = susp.results.get((j, spec.index))
                if raw is not None:
                    tr = TaskResult.from_json(raw)
                else:
                    tr = spec.aborted(
                        _child_session(susp.state["session_id"], spec.task_id),
                        completion="timed_out" if settled == "timed_out" else "cancelled",
                        duration_ms=int(g.get("timeout_ms") or 0) if settled == "timed_out" else 0,
                    )
                results.append(tr)
                core.kernel.sink.emit(
                    Event(
                        "subagent_end",
                        g["call_id"],
                        g["tool"],
                        "agent",
                        _now_ms(),
                        None,
                        end_data(tr, False, getattr(core.kernel, "redactor", None)),
                    )
                )
            result = task_outcome(
                g["tool"],
                results,
                allow_partial_failure=bool(g["allow_partial_failure"]),
                min_success_count=g.get("min_success_count"),
                timed_out=settled == "timed_out",
            )
            charge_children(core.kernel.budget, specs, results)  # their shares came out of this budget
            result.output, result.metadata = core.kernel.projector.project(
                g["tool"], result.output, result.metadata
            )
            out[g["model_call_id"]] = result
        return out


class SuspendingChildren:
    """``task_children`` of a run that is a fleet job: record the call and suspend (never wait).

    A foreground call returns a result carrying ``a3s_suspend``: the loop ends the turn and leaves the
    call pending; the job stores the run and publishes the children. A background call publishes its
    child at once (its result goes to the parent's session stream and the result key) and returns the
    handle: nothing waits for it.
    """

    def __init__(self, jobs: AgentSegments) -> None:
        self.jobs = jobs
        self.pending: list[TaskCall] = []
        self.core: SessionCore | None = None  # set once the run's session is built

    async def run(self, ctx: ToolContext, call: TaskCall) -> ToolResult:
        if call.background:
            return self._background(ctx, call)
        self.pending.append(call)
        n = len(call.specs)
        return ToolResult(
            call.tool,
            f"Waiting for {n} child run(s); this run resumes when they finish.",
            0,
            {"a3s_suspend": {"call_id": call.call_id, "children": n}},
        )

    def _background(self, ctx: ToolContext, call: TaskCall) -> ToolResult:
        spec = call.specs[0]
        jobs = self.jobs
        session = _child_session(ctx.session_id, spec.task_id)
        # The child needs the parent's rules and limits: this session's snapshot, stored by digest.
        assert self.core is not None
        body = snapshot_json(self.core.snapshot())
        digest = snapshot_digest(body)
        with redis_errors("fleet.snapshot"):
            jobs.rt.client.set(jobs.rt.keys.snapshot(digest), body, px=SUSPEND_TTL_MS)
        env = AgentEnvelope(
            kind="child",
            agent_run_id=f"{ctx.session_id}:{spec.task_id}",
            snapshot_digest=digest,
            child=spec.to_json(),
            child_session_id=session,
            report=EventTarget(session_id=ctx.session_id, call_id=call.call_id),
            cancel_keys=jobs._root(),
            description=spec.description[:500],
        )
        label = job_label(
            call.call_id, 0, spec.description, task=AGENT_TASK, agent=spec.agent.name, background=True
        )
        jobs._send(env, env.agent_run_id, label)
        emitter = ctx.emit_event
        if emitter is not None:
            emitter("subagent_start", start_data(spec, session, background=True))
        handle = {
            "task_id": spec.task_id,
            "session_id": session,
            "agent": spec.agent.name,
            "description": spec.description,
        }
        return ToolResult.success(
            call.tool,
            f"Started background task {spec.task_id} ({spec.agent.name}: {spec.description}) on the fleet.",
            {"background_task": handle},
        )


def _child_session(parent_session: str, task_id: str) -> str:
    return f"{parent_session}.{task_id}"


def _model_call_ids(run: Any, core: SessionCore) -> dict[str, str]:
    """Kernel call id → the model's tool-call id, for the calls a suspended run left pending."""
    ids = {
        r.call_id: r.model_call_id
        for r in getattr(run, "tool_calls", [])
        if getattr(r, "model_call_id", None)
    }
    return ids


def _now_ms() -> int:
    return int(time.time() * 1000)
