"""Session events across processes (SPEC S-5): a Redis Stream per session.

``RedisStreamSink.emit(event)`` appends ``Event.to_json()`` to ``{prefix}:events:{session_id}``
with ``XADD MAXLEN ~ max_len`` (Redis trims whole nodes, so the stream keeps *at least* the last
``max_len`` events) and numbers it from a per-session counter in the same script: one session's
events get increasing ``seq`` across every worker that writes them. An event that already carries
a ``seq`` (a ``FanoutSink`` whose memory sink numbered it first) keeps it. Both keys expire
``EVENT_STREAM_TTL_MS`` after the last event. ``emit`` raises ``Transport(op="redis")`` when Redis is
unreachable: the caller decides whether a lost event fails the call.

``RedisStreamReader.read(after_id)`` yields ``StreamEvent(id, event)`` in stream order, blocking
with ``XREAD BLOCK`` for new ones, so a client in another process follows a session live and
resumes after a disconnect from the last id it saw. It stops when ``until(event)`` is true (after
yielding that event), after ``idle_timeout_s`` without events, or when ``stop`` is set.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import redis

from kernel.events import Event
from workers.state.redis_client import redis_errors

EVENT_STREAM_MAX_LEN = 10_000
EVENT_STREAM_TTL_MS = 24 * 3600_000
MAX_BLOCK_MS = 2_000  # below redis_client.SOCKET_TIMEOUT_S, so a quiet stream is not a timeout
READ_BATCH = 256

# KEYS: stream, seq counter. ARGV: event JSON, seq (0 = assign), max_len, ttl_ms. Returns {id, seq}.
EMIT_LUA = """
local seq = tonumber(ARGV[2])
local counter = redis.call('INCR', KEYS[2])
if seq == 0 then seq = counter end
local id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[3], '*', 'seq', seq, 'event', ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('PEXPIRE', KEYS[2], ARGV[4])
return {id, seq}
"""


# KEYS: stream, seq counter. ARGV: max_len, ttl_ms, then one event JSON per event. Appends them in
# order, numbered from the session counter (one script call for a whole batch). Returns the count.
EMIT_MANY_LUA = """
local n = #ARGV - 2
local last = redis.call('INCRBY', KEYS[2], n)
for i = 1, n do
  redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', 'seq', last - n + i, 'event', ARGV[i + 2])
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return n
"""


def stream_key(prefix: str, session_id: str) -> str:
    return f"{prefix}:events:{session_id}"


@dataclass(frozen=True, slots=True)
class StreamEvent:
    id: str
    event: Event


class RedisStreamSink:
    """``kernel.events.EventSink`` writing one session's events to its Redis Stream."""

    def __init__(
        self,
        client: redis.Redis,
        session_id: str,
        *,
        prefix: str = "a3s",
        max_len: int = EVENT_STREAM_MAX_LEN,
    ) -> None:
        self._key = stream_key(prefix, session_id)
        self._max_len = max_len
        self._emit = client.register_script(EMIT_LUA)

    def emit(self, event: Event) -> None:
        payload = json.dumps(event.to_json(), separators=(",", ":"), default=str)
        with redis_errors("events.emit"):
            _id, seq = self._emit(
                keys=[self._key, f"{self._key}:seq"],
                args=[payload, event.seq, self._max_len, EVENT_STREAM_TTL_MS],
            )
        event.seq = int(seq)


class RedisStreamReader:
    def __init__(self, client: redis.Redis, session_id: str, *, prefix: str = "a3s") -> None:
        self._client = client
        self._key = stream_key(prefix, session_id)

    def read(
        self,
        after_id: str = "0-0",
        *,
        block_ms: int = 1_000,
        until: Callable[[Event], bool] | None = None,
        idle_timeout_s: float | None = None,
        stop: threading.Event | None = None,
    ) -> Iterator[StreamEvent]:
        """Events after ``after_id`` (``"0-0"`` = from the start, ``"$"`` = only events emitted after
        this call; ``"$"`` is pinned here, not at the first ``next()``)."""
        return self._follow(self._resolve(after_id), block_ms, until, idle_timeout_s, stop)

    def _follow(
        self,
        last: str,
        block_ms: int,
        until: Callable[[Event], bool] | None,
        idle_timeout_s: float | None,
        stop: threading.Event | None,
    ) -> Iterator[StreamEvent]:
        block = max(1, min(block_ms, MAX_BLOCK_MS))
        idle_since = time.monotonic()
        while stop is None or not stop.is_set():
            with redis_errors("events.read"):
                reply = self._client.xread({self._key: last}, count=READ_BATCH, block=block)
            entries = reply[0][1] if reply else []
            if not entries:
                if idle_timeout_s is not None and time.monotonic() - idle_since >= idle_timeout_s:
                    return
                continue
            idle_since = time.monotonic()
            for entry_id, fields in entries:
                last = entry_id
                event = Event.from_json(json.loads(fields["event"]))
                event.seq = event.seq or int(fields.get("seq", 0))
                yield StreamEvent(entry_id, event)
                if until is not None and until(event):
                    return

    def _resolve(self, after_id: str) -> str:
        # "$" re-read on every XREAD would skip events added between two calls: pin it once.
        if after_id != "$":
            return after_id
        with redis_errors("events.read"):
            newest = self._client.xrevrange(self._key, count=1)
        return newest[0][0] if newest else "0-0"

    def range(self, after_id: str = "-", count: int = READ_BATCH) -> list[StreamEvent]:
        """What is stored now, without waiting (``"-"`` = from the start)."""
        start = after_id if after_id == "-" else f"({after_id}"
        with redis_errors("events.range"):
            entries = self._client.xrange(self._key, min=start, count=count)
        out = []
        for entry_id, fields in entries:
            event = Event.from_json(json.loads(fields["event"]))
            event.seq = event.seq or int(fields.get("seq", 0))
            out.append(StreamEvent(entry_id, event))
        return out
