"""``StateStore``: the bundle of breakers, bulkheads, coalescer and steps a session or worker is handed."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Protocol

from kernel.clock import Clock, IdFactory, RandomIds, SystemClock
from kernel.state.breaker import (
    BreakerConfig,
    BreakerScope,
    CircuitBreakers,
    MemoryCircuitBreakers,
    _BreakerRecord,
)
from kernel.state.bulkhead import BulkheadBase, MemoryBulkheads
from kernel.state.coalesce import Coalescer, MemoryFlightBackend
from kernel.state.limits import FLIGHT_MAX_IN_FLIGHT
from kernel.state.steps import MemoryStepStore, StepStore


class StateStore(Protocol):
    def breakers(
        self, scope: BreakerScope, config: BreakerConfig | None = None, *, fail_closed: Iterable[str] = ()
    ) -> CircuitBreakers: ...

    def bulkheads(self) -> BulkheadBase: ...

    def coalescer(
        self, namespace: str = "search", *, max_in_flight: int = FLIGHT_MAX_IN_FLIGHT
    ) -> Coalescer: ...

    def steps(self) -> StepStore: ...


class MemoryStateStore:
    """Embedded mode: every view handed out by one store shares the same in-process tables."""

    def __init__(self, *, clock: Clock | None = None, new_id: IdFactory | None = None) -> None:
        self._clock = clock or SystemClock()
        self._new_id = new_id or RandomIds()
        self._breaker_table: dict[tuple[str, str, str], _BreakerRecord] = {}
        self._breaker_lock = threading.Lock()
        self._bulkheads = MemoryBulkheads(clock=self._clock, new_id=self._new_id)
        self._flights: dict[str, MemoryFlightBackend] = {}
        self._steps = MemoryStepStore(clock=self._clock)
        self._lock = threading.Lock()

    def breakers(
        self, scope: BreakerScope, config: BreakerConfig | None = None, *, fail_closed: Iterable[str] = ()
    ) -> MemoryCircuitBreakers:
        # fail_closed only matters when a shared store is unreachable, which memory never is.
        return MemoryCircuitBreakers(
            scope,
            config,
            clock=self._clock,
            new_id=self._new_id,
            table=self._breaker_table,
            lock=self._breaker_lock,
        )

    def bulkheads(self) -> MemoryBulkheads:
        return self._bulkheads

    def coalescer(self, namespace: str = "search", *, max_in_flight: int = FLIGHT_MAX_IN_FLIGHT) -> Coalescer:
        with self._lock:
            backend = self._flights.setdefault(namespace, MemoryFlightBackend(clock=self._clock))
        return Coalescer(backend, new_id=self._new_id, max_in_flight=max_in_flight)

    def steps(self) -> MemoryStepStore:
        return self._steps
