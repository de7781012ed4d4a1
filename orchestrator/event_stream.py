"""Fleet sessions publish their events to the session's Redis Stream (SPEC S-5).

In fleet mode the orchestrator's own calls and every worker's calls for the same session land in
one stream (``workers.state.events``), numbered by one per-session counter, so a client in any
process follows the whole session live and resumes from the last id it saw:
``a3s-fleet events SESSION_ID --follow``.

Events are observability, not results: when Redis is unreachable the orchestrator keeps working and
counts the events it could not publish (``DroppingSink.dropped``) rather than failing tool calls.
"""

from __future__ import annotations

import logging
from typing import Any

from kernel.errors import ToolError
from kernel.events import Event, EventSink

log = logging.getLogger(__name__)


class DroppingSink:
    """Wraps a remote sink: a failed publish is counted and logged once, never raised into a call."""

    def __init__(self, inner: EventSink) -> None:
        self.inner = inner
        self.dropped = 0

    def emit(self, event: Event) -> None:
        try:
            self.inner.emit(event)
        except ToolError as exc:
            if self.dropped == 0:
                log.warning("session events are not reaching Redis (%s); counting drops", exc.message)
            self.dropped += 1


def fleet_event_sink(state_url: str, session_id: str) -> DroppingSink:
    from workers.state import make_client
    from workers.state.events import RedisStreamSink

    return DroppingSink(RedisStreamSink(make_client(state_url), session_id))


def follow(
    state_url: str, session_id: str, *, after_id: str, live: bool, idle_timeout_s: float | None
) -> Any:
    """Yield ``(stream_id, Event)`` of a session, from ``after_id``; ``live`` keeps waiting for more."""
    from workers.state import make_client
    from workers.state.events import RedisStreamReader

    reader = RedisStreamReader(make_client(state_url), session_id)
    if not live:
        cursor = after_id if after_id != "0-0" else "-"
        while True:
            batch = reader.range(cursor)
            if not batch:
                return
            for item in batch:
                yield item.id, item.event
            cursor = batch[-1].id
    yield from ((item.id, item.event) for item in reader.read(after_id, idle_timeout_s=idle_timeout_s))


def session_has_events(state_url: str, session_id: str) -> bool:
    """Whether the session's stream exists (an unknown session id, or expired events: no)."""
    from workers.state import make_client
    from workers.state.events import stream_key
    from workers.state.redis_client import redis_errors

    client = make_client(state_url)
    try:
        with redis_errors("events.exists"):
            return bool(client.exists(stream_key("a3s", session_id)))
    finally:
        client.close()
