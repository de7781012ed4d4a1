"""What one worker *process* holds between jobs: Redis clients, a session factory, restored sessions.

Built lazily on the first job of a process (``runtime_for``) — after a prefork child was forked,
so no event-loop thread or socket is ever shared across a fork. Sessions are built by
``flows.sessions`` (the worker runs its calls in this process; it never re-dispatches them to the
fleet, and never imports the orchestrator). Sessions restored from
snapshots are cached by the snapshot's digest (``workers.protocol.snapshot_digest``; a fan-out's 32
branches name the same digest: one restore per process, and no per-job hashing when the envelope
names the digest), at most ``MAX_CACHED_SESSIONS``, least recently used evicted. On a miss the
snapshot comes inline from the envelope or from the run's ``snapshot:{digest}`` key, and must hash
to the digest the envelope names. Every restored session sends its events to the session's Redis
Stream as well, through the process's ``EventPump`` (buffered, sent with the job's own Redis traffic).

``publish`` pushes a finished job's ``ToolResult`` onto its run's result list (``PUBLISH_LUA``), in one
pipeline with the events still buffered, retrying for ``PUBLISH_RETRY_S`` across a Redis blip; the
job returns — and is acknowledged — only after it.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Coroutine
from typing import Any, TypeVar

from config.settings import Settings
from flows.integrations import close_source, worker_source
from flows.loop import LoopThread
from flows.sessions import (
    SessionCore,
    SessionFactory,
    extra_tools,
    options_from_snapshot,
    process_services,
)
from kernel.clock import RandomIds
from kernel.errors import InvalidArgument, Transport
from workers.event_pump import EventPump
from workers.protocol import (
    PUBLISH_LUA,
    RESULTS_TTL_MS,
    FleetKeys,
    JobEnvelope,
    result_item,
    snapshot_digest,
    snapshot_json,
)
from workers.state import RedisStateStore, make_client
from workers.state.redis_client import redis_errors

T = TypeVar("T")

MAX_CACHED_SESSIONS = 64
PUBLISH_RETRY_S = 15.0
PUBLISH_RETRY_SLEEP_S = 0.2


def state_url(settings: Settings) -> str:
    from workers.app import broker_url

    return settings.state_url or broker_url(settings)


class WorkerRuntime:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.keys = FleetKeys()
        self.client = make_client(state_url(settings))
        self.state = RedisStateStore(self.client)
        self.steps = self.state.steps()
        self.events = EventPump(self.client)
        self.loop = LoopThread("a3s-worker-loop")
        # Breakers, the search bulkhead and coalescing live in Redis: shared by the whole fleet.
        # MCP servers come from this process's own config (A3S_MCP_CONFIG), never from a job.
        self.mcp = worker_source(settings.mcp_config)
        self.factory = SessionFactory(
            self.loop,
            RandomIds(),
            extra_tools(settings.extra_tools),
            process_services(settings, self.state),
            self.mcp,
        )
        self._sessions: OrderedDict[str, SessionCore] = OrderedDict()
        self._snapshots: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._inline: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()

    def session_for(self, env: JobEnvelope) -> SessionCore:
        """The envelope's session: from the cache by digest, else restored (see the module docstring)."""
        digest = env.snapshot_digest
        if digest is not None:
            with self._lock:
                session = self._sessions.get(digest)
                if session is not None:
                    self._sessions.move_to_end(digest)
                    return session
        if env.snapshot is not None:
            snapshot = env.snapshot
            actual = snapshot_digest(snapshot_json(snapshot))
        else:
            assert digest is not None  # JobEnvelope requires one of the two
            snapshot, actual = self._stored_snapshot(digest), digest
        if digest is not None and actual != digest:
            raise InvalidArgument(
                f"job envelope: the inline snapshot does not match snapshot_digest {digest[:12]}…",
                path="snapshot_digest",
            )
        return self.session(snapshot, actual)

    def stored_snapshot(self, digest: str) -> dict[str, Any]:
        """The snapshot stored under ``snapshot:{digest}`` (``transport`` when gone). Content-addressed,
        so immutable: kept per process (the 32 children of a fan-out name one parent snapshot)."""
        with self._lock:
            found = self._snapshots.get(digest)
            if found is not None:
                self._snapshots.move_to_end(digest)
                return found
        snapshot = self._stored_snapshot(digest)
        with self._lock:
            self._snapshots[digest] = snapshot
            while len(self._snapshots) > MAX_CACHED_SESSIONS:
                self._snapshots.popitem(last=False)
        return snapshot

    def _stored_snapshot(self, digest: str) -> dict[str, Any]:
        with redis_errors("fleet.snapshot"):
            body = self.client.get(self.keys.snapshot(digest))
        if body is None:
            # Lost with the run's other state (ended, expired, Redis restarted empty): the same
            # typed failure the orchestrator reports for a run whose state Redis lost.
            raise Transport(
                f"fleet: session snapshot {digest[:12]}… is no longer in redis (its run ended, expired or "
                "was lost)",
                op="redis",
            )
        if isinstance(body, bytes):
            body = body.decode()
        if snapshot_digest(body) != digest:
            raise InvalidArgument(f"stored session snapshot {digest[:12]}… does not match its digest")
        snapshot = json.loads(body)
        if not isinstance(snapshot, dict):
            raise InvalidArgument(f"stored session snapshot {digest[:12]}… is not a JSON object")
        return snapshot

    def session(self, snapshot: dict[str, Any], digest: str | None = None) -> SessionCore:
        """A session for ``snapshot`` (``digest``: its ``snapshot_digest``, computed when omitted)."""
        key = digest or snapshot_digest(snapshot_json(snapshot))
        with self._lock:
            session = self._sessions.get(key)
            if session is not None:
                self._sessions.move_to_end(key)
                return session
            sink = self.events.sink(str(snapshot.get("session_id")))
            session = self.factory.resume(snapshot, options_from_snapshot(snapshot, {"event_sink": sink}))
            self._sessions[key] = session
            while len(self._sessions) > MAX_CACHED_SESSIONS:
                _, old = self._sessions.popitem(last=False)
                old.close()
            return session

    def drive(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a kernel coroutine for the calling job thread.

        A prefork child (or the solo pool) runs one job at a time in its main thread: the coroutine
        runs right there, on this process's own loop — no hand-off to another thread, which under
        load costs more than the no-op job itself. Jobs on the threads pool share the agent's loop
        thread. A process uses one of the two for all its sessions (asyncio state binds to a loop).
        """
        if threading.current_thread() is not threading.main_thread():
            return self.loop.submit(coro).result()
        if self._inline is None:
            self._inline = asyncio.new_event_loop()
        try:
            return self._inline.run_until_complete(coro)
        except BaseException:
            # e.g. Celery's soft time limit raised by a signal handler mid-loop: leave no task behind.
            pending = asyncio.all_tasks(self._inline)
            for task in pending:
                task.cancel()
            if pending:
                self._inline.run_until_complete(asyncio.wait(pending, timeout=1))
            raise

    def close(self) -> None:
        """For tests and embedding hosts: a worker process simply exits."""
        self.events.flush()
        for session in self._sessions.values():
            session.close()
        self._sessions.clear()
        self.loop.run(close_source(self.mcp), timeout=30)
        self.loop.stop()
        if self._inline is not None:
            self._inline.close()
        self.client.close()

    def cancelled(self, task_id: str) -> bool:
        with redis_errors("fleet.cancel"):
            return bool(self.client.exists(self.keys.cancel(task_id)))

    def publish(self, run_id: str, index: int, task_id: str, delivery: int, result: dict[str, Any]) -> bool:
        """Push the result for the orchestrator's fan-in; False when the run no longer listens."""
        item = result_item(index, task_id, delivery, result)
        deadline = time.monotonic() + PUBLISH_RETRY_S
        while True:
            try:
                with redis_errors("fleet.publish"):
                    # The job's buffered events ride in the same pipeline, just before its result.
                    [pushed] = self.events.send_with(
                        # EVAL, not a registered script: see ``workers.event_pump`` (no extra round trip).
                        lambda pipe: pipe.eval(
                            PUBLISH_LUA,
                            2,
                            self.keys.run(run_id),
                            self.keys.results(run_id),
                            item,
                            RESULTS_TTL_MS,
                            index,
                        )
                    )
                return bool(pushed)
            except Transport:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(PUBLISH_RETRY_SLEEP_S)


_RUNTIME: tuple[int, WorkerRuntime] | None = None
_RUNTIME_LOCK = threading.Lock()


def runtime_for(settings: Settings) -> WorkerRuntime:
    """This process's runtime (rebuilt in a forked child: the pid is part of the key)."""
    global _RUNTIME
    pid = os.getpid()
    with _RUNTIME_LOCK:
        if _RUNTIME is None or _RUNTIME[0] != pid:
            _RUNTIME = (pid, WorkerRuntime(settings))
        return _RUNTIME[1]
