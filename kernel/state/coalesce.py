"""Single flight (W-4): request coalescing with leader/shared/bypass/abandoned roles; see the package docstring."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, Literal, Protocol, TypeVar

from kernel.clock import Clock, IdFactory, RandomIds, SystemClock
from kernel.errors import InvalidArgument, ToolError, Transport
from kernel.state.bulkhead import _next_delay
from kernel.state.limits import (
    FLIGHT_LEASE_MS,
    FLIGHT_MAX_IN_FLIGHT,
    FLIGHT_MAX_TAKEOVERS,
    FLIGHT_RESULT_TTL_MS,
    POLL_MIN_S,
)

T = TypeVar("T")
Role = Literal["leader", "shared", "bypass", "abandoned"]
ROLE_COUNTERS: dict[str, str] = {
    "leader": "leader_requests",
    "shared": "shared_requests",
    "bypass": "bypassed_requests",
    "abandoned": "abandoned_requests",
}


@dataclass(frozen=True, slots=True)
class FlightResult:
    """What a leader publishes: a value, a typed error, or that it gave up."""

    status: Literal["ok", "error", "abandoned"]
    value: Any = None
    error: ToolError | None = None


@dataclass(frozen=True, slots=True)
class CoalesceOutcome(Generic[T]):
    value: T
    role: Role
    abandoned_waits: int = 0


class FlightBackend(Protocol):
    """The primitives a ``Coalescer`` needs; each call is atomic."""

    def begin(self, key: str, token: str, lease_ms: int, max_in_flight: int) -> tuple[str, str]:
        """``("lead", token)``, ``("follow", leader_token)`` or ``("bypass", "")``."""
        ...

    def heartbeat(self, key: str, token: str, lease_ms: int) -> bool: ...

    def finish(self, key: str, token: str, result: FlightResult) -> None: ...

    def poll(self, key: str, token: str) -> FlightResult | None:
        """The flight's result; None while its leader holds a live lease; ``abandoned`` when lost."""
        ...

    def count(self, role: Role) -> None: ...

    def counters(self) -> dict[str, int]: ...

    def in_flight(self) -> int: ...


class Coalescer:
    """Single-flight over a ``FlightBackend`` (the algorithm is shared by memory and Redis)."""

    def __init__(
        self,
        backend: FlightBackend,
        *,
        new_id: IdFactory | None = None,
        max_in_flight: int = FLIGHT_MAX_IN_FLIGHT,
        lease_ms: int = FLIGHT_LEASE_MS,
    ) -> None:
        if max_in_flight < 1 or lease_ms < 3:
            raise InvalidArgument("coalescer max_in_flight must be >= 1 and lease_ms >= 3")
        self.backend = backend
        self.max_in_flight = max_in_flight
        self.lease_ms = lease_ms
        self._new_id = new_id or RandomIds()

    async def run(self, key: str, fn: Callable[[], Awaitable[T]]) -> CoalesceOutcome[T]:
        abandoned = 0
        while True:
            if abandoned > FLIGHT_MAX_TAKEOVERS:  # leaders keep vanishing: stop waiting on them
                return await self._alone(fn, "abandoned", abandoned)
            token = self._new_id("flight")
            try:
                decision, leader = self.backend.begin(key, token, self.lease_ms, self.max_in_flight)
            except Transport:
                decision, leader = "bypass", ""  # coalescing is an optimisation, never a dependency
            if decision == "bypass":
                return await self._alone(fn, "abandoned" if abandoned else "bypass", abandoned)
            if decision == "lead":
                role: Role = "abandoned" if abandoned else "leader"
                try:
                    value = await self._lead(key, token, fn)
                except ToolError:
                    self._count(role)
                    raise
                return self._done(value, role, abandoned)
            result = await self._follow(key, leader)
            if result.status == "ok":
                return self._done(result.value, "shared", abandoned)
            if result.status == "error" and result.error is not None:
                self._count("shared")
                raise result.error
            abandoned += 1

    async def _alone(self, fn: Callable[[], Awaitable[T]], role: Role, abandoned: int) -> CoalesceOutcome[T]:
        try:
            value = await fn()
        except ToolError:
            self._count(role)
            raise
        return self._done(value, role, abandoned)

    def stats(self) -> dict[str, int]:
        """``search_coalescing`` metadata: max_in_flight, in_flight and the four role counters."""
        try:
            counters, in_flight = self.backend.counters(), self.backend.in_flight()
        except Transport:
            counters, in_flight = {}, 0
        out = {"max_in_flight": self.max_in_flight, "in_flight": in_flight}
        out.update({name: int(counters.get(name, 0)) for name in ROLE_COUNTERS.values()})
        return out

    def _count(self, role: Role) -> None:
        with contextlib.suppress(Transport):
            self.backend.count(role)

    def _done(self, value: T, role: Role, abandoned: int) -> CoalesceOutcome[T]:
        self._count(role)
        return CoalesceOutcome(value, role, abandoned)

    def _publish(self, key: str, token: str, result: FlightResult) -> None:
        with contextlib.suppress(Transport):  # followers fall back on the lease expiring
            self.backend.finish(key, token, result)

    async def _lead(self, key: str, token: str, fn: Callable[[], Awaitable[T]]) -> T:
        async def keep_alive() -> None:
            while True:
                await asyncio.sleep(self.lease_ms / 3000)
                with contextlib.suppress(Transport):
                    self.backend.heartbeat(key, token, self.lease_ms)

        renewer = asyncio.create_task(keep_alive())
        try:
            value = await fn()
        except ToolError as exc:
            self._publish(key, token, FlightResult("error", error=exc))
            raise
        except BaseException:
            # Cancelled caller or an untyped bug: followers must not inherit it; they take over.
            self._publish(key, token, FlightResult("abandoned"))
            raise
        else:
            self._publish(key, token, FlightResult("ok", value=value))
            return value
        finally:
            renewer.cancel()
            await asyncio.gather(renewer, return_exceptions=True)

    async def _follow(self, key: str, leader: str) -> FlightResult:
        delay = POLL_MIN_S
        while True:
            try:
                result = self.backend.poll(key, leader)
            except Transport:
                return FlightResult("abandoned")
            if result is not None:
                return result
            await asyncio.sleep(delay)
            delay = _next_delay(delay)


@dataclass(slots=True)
class _Flight:
    token: str
    lease_until_ms: int


class MemoryFlightBackend:
    def __init__(self, *, clock: Clock | None = None) -> None:
        self._clock = clock or SystemClock()
        self._lock = threading.Lock()
        self._flights: dict[str, _Flight] = {}
        self._results: dict[str, tuple[int, FlightResult]] = {}  # token -> (expiry, result)
        self._counters: dict[str, int] = dict.fromkeys(ROLE_COUNTERS.values(), 0)

    def _purge(self, now: int) -> None:
        self._flights = {k: f for k, f in self._flights.items() if f.lease_until_ms > now}
        self._results = {t: r for t, r in self._results.items() if r[0] > now}

    def begin(self, key: str, token: str, lease_ms: int, max_in_flight: int) -> tuple[str, str]:
        now = self._clock.now_ms()
        with self._lock:
            self._purge(now)
            flight = self._flights.get(key)
            if flight is not None:
                return "follow", flight.token
            if len(self._flights) >= max_in_flight:
                return "bypass", ""
            self._flights[key] = _Flight(token, now + lease_ms)
            return "lead", token

    def heartbeat(self, key: str, token: str, lease_ms: int) -> bool:
        now = self._clock.now_ms()
        with self._lock:
            flight = self._flights.get(key)
            if flight is None or flight.token != token or flight.lease_until_ms <= now:
                return False
            flight.lease_until_ms = now + lease_ms
            return True

    def finish(self, key: str, token: str, result: FlightResult) -> None:
        now = self._clock.now_ms()
        with self._lock:
            self._results[token] = (now + FLIGHT_RESULT_TTL_MS, result)
            flight = self._flights.get(key)
            if flight is not None and flight.token == token:
                del self._flights[key]

    def poll(self, key: str, token: str) -> FlightResult | None:
        now = self._clock.now_ms()
        with self._lock:
            done = self._results.get(token)
            if done is not None:
                return done[1]
            flight = self._flights.get(key)
            if flight is not None and flight.token == token and flight.lease_until_ms > now:
                return None
            return FlightResult("abandoned")

    def count(self, role: Role) -> None:
        with self._lock:
            self._counters[ROLE_COUNTERS[role]] += 1

    def counters(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counters)

    def in_flight(self) -> int:
        now = self._clock.now_ms()
        with self._lock:
            return sum(1 for f in self._flights.values() if f.lease_until_ms > now)
