"""Job functions: a plain JSON envelope in, ``ToolResult.to_json()`` out (SPEC F-1, F-3, K-1, K-8).

``run_job(envelope, delivery, runtime)`` is the whole life of one delivery of an ``a3s.tool`` job:

1. validate the envelope (``workers.protocol.JobEnvelope``); a bad envelope, or an origin other
   than ``host_direct``/``agent``, is a typed ``invalid_argument`` result, never a crash;
2. count the delivery and read the cancel flag (``workers.poison``): a poison job or a cancelled
   branch returns a typed failure without running (the first delivery of a read-only, idempotent
   call skips this round trip: see ``_check``);
3. with an idempotency key — unless the tool declares the call read-only and idempotent (K-5),
   which has no effect to protect — claim the step ``(run_id, query digest, key)`` in the step store: a step
   another delivery completed is *recovered* (its stored result is returned, the tool does not run
   again); a step another live delivery holds is waited for; a claimed step runs and its result is
   stored (``complete``) before anything is acknowledged. A delivery that outlived its lease is
   fenced off by the attempt number. A call that was cancelled (its branch's cancel flag) is stored
   as failed, not completed: it never finished, so the next delivery of the step runs it. Tools still
   have to be idempotent themselves — a worker killed after the side effect but before ``complete``
   runs the call again (at-least-once);
4. restore the session from its snapshot (cached per process by the snapshot's digest; looked up
   once per job, before step 2, and read from Redis only on a miss) and call the kernel with the origin
   the envelope names — ``invoke_host`` (trusted) or ``invoke_agent`` — bounded by the soft time
   limit and stopped when the branch's cancel flag appears;
5. push the result onto the run's result list, then return it (Celery acknowledges after) — in
   full when the caller reads Celery's result backend, as a short summary (``return_value``) when
   the caller ignores it (the result list carries the full result). A failed result (``exit_code``
   ≠ 0) is raised as ``JobFailed`` instead, after the push: Celery and Flower record the job as
   FAILURE, the fan-in is unchanged (F-5).

Every failure crosses as data: the kernel already turns tool errors into results; anything else
(a broken snapshot, Redis trouble, a bug) becomes a ``ToolResult.failure`` with a typed kind.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

from celery import Celery
from celery.exceptions import SoftTimeLimitExceeded
from pydantic import ValidationError

from config.settings import Settings
from flows.sessions import SessionCore
from flows.snapshot import json_safe
from kernel.budget import Allotment, metered
from kernel.errors import Cancelled, InvalidArgument, Timeout, ToolError, Transport
from kernel.result import ToolResult
from kernel.state import Busy, Completed, StepKey
from workers.poison import DeliveryCheck, check_delivery, is_poison, poison_error
from workers.protocol import ALLOWED_ORIGINS, TOOL_TASK, JobEnvelope
from workers.runtime import WorkerRuntime, runtime_for

CANCEL_POLL_S = 0.25  # how often a running job looks at its cancel flag
MIN_STEP_LEASE_MS = 1_000
MAX_STEP_LEASE_MS = 5_000
LEASE_RENEWALS = 3  # renew when a third of the lease has passed
BUSY_POLL_MAX_S = 0.5
RESULT_REPR_CHARS = 200
STOP_SETTLE_S = 1.0  # a cancelled kernel call gets this long to finish cancelling


@dataclass(frozen=True, slots=True)
class Delivery:
    task_id: str
    redelivered: bool = False
    worker: str = ""


def step_lease_ms(settings: Settings) -> int:
    """Half the visibility timeout (a delivery that comes back after a whole worker died finds the
    dead holder's lease expired), at most 5 s (a killed pool child's job is redelivered at once and
    waits that long for the dead holder's lease), renewed every third of it while the job runs."""
    return max(MIN_STEP_LEASE_MS, min(MAX_STEP_LEASE_MS, settings.visibility_timeout_s * 1000 // 2))


class JobFailed(Exception):
    """Raised by an ``a3s.tool`` job *after* its failed result was published: the job ends FAILURE.

    ``args``: what the job would have returned (the full ``ToolResult`` JSON when the caller reads
    Celery's result backend, else the ``return_value`` summary) — so the backend's FAILURE record
    still carries the typed result — and the one line Flower and the worker's log show.
    """

    @classmethod
    def of(cls, data: dict[str, Any], value: dict[str, Any]) -> JobFailed:
        kind = data.get("error_kind")
        line = f"{data.get('name')} failed: exit_code={data.get('exit_code')}"
        if isinstance(kind, dict) and kind.get("type"):
            line += f", {kind['type']}"
        meta = data.get("metadata")
        command_exit = meta.get("exit_code") if isinstance(meta, dict) else None
        if isinstance(command_exit, int) and command_exit != 0:
            line += f" (command exited {command_exit})"
        return cls(value, line)

    def __str__(self) -> str:
        return str(self.args[1]) if len(self.args) > 1 else super().__str__()

    def __repr__(self) -> str:
        return f"JobFailed({str(self)!r})"


def register(app: Celery, settings: Settings) -> None:
    """Register the fleet's jobs on ``app`` only (``shared=False``: no other app inherits them)."""

    # resultrepr_maxsize: Celery reprs the result into its log line and task-succeeded event (Flower);
    # the full result travels on the run's result list, a short repr is enough there and cheaper.
    # throws: a failed tool is an expected outcome — logged in one line, without a traceback.
    @app.task(
        name=TOOL_TASK,
        bind=True,
        acks_late=True,
        reject_on_worker_lost=True,
        shared=False,
        resultrepr_maxsize=RESULT_REPR_CHARS,
        throws=(JobFailed,),
    )
    def tool_job(self: Any, envelope: dict[str, Any]) -> dict[str, Any]:
        info = self.request.delivery_info or {}
        delivery = Delivery(self.request.id, bool(info.get("redelivered")), self.request.hostname or "")
        data = run_job(envelope, delivery, runtime_for(settings))
        # The result travels on the run's result list (pushed before the ack). A caller that ignores
        # Celery's result (the list fan-in) gets only a summary as the return value: Celery reprs it
        # for the log line and Flower's task-succeeded event, and a short value is cheaper to repr.
        value = return_value(data) if getattr(self.request, "ignore_result", False) else data
        if data.get("exit_code") != 0:
            # Already published (run_job pushed it before returning), so the fan-in is unchanged:
            # raising only makes Celery — and Flower — record the job as FAILURE (F-5).
            raise JobFailed.of(data, value)
        return value


def return_value(data: dict[str, Any]) -> dict[str, Any]:
    """What an ``a3s.tool`` job returns to Celery when its caller ignores Celery's result."""
    kind = data.get("error_kind")
    return {
        "name": data.get("name"),
        "exit_code": data.get("exit_code"),
        "error_kind": kind.get("type") if isinstance(kind, dict) else kind,
    }


def run_job(raw: Any, delivery: Delivery, rt: WorkerRuntime) -> dict[str, Any]:
    started = time.monotonic()
    try:
        env = JobEnvelope.model_validate(raw)
    except ValidationError as exc:
        return _reject_envelope(raw, delivery, rt, exc)
    deliveries = 0
    try:
        session = _restore(env, rt)
        safe = _safe_to_repeat(env, session)
        check = _check(env, delivery, rt, safe)
        deliveries = check.deliveries
        if is_poison(check, rt.settings.max_deliveries):
            result = ToolResult.failure(
                env.tool, poison_error(delivery.task_id, deliveries, rt.settings.max_deliveries)
            )
        elif check.cancelled:
            result = ToolResult.failure(
                env.tool, Cancelled(f"branch {env.branch_index} of {env.run_id} was cancelled", op=env.tool)
            )
        else:
            result = _execute(env, session, delivery, rt, started, safe)
    except SoftTimeLimitExceeded:
        result = _timed_out(env.tool, started)
    except ToolError as err:  # Redis trouble at the edges of the job (counter, step store)
        result = ToolResult.failure(env.tool, err)
    except Exception as exc:  # a bug or a broken store: still typed data for the caller
        result = ToolResult.failure(
            env.tool, ToolError(f"worker fault: {type(exc).__name__}: {exc}", fault=type(exc).__name__)
        )
    result.metadata.setdefault("a3s_fleet", {}).update(
        {
            "task_id": delivery.task_id,
            "worker": delivery.worker,
            "delivery": deliveries,
            "redelivered": delivery.redelivered,
        }
    )
    data = result.to_json()
    rt.publish(env.run_id, env.branch_index, delivery.task_id, deliveries, data)
    return data


def _reject_envelope(raw: Any, delivery: Delivery, rt: WorkerRuntime, exc: ValidationError) -> dict[str, Any]:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first.get("loc", ())) or "envelope"
    hint = f" (allowed origins: {', '.join(ALLOWED_ORIGINS)})" if where == "origin" else ""
    tool = raw.get("tool") if isinstance(raw, dict) and isinstance(raw.get("tool"), str) else TOOL_TASK
    err = InvalidArgument(f"invalid job envelope at {where}: {first.get('msg')}{hint}", path=where)
    data = ToolResult.failure(tool, err).to_json()
    # Still answer the run if it can be named, so its fan-in does not wait for a job that never runs.
    if (
        isinstance(raw, dict)
        and isinstance(raw.get("run_id"), str)
        and isinstance(raw.get("branch_index"), int)
    ):
        rt.publish(raw["run_id"], raw["branch_index"], delivery.task_id, 0, data)
    return data


def _check(env: JobEnvelope, delivery: Delivery, rt: WorkerRuntime, safe: bool) -> DeliveryCheck:
    """Count the delivery and read the cancel flag — except on the *first* delivery of a call that is
    safe to repeat (read-only and idempotent for these arguments, K-5): it has no effect a cancel flag
    must prevent and nothing to count yet, so it saves the round trip. Its redeliveries are counted
    (one more, for the uncounted first), so the poison guard still stops a job that kills workers."""
    if safe and not delivery.redelivered:
        return DeliveryCheck(1, False)
    check = check_delivery(rt.client, rt.keys, delivery.task_id)
    return DeliveryCheck(check.deliveries + 1, check.cancelled) if safe else check


def _execute(
    env: JobEnvelope,
    session: SessionCore | ToolError,
    delivery: Delivery,
    rt: WorkerRuntime,
    started: float,
    safe: bool,
) -> ToolResult:
    deadline = started + rt.settings.job_soft_time_limit_s
    if env.idempotency_key is None or safe:
        return _call(env, session, delivery, rt, deadline, None)
    key = StepKey(env.run_id, env.query_digest(), env.idempotency_key)
    lease = step_lease_ms(rt.settings)
    while True:
        claim = rt.steps.claim(key, lease_ms=lease)
        if isinstance(claim, Completed):
            result = ToolResult.from_json(claim.result)
            result.metadata.setdefault("a3s_fleet", {})["recovered_attempt"] = claim.attempt
            return result
        if not isinstance(claim, Busy):
            break
        if time.monotonic() + claim.retry_after_ms / 1000 > deadline:
            return _timed_out(env.tool, started, op="step_claim")
        time.sleep(min(BUSY_POLL_MAX_S, max(0.01, claim.retry_after_ms / 1000)))
    result = _call(env, session, delivery, rt, deadline, (key, claim.attempt, lease))
    try:
        if _unfinished(result):
            # Stopped before it ended (its branch was cancelled): stored as failed, so the step's
            # next delivery (a resumed workflow's) runs it rather than recovering the cancellation.
            rt.steps.fail(key, claim.attempt, result.error_kind)
        else:
            rt.steps.complete(key, claim.attempt, result.to_json())
    except InvalidArgument:  # too big for the step store: not recoverable, a redelivery re-runs it
        rt.steps.fail(key, claim.attempt, {"type": "invalid_argument", "reason": "result_too_large"})
    except ToolError:  # fenced off (our lease lapsed and another delivery took over): it owns the step
        pass
    return result


def _unfinished(result: ToolResult) -> bool:
    """A call that was cancelled did not finish: it has no result to recover (F-3)."""
    kind = result.error_kind
    return result.exit_code != 0 and isinstance(kind, dict) and kind.get("type") == "cancelled"


def _safe_to_repeat(env: JobEnvelope, session: SessionCore | ToolError) -> bool:
    """A read-only, idempotent call (K-5, declared by the tool for these arguments) has no effect to
    protect: a second delivery simply runs it again, and the step store's two round trips are saved."""
    if isinstance(session, ToolError):
        return False  # _call reports the broken snapshot
    kernel = session.kernel
    caps = kernel.capabilities_of(kernel.registry.scoped(), env.tool, env.args)
    return caps is not None and caps.read_only and caps.idempotent


def _restore(env: JobEnvelope, rt: WorkerRuntime) -> SessionCore | ToolError:
    """The job's session, looked up once per job; a snapshot that cannot be restored is the job's
    typed failure (reported by ``_call`` — after the delivery count and the step claim, as always)."""
    try:
        return rt.session_for(env)
    except ToolError as err:
        return err


def _call(
    env: JobEnvelope,
    session: SessionCore | ToolError,
    delivery: Delivery,
    rt: WorkerRuntime,
    deadline: float,
    step: tuple[StepKey, int, int] | None,
) -> ToolResult:
    if isinstance(session, ToolError):
        return ToolResult.failure(env.tool, session)
    kernel = session.kernel
    spent: dict[str, int] = {}
    coro = _metered_call(kernel, env, spent)
    result = rt.drive(_supervise(coro, env, delivery, rt, deadline, step))
    # What the call spent of this copy of the session's budget (nested calls included): the
    # session holds the call while it runs here and is charged this when the result arrives (K-3).
    result.metadata.setdefault("a3s_fleet", {})["spent"] = spent
    # The session's JSON-safe tool state after the call (e.g. the bash working directory): a direct
    # call run on a worker hands it back so the orchestrator's session keeps it (Session.tool).
    result.metadata.setdefault("a3s_fleet", {})["session_state"] = json_safe(kernel.session_state)
    return result


async def _metered_call(kernel: Any, env: JobEnvelope, spent: dict[str, int]) -> ToolResult:
    allotment = Allotment.from_json(env.allotment) if env.allotment is not None else None
    with metered(allotment) as meter:  # set inside the call's task: its nested calls' tasks inherit it
        try:
            if env.origin == "host_direct":
                return await kernel.invoke_host(env.tool, env.args)
            return await kernel.invoke_agent(env.tool, env.args)
        finally:
            spent.update(meter)


async def _supervise(
    coro: Coroutine[Any, Any, ToolResult],
    env: JobEnvelope,
    delivery: Delivery,
    rt: WorkerRuntime,
    deadline: float,
    step: tuple[StepKey, int, int] | None,
) -> ToolResult:
    """Run the kernel call; every ``CANCEL_POLL_S`` look at the deadline and the cancel flag, and renew
    the step lease when a third of it has passed. (The checks are short blocking Redis calls.)"""
    task = asyncio.ensure_future(coro)
    t0 = time.monotonic()
    renew_at = t0 + (step[2] / 1000 / LEASE_RENEWALS if step else float("inf"))
    while True:
        await asyncio.wait([task], timeout=max(0.0, min(CANCEL_POLL_S, deadline - time.monotonic())))
        if task.done():
            if task.cancelled():
                return ToolResult.failure(env.tool, Cancelled(f"Tool '{env.tool}' cancelled", op=env.tool))
            return task.result()
        if time.monotonic() >= deadline:
            await _stop(task)
            return _timed_out(env.tool, t0)
        rt.events.flush()  # a long call's events reach its stream live, a poll period apart
        if _cancel_requested(rt, delivery.task_id):
            await _stop(task)
            return ToolResult.failure(
                env.tool, Cancelled(f"branch {env.branch_index} of {env.run_id} was cancelled", op=env.tool)
            )
        if step is not None and time.monotonic() >= renew_at:
            try:
                rt.steps.renew(step[0], step[1], lease_ms=step[2])
                renew_at = time.monotonic() + step[2] / 1000 / LEASE_RENEWALS
            except Transport:
                pass  # the next poll tries again; the lease outlives several polls


async def _stop(task: asyncio.Future[ToolResult]) -> None:
    task.cancel()
    await asyncio.wait([task], timeout=STOP_SETTLE_S)


def _cancel_requested(rt: WorkerRuntime, task_id: str) -> bool:
    try:
        return rt.cancelled(task_id)
    except Transport:
        return False  # cannot read the flag right now: keep running, the deadline still bounds us


def _timed_out(tool: str, started: float, op: str | None = None) -> ToolResult:
    ms = int((time.monotonic() - started) * 1000)
    return ToolResult.failure(
        tool,
        Timeout(f"job '{tool}' hit the fleet's soft time limit after {ms}ms", op=op or tool, duration_ms=ms),
    )
