"""Redis-backed fleet state (SPEC W-3, W-4, F-3, F-4, S-5): the ``kernel.state`` protocols on Redis.

``RedisStateStore(client)`` is the fleet's ``kernel.state.StateStore``: breakers
(``breaker.py``), bulkheads (``bulkhead.py``), single flight (``coalesce.py``) and the step store
(``steps.py``); ``events.py`` is the session event stream. Every state transition is one Lua script
(atomic on the server), registered with ``register_script`` (EVALSHA, falling back to EVAL).
All keys start with ``prefix`` (default ``a3s``), so tests and tenants can share a server.
``redis_client.py`` is the only place redis exceptions are translated into kernel errors.
"""

from __future__ import annotations

from collections.abc import Iterable

import redis

from kernel.clock import Clock, IdFactory, RandomIds
from kernel.state import FLIGHT_MAX_IN_FLIGHT, BreakerConfig, BreakerScope, Coalescer
from workers.state.breaker import RedisCircuitBreakers
from workers.state.bulkhead import RedisBulkheads
from workers.state.coalesce import RedisFlightBackend
from workers.state.events import RedisStreamReader, RedisStreamSink, StreamEvent
from workers.state.redis_client import make_client, map_redis_error, redis_errors
from workers.state.steps import RedisStepStore

__all__ = [
    "RedisBulkheads",
    "RedisCircuitBreakers",
    "RedisFlightBackend",
    "RedisStateStore",
    "RedisStepStore",
    "RedisStreamReader",
    "RedisStreamSink",
    "StreamEvent",
    "make_client",
    "map_redis_error",
    "redis_errors",
]


class RedisStateStore:
    """One Redis, one key prefix; ``clock`` only for tests (default: the server's TIME)."""

    def __init__(
        self,
        client: redis.Redis,
        *,
        prefix: str = "a3s",
        clock: Clock | None = None,
        new_id: IdFactory | None = None,
    ) -> None:
        self.client = client
        self.prefix = prefix
        self._clock = clock
        self._new_id = new_id or RandomIds()
        self._bulkheads = RedisBulkheads(client, prefix=prefix, clock=clock, new_id=self._new_id)
        self._steps = RedisStepStore(client, prefix=prefix, clock=clock)

    @classmethod
    def from_url(cls, url: str, *, prefix: str = "a3s") -> RedisStateStore:
        return cls(make_client(url), prefix=prefix)

    def breakers(
        self, scope: BreakerScope, config: BreakerConfig | None = None, *, fail_closed: Iterable[str] = ()
    ) -> RedisCircuitBreakers:
        return RedisCircuitBreakers(
            self.client,
            scope,
            config,
            prefix=self.prefix,
            fail_closed=fail_closed,
            clock=self._clock,
            new_id=self._new_id,
        )

    def bulkheads(self) -> RedisBulkheads:
        return self._bulkheads

    def coalescer(self, namespace: str = "search", *, max_in_flight: int = FLIGHT_MAX_IN_FLIGHT) -> Coalescer:
        backend = RedisFlightBackend(self.client, namespace=namespace, prefix=self.prefix, clock=self._clock)
        return Coalescer(backend, new_id=self._new_id, max_in_flight=max_in_flight)

    def steps(self) -> RedisStepStore:
        return self._steps

    def event_sink(self, session_id: str) -> RedisStreamSink:
        return RedisStreamSink(self.client, session_id, prefix=self.prefix)

    def event_reader(self, session_id: str) -> RedisStreamReader:
        return RedisStreamReader(self.client, session_id, prefix=self.prefix)
