"""Dispatchers: how a fan-out branch runs — in this process, or as a Celery job (SPEC F-1, X-3, CONVENTIONS §13).

``Dispatcher`` is ``orchestrator.fanout.BranchRunner``; ``InProcessDispatcher`` is the embedded one.
``CeleryRunner`` (alias ``CeleryDispatcher``) sends each branch as a named ``a3s.tool`` job whose
envelope names the session snapshot by its digest, and does its own fan-in — never a chord:

- the first branch of a run registers the run in Redis (``workers.protocol`` keys: the run hash,
  the live-runs index ``a3s-fleet status`` reads, and the snapshot under its content-addressed key,
  so it crosses the broker once per run instead of once per job) and starts one reader for the run;
- a branch whose envelope the worker would refuse (``JobEnvelope``'s bounds) is never sent: it fails
  at once with ``invalid_argument`` (``path``: the refused field);
- branches submitted in the same event-loop turn are published in one batch, from a thread (the
  Celery producer is blocking I/O), in one Redis pipeline where kombu supports it (``_publish``); each
  message is labelled for Flower by ``workers.protocol.job_label`` (``shadow`` name
  ``a3s.tool:<description> [<run_id>:<index or step id>]``, ``kwargsrepr`` with run id, branch
  index, step id, description, tool);
- workers push each result onto the run's list before acknowledging the job; the reader pops them
  (``BLPOP``, the default ``wait="list"``) or polls the Celery result backend (``wait="poll"``,
  kept for the benchmark's comparison) and resolves the branch's future; a duplicate delivery's
  second result is ignored;
- every idle second the reader checks that the run hash still exists (refreshing its TTL and the
  snapshot's), and takes any result a worker
  reported (the run hash keeps a copy beside the done flag) whose list item never arrived — a popped
  item lost with a dropped connection cannot leave a branch waiting; Redis restarted without its
  data (or the key expired) means queued jobs and results may be gone, so every unfinished branch
  fails with ``transport{op: "redis"}`` — a clear error, never a silent wait. An unreachable Redis
  gets ``OUTAGE_TOLERANCE_S`` to come back, then fails the same way;
- cancelling a branch's coroutine (fan-in rules, the caller, a closed session) sets the branch's
  cancel flag (a worker will not start it; a running job stops within ``CANCEL_POLL_S``), revokes the
  job with ``terminate=True`` (a prefork child is killed), and settles: a branch whose job had
  already started is awaited until its worker reports (bounded by ``CANCEL_SETTLE_S``).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import redis.asyncio as aioredis
from pydantic import ValidationError

from config.settings import Settings
from kernel.errors import Cancelled, InvalidArgument, ToolError, Transport
from kernel.result import ToolResult
from orchestrator.dispatch_presence import (
    CONNECTION_ERRORS,
    NO_WORKER_GRACE_S,
    NO_WORKER_POLL_S,
    broker_text,
    no_worker_error,
)
from orchestrator.fanout import Branch, BranchRunner, InProcessRunner
from workers.protocol import (
    TOOL_TASK,
    FleetKeys,
    JobEnvelope,
    job_label,
    snapshot_digest,
    snapshot_json,
)

Dispatcher = BranchRunner
InProcessDispatcher = InProcessRunner

IDLE_CHECK_S = 1.0  # BLPOP timeout: how often a quiet run checks Redis still holds its state
HEARTBEAT_S = 5.0
RUN_KEY_TTL_MS = 600_000  # a run whose orchestrator vanished is forgotten after this
OUTAGE_TOLERANCE_S = 30.0
OUTAGE_POLL_S = 0.25
CANCEL_SETTLE_S = 2.0
# A run's publishing thread may hand back after its results arrived (a loaded machine): closing the
# run waits this long for it, so its bookkeeping never lands after the run's keys are deleted.
FLUSH_SETTLE_S = 2.0  # inside the 5 s an Agent gives a runner's aclose()
POLL_INTERVAL_S = 0.005
DRAIN_BATCH = 64
PUBLISH_BATCH_COMMANDS = 256  # per pipeline: a job is two commands (message + task-sent event)
REDIS_SOCKET_TIMEOUT_S = 5.0  # above IDLE_CHECK_S: a blocking pop is never mistaken for a dead socket
REDIS_CONNECT_TIMEOUT_S = 2.0
STOP_ITEM = json.dumps({"stop": True})
WaitMode = Literal["list", "poll"]


@dataclass
class _Run:
    run_id: str
    snapshot: dict[str, Any]
    snapshot_json: str = ""
    snapshot_digest: str = ""
    futures: dict[int, asyncio.Future[ToolResult]] = field(default_factory=dict)
    task_ids: dict[int, str] = field(default_factory=dict)
    outbox: list[tuple[int, Branch]] = field(default_factory=list)
    refs: int = 0
    ready: asyncio.Task[None] | None = None
    reader: asyncio.Task[None] | None = None
    flushes: set[asyncio.Future[None]] = field(default_factory=set)
    flushing: bool = False
    closing: bool = False
    unconsumed_since: float | None = None  # monotonic time since no live worker consumes the queue

    def pending(self) -> dict[int, asyncio.Future[ToolResult]]:
        return {i: f for i, f in self.futures.items() if not f.done()}


class CeleryRunner:
    """``BranchRunner`` over Celery + Redis; one instance per session (see the module docstring)."""

    def __init__(
        self,
        app: Any,
        snapshot: Callable[[], dict[str, Any]],
        settings: Settings,
        *,
        session_id: str = "",
        origin: Literal["host_direct", "agent"] = "host_direct",
        wait: WaitMode = "list",
        idempotent: bool = True,
        keys: FleetKeys | None = None,
    ) -> None:
        self.app = app
        self.settings = settings
        self.session_id = session_id
        self.origin = origin
        self.wait = wait
        self.idempotent = idempotent
        self.keys = keys or FleetKeys()
        self._snapshot = snapshot
        self._runs: dict[str, _Run] = {}
        self._redis: aioredis.Redis | None = None
        self._backend: aioredis.Redis | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._background: set[asyncio.Future[None]] = set()

    # ---- BranchRunner ---------------------------------------------------------------------------

    async def run_branch(self, run_id: str, index: int, branch: Branch) -> ToolResult:
        run = self._runs.get(run_id)
        if run is None:
            snapshot = self._snapshot()
            body = snapshot_json(snapshot)
            run = _Run(run_id, snapshot, body, snapshot_digest(body))
            self._runs[run_id] = run
            run.ready = asyncio.create_task(self._open(run))
        run.refs += 1
        try:
            await asyncio.shield(run.ready)  # type: ignore[arg-type]
            fut: asyncio.Future[ToolResult] = asyncio.get_running_loop().create_future()
            run.futures[index] = fut
            run.task_ids[index] = str(uuid.uuid4())
            run.outbox.append((index, branch))
            if not run.flushing:
                run.flushing = True
                asyncio.get_running_loop().call_soon(self._spawn_flush, run)
            try:
                return await asyncio.shield(fut)
            except asyncio.CancelledError:
                await self._cancel(run, [index])
                raise
        finally:
            run.refs -= 1
            if run.refs == 0:
                await self._close_run(run)

    async def aclose(self) -> None:
        for run in list(self._runs.values()):
            await self._close_run(run)
        # Nothing may reach for a client once they are closed: ``_client()`` would open a new one that
        # nobody closes (an unclosed connection at GC) and recreate the key it touched.
        await _settle(self._background, 0)
        for client in (self._redis, self._backend):
            if client is not None:
                await client.aclose()
        self._redis = self._backend = None

    # ---- run lifecycle --------------------------------------------------------------------------

    def _client(self) -> aioredis.Redis:
        loop = asyncio.get_running_loop()
        if self._redis is None or self._loop is not loop:
            from workers.runtime import state_url

            self._loop = loop
            self._redis = _async_client(state_url(self.settings))
            if self.wait == "poll":
                self._backend = _async_client(self.app.conf.result_backend)
        return self._redis

    async def _open(self, run: _Run) -> None:
        """Register the run — in the same transaction, count the queue's live workers: with none
        (after ``NO_WORKER_GRACE_S``, which covers a worker re-registering after a Redis restart),
        the run fails fast with one line naming the queue and the broker (issue 13 item 4)."""
        r = self._client()
        now = int(time.time() * 1000)
        meta = {
            "run_id": run.run_id,
            "session_id": self.session_id,
            "started_ms": now,
            "total": 0,
            "done": 0,
            "queue": self.settings.queue,
            "host": f"{socket.gethostname()}:{os.getpid()}",
        }
        try:
            async with r.pipeline(transaction=True) as pipe:
                pipe.zcount(self.keys.consumers(self.settings.queue), self._live_since(), "+inf")
                pipe.hset(self.keys.run(run.run_id), mapping=meta)
                pipe.pexpire(self.keys.run(run.run_id), RUN_KEY_TTL_MS)
                pipe.zadd(self.keys.runs(), {run.run_id: now})
                pipe.set(self.keys.snapshot(run.snapshot_digest), run.snapshot_json, px=RUN_KEY_TTL_MS)
                live, *_ = await pipe.execute()
            if not live and not await self._await_consumer(r):
                async with r.pipeline(transaction=False) as pipe:
                    pipe.delete(self.keys.run(run.run_id))
                    pipe.zrem(self.keys.runs(), run.run_id)
                    await pipe.execute()
                self._runs.pop(run.run_id, None)
                raise no_worker_error(self.settings)
        except CONNECTION_ERRORS as exc:
            self._runs.pop(run.run_id, None)
            raise Transport(f"fleet: cannot register run {run.run_id} in redis: {exc}", op="redis") from exc
        run.reader = asyncio.create_task(self._read(run), name=f"fleet-reader:{run.run_id}")

    def _live_since(self) -> int:
        return int(time.time() * 1000) - self.settings.worker_lost_after_s * 1000

    async def _await_consumer(self, r: aioredis.Redis) -> bool:
        deadline = time.monotonic() + NO_WORKER_GRACE_S
        while time.monotonic() < deadline:
            await asyncio.sleep(NO_WORKER_POLL_S)
            if await r.zcount(self.keys.consumers(self.settings.queue), self._live_since(), "+inf"):
                return True
        return False

    async def check_workers(self) -> None:
        """Raise ``transport{op: "dispatch"}`` (one line: queue and broker) when no live worker
        consumes this runner's queue — what a run would find out when it starts."""
        r = self._client()
        try:
            live = await r.zcount(self.keys.consumers(self.settings.queue), self._live_since(), "+inf")
            if not live and not await self._await_consumer(r):
                raise no_worker_error(self.settings)
        except CONNECTION_ERRORS as exc:
            raise Transport(
                f"fleet: redis unreachable at {broker_text(self.settings)}: {exc}", op="redis"
            ) from exc

    async def _close_run(self, run: _Run) -> None:
        if self._runs.get(run.run_id) is not run:
            return
        del self._runs[run.run_id]
        run.closing = True
        # The run's publishing bookkeeping (``total``) must land before its keys go, or an HINCRBY
        # after the DELETE recreates the run hash with no TTL; a publish still out after the grace
        # is cancelled (its thread finishes the publish; the count is skipped).
        await _settle(run.flushes, FLUSH_SETTLE_S)
        if self._redis is None:
            return
        if run.reader is not None and not run.reader.done():
            # Wake the reader's BLPOP with a stop item rather than cancelling it: cancelling a
            # blocking redis.asyncio command can leave the task stuck in the connection's teardown.
            try:
                await self._redis.rpush(self.keys.results(run.run_id), STOP_ITEM)
            except CONNECTION_ERRORS:
                pass
            done, _ = await asyncio.wait([run.reader], timeout=IDLE_CHECK_S + 1)
            if not done:
                run.reader.cancel()
                await asyncio.wait([run.reader], timeout=IDLE_CHECK_S)
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.delete(self.keys.run(run.run_id), self.keys.results(run.run_id))
                pipe.zrem(self.keys.runs(), run.run_id)
                await pipe.execute()
        except CONNECTION_ERRORS:
            pass  # the keys expire on their own

    # ---- publishing -----------------------------------------------------------------------------

    def _spawn_flush(self, run: _Run) -> None:
        # Scheduled with call_soon: every branch started in this loop turn is in the outbox by now.
        task = asyncio.ensure_future(self._flush(run))
        for owner in (self._background, run.flushes):
            owner.add(task)
            task.add_done_callback(owner.discard)

    async def _flush(self, run: _Run) -> None:
        outbox, run.outbox, run.flushing = run.outbox, [], False
        batch: list[tuple[int, Branch]] = []
        messages = []
        for index, branch in outbox:
            try:
                messages.append(self._message(run, index, branch))
            except ValidationError as exc:
                # An envelope the worker would refuse (a tool name over 128 characters, a branch
                # index past MAX_BRANCH_INDEX …): that branch fails typed and is never sent. Before,
                # the error ended this task, nothing was published and the fan-in waited forever.
                fut = run.futures.get(index)
                if fut is not None and not fut.done():
                    fut.set_exception(_refused_envelope(exc))
                continue
            batch.append((index, branch))
        if not batch:
            return
        try:
            await asyncio.to_thread(self._publish, messages)
            if not run.closing:  # a closed run's hash is gone: never recreate it
                await self._client().hincrby(self.keys.run(run.run_id), "total", len(batch))
        except Exception as exc:  # kombu raises its own OperationalError, redis its ConnectionError
            err = (
                exc
                if isinstance(exc, ToolError)
                else Transport(f"fleet: cannot publish jobs: {exc}", op="broker")
            )
            for index, _ in batch:
                fut = run.futures.get(index)
                if fut is not None and not fut.done():
                    fut.set_exception(err)

    def _message(self, run: _Run, index: int, branch: Branch) -> dict[str, Any]:
        envelope = JobEnvelope(
            snapshot_digest=run.snapshot_digest,
            tool=branch.tool,
            args=dict(branch.args),
            run_id=run.run_id,
            branch_index=index,
            description=branch.description,
            idempotency_key=(branch.key or f"{run.run_id}:{index}") if self.idempotent else None,
            origin=self.origin,
            allotment=branch.allotment,
        ).model_dump(mode="json", exclude_none=True)  # no "snapshot": null on the wire
        # A workflow step is named by its step id (and keeps its index); a branch by its index.
        slot: int | str = branch.label or index
        extra = {"branch_index": index} if branch.label else {}
        label = job_label(run.run_id, slot, branch.description, tool=branch.tool, **extra)
        return {
            "task_id": run.task_ids[index],
            "kwargs": {"envelope": envelope},
            **label.send_options(),
            "ignore_result": self.wait == "list",
        }

    def _publish(self, messages: list[dict[str, Any]]) -> None:
        """Publish a batch of jobs (and their ``task-sent`` events for Flower).

        Where the transport supports it (kombu's ``Producer.batch``: Redis without command replay),
        the whole batch goes out in one pipeline: one round trip and one Redis client instead of two
        of each per job — most of a no-op job's publishing cost. A failed pipeline has an uncertain
        outcome, so the batch is published again one message at a time under Celery's retry policy,
        as a publish retried after a lost reply already can: a job may be queued twice with the same
        task id, which the fleet tolerates (a second result is ignored, mutating calls are fenced by
        the step store, every delivery is counted by the poison guard).
        """
        with self.app.producer_or_acquire() as producer:
            if len(messages) > 1 and producer.supports_batch_publish:
                try:
                    with producer.batch(max_size=PUBLISH_BATCH_COMMANDS):
                        for m in messages:
                            self._send(producer, m)
                    return
                except Exception:  # BatchPublishError, a connection error: fall back, with retries
                    pass
            for m in messages:
                self._send(producer, m)

    def _send(self, producer: Any, m: dict[str, Any]) -> None:
        self.app.send_task(
            m.get("task", TOOL_TASK),  # a subclass may send another job kind (dispatch_agent: a3s.agent)
            kwargs=m["kwargs"],
            task_id=m["task_id"],
            queue=self.settings.queue,
            shadow=m["shadow"],
            kwargsrepr=m["kwargsrepr"],
            argsrepr=m["argsrepr"],
            ignore_result=m["ignore_result"],
            producer=producer,
        )

    # ---- fan-in ---------------------------------------------------------------------------------

    async def _read(self, run: _Run) -> None:
        r = self._client()
        key = self.keys.results(run.run_id)
        last_beat = time.monotonic()
        try:
            while True:
                try:
                    if self.wait == "list":
                        got = await self._pop(r, key)
                    else:
                        got = await self._poll(run)
                except CONNECTION_ERRORS as exc:
                    await self._ride_out_outage(run, exc)
                    continue
                if run.closing:
                    return
                if got:
                    for item in got:
                        self._deliver(run, item)
                if not got or time.monotonic() - last_beat >= HEARTBEAT_S:
                    last_beat = time.monotonic()
                    try:
                        await self._check_state(run)
                    except CONNECTION_ERRORS as exc:
                        await self._ride_out_outage(run, exc)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug here must not leave branches waiting forever
            self._fail_pending(
                run, Transport(f"fleet: result reader failed: {type(exc).__name__}: {exc}", op="redis")
            )
            raise

    async def _pop(self, r: aioredis.Redis, key: str) -> list[dict[str, Any]]:
        first = await r.blpop([key], timeout=IDLE_CHECK_S)
        if first is None:
            return []
        items = [first[1]]
        more = await r.lpop(key, DRAIN_BATCH)
        if more:
            items.extend(more)
        return [json.loads(raw) for raw in items]

    async def _poll(self, run: _Run) -> list[dict[str, Any]]:
        backend = self._backend or self._client()
        started = time.monotonic()
        while time.monotonic() - started < IDLE_CHECK_S and not run.closing:
            ids = [(i, run.task_ids[i]) for i in run.pending() if i in run.task_ids]
            if ids:
                raw = await backend.mget([f"celery-task-meta-{tid}" for _, tid in ids])
                got = []
                for (i, tid), value in zip(ids, raw, strict=True):
                    meta = json.loads(value) if value else None
                    if meta and meta.get("status") == "SUCCESS":
                        got.append({"index": i, "task_id": tid, "result": meta["result"]})
                    elif failed := _failed_result(meta):  # a tool that failed: the job ended FAILURE
                        got.append({"index": i, "task_id": tid, "result": failed})
                    elif meta and meta.get("status") in ("FAILURE", "REVOKED"):
                        err = Transport(
                            f"fleet: job {tid} ended {meta['status']}: {meta.get('result')}", op="worker"
                        )
                        got.append(
                            {
                                "index": i,
                                "task_id": tid,
                                "result": ToolResult.failure(TOOL_TASK, err).to_json(),
                            }
                        )
                if got:
                    return got
            await asyncio.sleep(POLL_INTERVAL_S)
        return []

    def _deliver(self, run: _Run, item: dict[str, Any]) -> None:
        index = item.get("index")
        fut = run.futures.get(index) if isinstance(index, int) else None
        if fut is None or fut.done() or item.get("task_id") != run.task_ids.get(index):
            return  # a duplicate delivery's second result, or a stale item
        try:
            fut.set_result(ToolResult.from_json(item["result"]))
        except (KeyError, TypeError, ValueError) as exc:
            fut.set_exception(Transport(f"fleet: malformed result for branch {index}: {exc}", op="redis"))

    async def _check_state(self, run: _Run) -> None:
        r = self._client()
        pending = [i for i in run.pending() if i in run.task_ids]
        async with r.pipeline(transaction=False) as pipe:
            pipe.pexpire(self.keys.run(run.run_id), RUN_KEY_TTL_MS)
            pipe.zadd(self.keys.runs(), {run.run_id: int(time.time() * 1000)})
            # Content-addressed and shared with other runs of the same snapshot: refreshed, never
            # deleted by one run's end; it expires RUN_KEY_TTL_MS after the last run's heartbeat.
            pipe.pexpire(self.keys.snapshot(run.snapshot_digest), RUN_KEY_TTL_MS)
            pipe.zcount(self.keys.consumers(self.settings.queue), self._live_since(), "+inf")
            if pending:
                pipe.hmget(self.keys.run(run.run_id), [f"r:{i}" for i in pending])
            alive, _, _, consumers, *copies = await pipe.execute()
        # Results the workers reported but whose list item never arrived: take the hash copy.
        for raw in copies[0] if copies else []:
            if raw:
                self._deliver(run, json.loads(raw))
        self._check_consumers(run, consumers)
        if not alive:
            self._fail_pending(
                run,
                Transport(
                    f"fleet: redis lost the state of run {run.run_id} (restarted without persistence, or flushed); "
                    "jobs not yet reported may be lost — retry the failed branches",
                    op="redis",
                ),
            )

    def _check_consumers(self, run: _Run, consumers: int) -> None:
        """The queue-wait deadline: branches wait at most ``settings.queue_wait_s`` while no live
        worker consumes the queue (every worker vanished after the run started)."""
        if consumers or not run.pending():
            run.unconsumed_since = None
            return
        now = time.monotonic()
        if run.unconsumed_since is None:
            run.unconsumed_since = now
        elif now - run.unconsumed_since >= self.settings.queue_wait_s:
            waited = int(now - run.unconsumed_since)
            self._fail_pending(
                run,
                Transport(
                    f"fleet: no worker has consumed queue '{self.settings.queue}' on broker "
                    f"{broker_text(self.settings)} for {waited}s (queue_wait_s={self.settings.queue_wait_s}); "
                    f"{len(run.pending())} branches of run {run.run_id} never reported — start a worker "
                    "and retry them",
                    op="dispatch",
                ),
            )

    async def _ride_out_outage(self, run: _Run, exc: BaseException) -> None:
        deadline = time.monotonic() + OUTAGE_TOLERANCE_S
        r = self._client()
        while time.monotonic() < deadline:
            await asyncio.sleep(OUTAGE_POLL_S)
            try:
                await r.ping()
            except CONNECTION_ERRORS:
                continue
            await self._check_state(run)
            return
        self._fail_pending(
            run,
            Transport(
                f"fleet: redis unreachable for {OUTAGE_TOLERANCE_S:.0f}s during run {run.run_id}: {exc}",
                op="redis",
            ),
        )

    def _fail_pending(self, run: _Run, err: ToolError) -> None:
        for fut in run.pending().values():
            fut.set_exception(err)

    # ---- cancellation ---------------------------------------------------------------------------

    async def _cancel(self, run: _Run, indexes: list[int]) -> None:
        """Flag, revoke, settle (see the module docstring). Never raises: we are already cancelling."""
        tids = [run.task_ids[i] for i in indexes if i in run.task_ids]
        if not tids:
            return
        started: list[int] = []
        try:
            r = self._client()
            async with r.pipeline(transaction=False) as pipe:
                for tid in tids:
                    pipe.set(self.keys.cancel(tid), 1, px=RUN_KEY_TTL_MS)
                for tid in tids:
                    pipe.exists(self.keys.deliveries(tid))
                replies = await pipe.execute()
            started = [i for i, seen in zip(indexes, replies[len(tids) :], strict=True) if seen]
        except CONNECTION_ERRORS:
            pass
        try:
            await asyncio.to_thread(self.app.control.revoke, tids, terminate=True)
        except Exception:  # the broker is gone: the cancel flag (if written) still stops the jobs
            pass
        waits = [asyncio.shield(run.futures[i]) for i in started if not run.futures[i].done()]
        if waits:
            await asyncio.wait(waits, timeout=CANCEL_SETTLE_S)
        for i in indexes:
            fut = run.futures.get(i)
            if fut is not None and not fut.done():
                fut.set_exception(Cancelled(f"branch {i} of {run.run_id} cancelled", op=TOOL_TASK))
            if fut is not None and fut.done() and not fut.cancelled():
                fut.exception()  # retrieved: the caller is gone, nobody else will look at it


async def _settle(tasks: set[asyncio.Future[None]], grace_s: float) -> None:
    """Wait up to ``grace_s`` for ``tasks``, then cancel the rest and wait until they have stopped."""
    pending = {t for t in tasks if not t.done()}
    if pending and grace_s > 0:
        _, pending = await asyncio.wait(pending, timeout=grace_s)
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.wait(pending)


CeleryDispatcher = CeleryRunner


def _refused_envelope(exc: ValidationError) -> InvalidArgument:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first.get("loc", ())) or "envelope"
    return InvalidArgument(f"fleet: job envelope refused at {where}: {first.get('msg')}", path=where)


def _failed_result(meta: dict[str, Any] | None) -> dict[str, Any] | None:
    """The ``ToolResult`` JSON a failed job carries in its FAILURE record (``workers.jobs.JobFailed``)."""
    if not meta or meta.get("status") != "FAILURE":
        return None
    exc = meta.get("result")
    if not isinstance(exc, dict) or exc.get("exc_type") != "JobFailed":
        return None
    args = exc.get("exc_message")
    value = args[0] if isinstance(args, list) and args else None
    return value if isinstance(value, dict) and "exit_code" in value else None


def _async_client(url: str) -> aioredis.Redis:
    return aioredis.Redis.from_url(
        url,
        decode_responses=True,
        socket_timeout=REDIS_SOCKET_TIMEOUT_S,
        socket_connect_timeout=REDIS_CONNECT_TIMEOUT_S,
    )
