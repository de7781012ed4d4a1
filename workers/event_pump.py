"""Session events from a worker to the sessions' Redis Streams, without a round trip per event (SPEC S-5).

``workers.state.events.RedisStreamSink`` writes each event with one script call: several round trips
per tool call, which dominated a no-op job's time on a worker. ``EventPump`` keeps the same stream
format (``EMIT_MANY_LUA``: ``XADD`` per event numbered from one per-session counter, so one
session's events get increasing ``seq`` across every worker that writes them; one script call per
batch — the pump always lets Redis number them)
but buffers events in the process and sends them in batches, *inside the pipeline the job already
sends*: with the job's result push at its end (so a stream reader sees a call's events before its
result is published), and at each of a long job's cancel-flag polls (``jobs.CANCEL_POLL_S``), so a
running job's events still arrive live. Scripts go into the pipeline as plain ``EVAL`` (Redis caches
the compiled script by its digest): a ``register_script`` object in a pipeline makes redis-py send a
``SCRIPT EXISTS`` round trip before every pipeline — a second round trip per job — and ``EVAL``
never meets ``NOSCRIPT`` after a Redis restart either. One lock serialises the flushes: per process, events reach
the stream in the order they were emitted. Events are observability: when Redis is unreachable the
batch is dropped and counted (``dropped``) and the job goes on.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import redis

from kernel.events import Event
from workers.state.events import EMIT_MANY_LUA, EVENT_STREAM_MAX_LEN, EVENT_STREAM_TTL_MS, stream_key

T = TypeVar("T")
MAX_BUFFERED_EVENTS = 10_000  # beyond this (Redis away for long) the oldest are dropped


class EventPump:
    def __init__(self, client: redis.Redis, *, prefix: str = "a3s") -> None:
        self._client = client
        self._prefix = prefix
        self._buffer: list[tuple[str, str]] = []
        self._buffer_lock = threading.Lock()
        self._send_lock = threading.Lock()
        self.dropped = 0

    def sink(self, session_id: str) -> _PumpSink:
        return _PumpSink(self, stream_key(self._prefix, session_id))

    def put(self, key: str, event: Event) -> None:
        payload = json.dumps({**event.to_json(), "seq": 0}, separators=(",", ":"), default=str)
        with self._buffer_lock:
            self._buffer.append((key, payload))
            if len(self._buffer) > MAX_BUFFERED_EVENTS:
                del self._buffer[0]
                self.dropped += 1

    def flush(self) -> None:
        """Send what is buffered (nothing else in the pipeline)."""
        self.send_with(None)

    def send_with(self, extra: Callable[[Any], T] | None) -> list[Any]:
        """One pipeline: the buffered events, then ``extra(pipe)`` (e.g. the job's result push).

        Returns the replies of ``extra``'s commands. Errors from ``extra`` propagate (its caller
        retries); the events of a failed pipeline are counted as dropped, not resent.
        """
        with self._send_lock:
            with self._buffer_lock:
                batch, self._buffer = self._buffer, []
            if not batch and extra is None:
                return []
            pipe = self._client.pipeline(transaction=False)
            # One script call per run of same-session events (usually the whole batch), in order.
            groups: list[tuple[str, list[str]]] = []
            for key, payload in batch:
                if groups and groups[-1][0] == key:
                    groups[-1][1].append(payload)
                else:
                    groups.append((key, [payload]))
            for key, payloads in groups:
                pipe.eval(
                    EMIT_MANY_LUA, 2, key, f"{key}:seq", EVENT_STREAM_MAX_LEN, EVENT_STREAM_TTL_MS, *payloads
                )
            if extra is not None:
                extra(pipe)
            try:
                replies = pipe.execute(raise_on_error=False)
            except redis.RedisError:
                self.dropped += len(batch)
                if extra is not None:
                    raise
                return []
        self.dropped += sum(
            len(payloads)
            for (_, payloads), r in zip(groups, replies, strict=False)
            if isinstance(r, Exception)
        )
        rest = replies[len(groups) :]
        for reply in rest:
            if isinstance(reply, Exception):
                raise reply
        return rest


class _PumpSink:
    """``kernel.events.EventSink`` for one session's stream."""

    def __init__(self, pump: EventPump, key: str) -> None:
        self._pump = pump
        self._key = key

    def emit(self, event: Event) -> None:
        self._pump.put(self._key, event)
