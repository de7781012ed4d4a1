"""``a3s.agent`` jobs: agent runs on a fleet, never holding a worker slot while they wait (SPEC A-4, X-3, F-3).

One delivery of an ``a3s.agent`` job (``workers.agent_protocol.AgentEnvelope``):

1. validate; count the delivery and read the cancel flags (its own and its ``cancel_keys``): a
   poison job or a cancelled run ends with a typed failure, reported like any result;
2. a ``deadline`` job settles its group (``workers.state.suspend``) and, when that completes the fan-in,
   publishes the continuation — nothing else;
3. every other kind is one *segment* of an agent run, claimed in the step store under
   ``(agent_run_id, query digest, seg:<n>)`` (F-3): a segment another delivery completed is recovered,
   a live one waited for (at most its lease), a new one runs — supervised: the cancel flags are read
   and the lease renewed every ``CANCEL_POLL_S``, and the fleet's soft time limit bounds it;
4. a segment ends *finished* — its result is reported (``list``: the waiting orchestrator's run list;
   ``fanin``: the suspended parent's fan-in, whose completion publishes the parent's continuation;
   ``event``: a background child's ``subagent_end`` on the parent's stream) — or *suspended*: the run
   called ``task``; its session snapshot (conversation included, the call pending) is stored by
   digest, the suspension (``SuspendStore.create``) before any child is published, then the children
   (``child`` jobs) and their deadlines, and the job ends. A redelivered segment that finds its
   suspension already stored publishes the same children again (their own step claims absorb the
   duplicates) instead of running the model again;
5. the continuation (``resume``) rebuilds the run from the stored snapshot, turns the children's
   results into each pending ``task`` call's result (``subagent_end`` for each child, exactly once:
   the segment runs once), and continues the loop — to the end, or to its next suspension.

Children run ``flows.task.children.run_child`` — the embedded code — on a worker, with the worker's
own model endpoints (A-1). The segment itself (run, suspend, resume) is ``workers.agent_segments``. A failed run's job is raised as ``JobFailed`` after its result was
reported, so Flower shows FAILURE (F-5).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Coroutine
from typing import Any

from celery import Celery
from celery.exceptions import SoftTimeLimitExceeded
from pydantic import ValidationError

from config.settings import Settings
from flows.task.children import ChildSpec
from flows.task.inprocess import end_data
from flows.task.result import TaskResult
from kernel.errors import Cancelled, InvalidArgument, Timeout, ToolError, Transport
from kernel.events import Event
from kernel.result import ToolResult
from kernel.state import Busy, Completed, StepKey
from workers.agent_protocol import (
    AGENT_TASK,
    TASK_RESULT_TTL_S,
    AgentEnvelope,
    EventTarget,
    FanInTarget,
    ListTarget,
    child_task_id,
    continuation_task_id,
    task_result_key,
)
from workers.agent_segments import AgentSegments
from workers.jobs import JobFailed, step_lease_ms
from workers.poison import check_delivery, is_poison, poison_error
from workers.protocol import job_label
from workers.runtime import WorkerRuntime, runtime_for
from workers.state.redis_client import redis_errors
from workers.state.suspend import SUSPEND_TTL_MS, SuspendStore

CANCEL_POLL_S = 0.25
LEASE_RENEWALS = 3
BUSY_POLL_MAX_S = 0.5
STOP_SETTLE_S = 2.0
RESULT_REPR_CHARS = 200


def register(app: Celery, settings: Settings) -> None:
    """Register ``a3s.agent`` on ``app`` only (see ``workers.jobs.register``)."""

    @app.task(
        name=AGENT_TASK,
        bind=True,
        acks_late=True,
        reject_on_worker_lost=True,
        shared=False,
        resultrepr_maxsize=RESULT_REPR_CHARS,
        throws=(JobFailed,),
        ignore_result=True,
    )
    def agent_job(self: Any, envelope: dict[str, Any]) -> dict[str, Any]:
        info = self.request.delivery_info or {}
        from workers.jobs import Delivery

        delivery = Delivery(self.request.id, bool(info.get("redelivered")), self.request.hostname or "")
        summary = run_agent_job(app, envelope, delivery, runtime_for(settings))
        if summary.get("exit_code") not in (0, None):
            raise JobFailed.of(summary, summary)  # reported already: only Flower's record changes
        return summary


# ---- one delivery -------------------------------------------------------------------------------


def run_agent_job(app: Celery, raw: Any, delivery: Any, rt: WorkerRuntime) -> dict[str, Any]:
    started = time.monotonic()
    try:
        env = AgentEnvelope.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "envelope"
        err = InvalidArgument(f"invalid agent job envelope at {where}: {first.get('msg')}", path=where)
        data = ToolResult.failure(AGENT_TASK, err).to_json()
        _report_raw(rt, raw, delivery, data)
        return _summary(data)
    jobs = AgentJobs(app, rt, env, delivery)
    outcome: dict[str, Any]
    try:
        check = check_delivery(rt.client, rt.keys, delivery.task_id)
        jobs.deliveries = check.deliveries
        if is_poison(check, rt.settings.max_deliveries):
            err: ToolError = poison_error(delivery.task_id, check.deliveries, rt.settings.max_deliveries)
            outcome = jobs.done(ToolResult.failure(AGENT_TASK, err))
        elif check.cancelled or (env.cancel_keys and jobs.cancel_requested()):
            outcome = jobs.done(
                ToolResult.failure(AGENT_TASK, Cancelled("agent run cancelled", op=AGENT_TASK))
            )
        elif env.kind == "deadline":
            jobs.deadline()
            return {"name": AGENT_TASK, "exit_code": 0, "kind": "deadline"}
        else:
            outcome = jobs.segment(started)
    except SoftTimeLimitExceeded:
        ms = int((time.monotonic() - started) * 1000)
        outcome = jobs.done(
            ToolResult.failure(
                AGENT_TASK, Timeout("agent job hit the soft time limit", op=AGENT_TASK, duration_ms=ms)
            )
        )
    except ToolError as err:
        outcome = jobs.done(ToolResult.failure(AGENT_TASK, err))
    except Exception as exc:  # a bug or a broken store: still typed data for whoever waits
        fault = ToolError(f"worker fault: {type(exc).__name__}: {exc}", fault=type(exc).__name__)
        outcome = jobs.done(ToolResult.failure(AGENT_TASK, fault))
    return jobs.finish(outcome)


def _summary(data: dict[str, Any]) -> dict[str, Any]:
    kind = data.get("error_kind")
    return {
        "name": data.get("name"),
        "exit_code": data.get("exit_code"),
        "error_kind": kind.get("type") if isinstance(kind, dict) else kind,
    }


def _report_raw(rt: WorkerRuntime, raw: Any, delivery: Any, data: dict[str, Any]) -> None:
    """A malformed envelope still answers a waiting orchestrator when it can be named."""
    report = raw.get("report") if isinstance(raw, dict) else None
    if isinstance(report, dict) and report.get("type") == "list":
        run_id, index = report.get("run_id"), report.get("index")
        if isinstance(run_id, str) and isinstance(index, int):
            rt.publish(run_id, index, delivery.task_id, 0, data)


class AgentJobs(AgentSegments):
    """The work of one delivery (see the module docstring)."""

    def __init__(self, app: Celery, rt: WorkerRuntime, env: AgentEnvelope, delivery: Any) -> None:
        self.app = app
        self.rt = rt
        self.env = env
        self.delivery = delivery
        self.deliveries = 0
        self.attempt = 1  # the step claim's attempt: > 1 when an earlier delivery died mid-segment
        self.store = SuspendStore(rt.client)

    # ---- outcomes -------------------------------------------------------------------------------

    def done(self, result: ToolResult, report: dict[str, Any] | None = None) -> dict[str, Any]:
        target = report if report is not None else self._own_report()
        return {"kind": "done", "result": result.to_json(), "report": target}

    def _own_report(self) -> dict[str, Any] | None:
        """This job's report target; a ``list`` target remembers the task id the orchestrator waits on."""
        if self.env.report is None:
            return None
        target = self.env.report.model_dump()
        if target.get("type") == "list":
            target["task_id"] = self.delivery.task_id
        return target

    def finish(self, outcome: dict[str, Any]) -> dict[str, Any]:
        """Report a finished run (every path), flush the events; the job's return value."""
        if outcome.get("kind") != "done":
            self.rt.events.flush()
            return {"name": AGENT_TASK, "exit_code": 0, "suspended": outcome.get("sid")}
        data = outcome["result"]
        data.setdefault("metadata", {}).setdefault("a3s_fleet", {}).update(
            {"task_id": self.delivery.task_id, "worker": self.delivery.worker, "delivery": self.deliveries}
        )
        self._report(outcome.get("report"), data)
        return _summary(data)

    def _report(self, target: dict[str, Any] | None, data: dict[str, Any]) -> None:
        kind = (target or {}).get("type")
        if kind == "list":
            t = ListTarget.model_validate({k: v for k, v in target.items() if k != "task_id"})
            # The waiting orchestrator knows the branch by its first job's task id; a suspended run's
            # result comes from a continuation job, which names that first id.
            origin = str(target.get("task_id") or self.delivery.task_id) if target else self.delivery.task_id
            self.rt.publish(t.run_id, t.index, origin, self.deliveries, data)
            return
        if kind == "fanin":
            f = FanInTarget.model_validate(target)
            result = _task_result_json(data, self.env)
            rep = self.store.report(f.sid, f.group, f.index, result, bool(result.get("success")))
            self.rt.events.flush()
            if rep.settled_now:
                self._cancel_group(f.sid, f.group)
            if rep.trigger:
                self._continue(f.sid)
            return
        if kind == "event":
            e = EventTarget.model_validate(target)
            result = _task_result_json(data, self.env)
            with redis_errors("fleet.task_result"):
                self.rt.client.set(
                    task_result_key(str(result.get("task_id"))), json.dumps(result), ex=TASK_RESULT_TTL_S
                )
            sink = self.rt.events.sink(e.session_id)
            tr = TaskResult.from_json(result)
            sink.emit(Event("subagent_end", e.call_id, "task", "agent", _now_ms(), None, end_data(tr, True)))
        self.rt.events.flush()

    # ---- deadline ---------------------------------------------------------------------------------

    def deadline(self) -> None:
        assert self.env.sid is not None and self.env.group is not None
        settled, trigger = self.store.expire_group(self.env.sid, self.env.group)
        if settled:
            self._cancel_group(self.env.sid, self.env.group)
        if trigger:
            self._continue(self.env.sid)

    def _cancel_group(self, sid: str, group: int) -> None:
        """A group settled early (first failure, enough successes, deadline): stop its other children."""
        susp = self.store.load(sid)
        if susp is None:
            return
        groups = susp.state.get("groups") or []
        if group >= len(groups):
            return
        open_ids = [
            child_task_id(sid, group, int(s["index"]))
            for s in groups[group]["specs"]
            if (group, int(s["index"])) not in susp.results
        ]
        if not open_ids:
            return
        with redis_errors("fleet.cancel"):
            pipe = self.rt.client.pipeline(transaction=False)
            for tid in open_ids:
                pipe.set(self.rt.keys.cancel(tid), 1, px=SUSPEND_TTL_MS)
            pipe.execute()

    def _continue(self, sid: str) -> None:
        """Publish the continuation of suspension ``sid`` (once its fan-in is complete)."""
        susp = self.store.load(sid)
        if susp is None:
            return
        st = susp.state
        env = AgentEnvelope(
            kind="resume",
            agent_run_id=st["agent_run_id"],
            segment=int(st["segment_next"]),
            sid=sid,
            cancel_keys=list(st.get("cancel_keys") or []),
            description=str(st.get("description") or "")[:500],
        )
        label = job_label(
            st.get("label_run_id") or st["agent_run_id"],
            st.get("label_slot", 0),
            f"{st.get('description') or 'agent run'} (continued)",
            task=AGENT_TASK,
            agent=st.get("agent"),
            segment=env.segment,
        )
        self._send(env, continuation_task_id(env.agent_run_id, env.segment), label)
        self.store.mark_sent(sid)

    def _send(self, env: AgentEnvelope, task_id: str, label: Any, countdown: float | None = None) -> None:
        self.app.send_task(
            AGENT_TASK,
            kwargs={"envelope": env.model_dump(mode="json", exclude_none=True)},
            task_id=task_id,
            queue=self.rt.settings.queue,
            ignore_result=True,
            countdown=countdown,
            **label.send_options(),
        )

    def cancel_requested(self) -> bool:
        keys = [self.rt.keys.cancel(k) for k in (self.delivery.task_id, *self.env.cancel_keys)]
        with redis_errors("fleet.cancel"):
            return bool(self.rt.client.exists(*keys))

    # ---- a segment --------------------------------------------------------------------------------

    def segment(self, started: float) -> dict[str, Any]:
        env, rt = self.env, self.rt
        key = StepKey(env.agent_run_id, env.query_digest(), f"seg:{env.segment}")
        lease = step_lease_ms(rt.settings)
        deadline = started + rt.settings.job_soft_time_limit_s
        if env.kind == "child":
            # A child has no effect beyond its own tool calls (which meet the usual rules) and its
            # report, which every target counts once (HSETNX in a suspension, the task id on a run's
            # list): a redelivered child simply runs again, and the step store's two round trips — a
            # third of a short child's cost — are saved. Run and resume segments publish children and
            # continuations, so they are claimed.
            return rt.drive(self._supervise(self._execute(), None, 0, lease, deadline))
        while True:
            claim = rt.steps.claim(key, lease_ms=lease)
            self.attempt = getattr(claim, "attempt", 1)
            if isinstance(claim, Completed):
                return dict(claim.result)  # recovered: report it again (idempotent on every target)
            if not isinstance(claim, Busy):
                break
            if time.monotonic() + claim.retry_after_ms / 1000 > deadline:
                raise Timeout("agent segment is held by another delivery", op="step_claim", duration_ms=0)
            time.sleep(min(BUSY_POLL_MAX_S, max(0.01, claim.retry_after_ms / 1000)))
        outcome = rt.drive(self._supervise(self._execute(), key, claim.attempt, lease, deadline))
        try:
            rt.steps.complete(key, claim.attempt, outcome)
        except InvalidArgument:  # too big for the step store: a redelivery runs the segment again
            rt.steps.fail(key, claim.attempt, {"type": "invalid_argument", "reason": "result_too_large"})
        except ToolError:
            pass  # fenced off: another delivery owns the segment now
        return outcome

    async def _supervise(
        self,
        coro: Coroutine[Any, Any, dict[str, Any]],
        key: StepKey | None,
        attempt: int,
        lease: int,
        deadline: float,
    ) -> dict[str, Any]:
        task = asyncio.ensure_future(coro)
        renew_at = time.monotonic() + lease / 1000 / LEASE_RENEWALS
        while True:
            await asyncio.wait([task], timeout=max(0.0, min(CANCEL_POLL_S, deadline - time.monotonic())))
            if task.done():
                return task.result()
            self.rt.events.flush()
            stop: ToolError | None = None
            if time.monotonic() >= deadline:
                stop = Timeout(
                    "agent job hit the fleet's soft time limit",
                    op=AGENT_TASK,
                    duration_ms=int(self.rt.settings.job_soft_time_limit_s * 1000),
                )
            else:
                try:
                    if self.cancel_requested():
                        stop = Cancelled("agent run cancelled", op=AGENT_TASK)
                except Transport:
                    pass
            if stop is not None:
                task.cancel()
                await asyncio.wait([task], timeout=STOP_SETTLE_S)
                return self.done(ToolResult.failure(AGENT_TASK, stop), self._report_target())
            if key is not None and time.monotonic() >= renew_at:
                try:
                    self.rt.steps.renew(key, attempt, lease_ms=lease)
                    renew_at = time.monotonic() + lease / 1000 / LEASE_RENEWALS
                except Transport:
                    pass

    def _report_target(self) -> dict[str, Any] | None:
        if self.env.kind == "resume" and self.env.sid:
            susp = self.store.load(self.env.sid)
            return susp.state.get("report") if susp else None
        return self._own_report()


def _task_result_json(data: dict[str, Any], env: AgentEnvelope) -> dict[str, Any]:
    """The ``TaskResult`` JSON a child job's result carries (or a failure synthesised from it)."""
    meta = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
    found = meta.get("task_result") if isinstance(meta, dict) else None
    if isinstance(found, dict):
        return found
    spec = ChildSpec.from_json(env.child) if env.child else None
    aborted = TaskResult.aborted(
        task_id=spec.task_id if spec else env.agent_run_id,
        index=spec.index if spec else 0,
        agent=spec.agent.name if spec else "",
        description=spec.description if spec else "",
        session_id=env.child_session_id or "",
        completion="failed",
        error_kind=data.get("error_kind") if isinstance(data.get("error_kind"), dict) else None,
    )
    return aborted.to_json()


def _now_ms() -> int:
    return int(time.time() * 1000)
