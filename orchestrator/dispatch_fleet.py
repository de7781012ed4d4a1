"""The fleet parts an ``Agent`` hands its sessions: the Celery app jobs go through, the sink that
streams a session's events to Redis (S-5), and the shared breakers/bulkheads/coalescing store.
Each is built from the process's own ``Settings`` (endpoints and keys never travel in a job)."""

from __future__ import annotations

from typing import Any

from config.settings import Settings


def fleet_app(settings: Settings) -> Any:
    """The Celery app jobs are sent through (built from ``settings``; never the process default)."""
    from workers.app import make_app

    return make_app(settings)


def fleet_session_sink(settings: Settings, session_id: str) -> Any:
    """The sink that puts this process's events of ``session_id`` on the session's Redis Stream (S-5)."""
    from orchestrator.event_stream import fleet_event_sink
    from workers.runtime import state_url

    return fleet_event_sink(state_url(settings), session_id)


def fleet_state_store(settings: Settings) -> Any:
    """The fleet's shared breakers, bulkheads and coalescing (Redis; connects on first use)."""
    from workers.runtime import state_url
    from workers.state import RedisStateStore

    return RedisStateStore.from_url(state_url(settings))
