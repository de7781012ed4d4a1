"""Session events (SPEC S-5): tool activity as data, so a UI never parses terminal text.

Types: ``tool_start``, ``tool_output_delta``, ``tool_error``, ``tool_end``, ``permission_denied``,
``budget_threshold``, ``confirmation_request``, ``subagent_start`` / ``subagent_end``. Each carries the call id, parent call id, tool,
origin label and a timestamp; per call they are emitted in order. ``EventSink`` is the only way out:
in memory here, a Redis Stream in the fleet (``workers/``).

The agent loop (``flows/agent``) adds run-level events with ``call_id`` = the run id, ``tool`` = ""
and origin ``agent``: ``run_start``, ``model_request``, ``text_delta``, ``model_retry``,
``model_response``, ``run_end`` (``AGENT_EVENT_TYPES``). ``MemoryEventSink.subscribe`` lets a
caller watch events as they are logged (``session.stream``).

``MemoryEventSink`` holds at most ``MAX_MEMORY_EVENTS`` events and ``MAX_MEMORY_EVENT_BYTES`` of them
(each weighed by its JSON size): the oldest are dropped first, and counted (``dropped``). A count
alone did not bound it: 10 000 events of ~100 KiB (tool output deltas, results) held ~1 GB.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

EVENT_TYPES = (
    "tool_start",
    "tool_output_delta",
    "tool_error",
    "tool_end",
    "permission_denied",
    "budget_threshold",
    "confirmation_request",
    # ``task`` (issue 9): one ``subagent_end`` per ``subagent_start``, synthesised for an aborted child.
    "subagent_start",
    "subagent_end",
)
log = logging.getLogger(__name__)
AGENT_EVENT_TYPES = ("run_start", "model_request", "text_delta", "model_retry", "model_response", "run_end")
MAX_MEMORY_EVENTS = 10_000
MAX_MEMORY_EVENT_BYTES = 64 * 1024 * 1024
EVENT_OVERHEAD_BYTES = 256  # the envelope's fields and the objects holding them


@dataclass(slots=True)
class Event:
    """One session event (``tool_start``, ``tool_end``, ``budget_threshold``…) as sinks receive it."""

    type: str
    call_id: str
    tool: str
    origin: str
    ts_ms: int
    parent_call_id: str | None = None
    data: dict[str, Any] = field(default_factory=dict)
    seq: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "seq": self.seq,
            "call_id": self.call_id,
            "parent_call_id": self.parent_call_id,
            "tool": self.tool,
            "origin": self.origin,
            "ts_ms": self.ts_ms,
            "data": self.data,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Event:
        return cls(
            type=d["type"],
            call_id=d["call_id"],
            tool=d["tool"],
            origin=d["origin"],
            ts_ms=int(d["ts_ms"]),
            parent_call_id=d.get("parent_call_id"),
            data=dict(d.get("data") or {}),
            seq=int(d.get("seq", 0)),
        )


class EventSink(Protocol):
    def emit(self, event: Event) -> None: ...


class MemoryEventSink:
    """Keeps the last ``capacity`` events within ``max_bytes`` (the newest is always kept); thread-safe;
    ``seq`` numbers are session-ordered; ``dropped`` counts the events let go, oldest first."""

    def __init__(self, capacity: int = MAX_MEMORY_EVENTS, max_bytes: int = MAX_MEMORY_EVENT_BYTES) -> None:
        self.capacity = max(1, capacity)
        self.max_bytes = max_bytes
        self.dropped = 0
        self._events: deque[Event] = deque()
        self._sizes: deque[int] = deque()
        self._bytes = 0
        self._lock = threading.Lock()
        self._seq = 0
        self._listeners: tuple[Callable[[Event], None], ...] = ()

    def emit(self, event: Event) -> None:
        size = event_bytes(event)  # outside the lock: a large event is weighed without blocking others
        with self._lock:
            self._seq += 1
            event.seq = self._seq
            self._events.append(event)
            self._sizes.append(size)
            self._bytes += size
            while len(self._events) > 1 and (
                len(self._events) > self.capacity or self._bytes > self.max_bytes
            ):
                self._events.popleft()
                self._bytes -= self._sizes.popleft()
                self.dropped += 1
            listeners = self._listeners
        for listener in listeners:  # outside the lock: a listener may read the log
            try:
                listener(event)
            except Exception:  # a broken watcher must not break the call that emitted
                log.exception("event listener failed")

    def subscribe(self, listener: Callable[[Event], None]) -> Callable[[], None]:
        """Call ``listener(event)`` for every event logged from now on (in the emitting thread, after
        its ``seq`` is set); returns the function that unsubscribes it."""
        with self._lock:
            self._listeners = (*self._listeners, listener)

        def unsubscribe() -> None:
            with self._lock:
                self._listeners = tuple(fn for fn in self._listeners if fn is not listener)

        return unsubscribe

    def snapshot(self, after_seq: int = 0) -> list[Event]:
        with self._lock:
            return [e for e in self._events if e.seq > after_seq]

    def __iter__(self) -> Iterator[Event]:
        return iter(self.snapshot())


def event_bytes(event: Event) -> int:
    """What an event weighs in memory, roughly: its data (strings by length, scalars at 8, nested
    values by their JSON size) plus the envelope. Most events hold only strings and scalars, weighed
    without encoding anything: every tool call emits several, and a JSON pass of each cost ~2 µs."""
    size = EVENT_OVERHEAD_BYTES + len(event.type) + len(event.call_id) + len(event.tool) + len(event.origin)
    for key, value in event.data.items():
        size += len(key)
        if isinstance(value, str):
            size += len(value)
        elif value is None or isinstance(value, (bool, int, float)):
            size += 8
        else:
            size += _json_size(value)
    return size


def _json_size(value: Any) -> int:
    try:
        return len(json.dumps(value, ensure_ascii=False, default=str))
    except (TypeError, ValueError, RecursionError):  # not JSON (a cycle): weigh it as one overhead more
        return EVENT_OVERHEAD_BYTES


class FanoutSink:
    """Emit to several sinks (memory for ``session.events()`` + a stream for other processes)."""

    def __init__(self, *sinks: EventSink) -> None:
        self.sinks = list(sinks)

    def emit(self, event: Event) -> None:
        for sink in self.sinks:
            sink.emit(event)
