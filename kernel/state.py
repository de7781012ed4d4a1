"""Shared run state (SPEC W-3, W-4, F-3, F-4): circuit breakers, bulkheads, single-flight, step store.

This module owns the *protocols* and their in-memory implementations (embedded mode, unit tests);
``workers/state/`` implements the same protocols on Redis with atomic Lua scripts. It is pure: no
Redis import. Every rule below holds for both back ends (one behavioural test suite runs on both).

Circuit breakers (REFERENCE 4.10). One breaker per (scope, engine); the scope is a session, a run or
the fleet, and its id is part of the key. Closed admits everyone; Open rejects with the time left;
when the open time has passed the breaker goes half-open and admits at most ``probe_limit`` probe
leases (default 1; a probe lease held by a dead worker expires after ``probe_lease_ms``). Tripping:
terminal kinds open at once for 15 min; rate-limited kinds open at once (transient, 60 s); other
failures open after 3 in a row; 3 empty results in a row open (transient); request-scoped failures
never count, except against a probe; any failed, empty or abandoned probe re-opens; a successful
call closes the breaker and resets its counters. A server ``Retry-After`` is a floor on the open
time, capped at 24 h. Every state change bumps a generation number; a permit remembers its
generation, so an outcome recorded after the breaker moved on is a no-op (``record`` returns False).

Bulkheads (W-4). A counting semaphore whose permits are leases with an expiry: a worker that dies
frees its permits after the lease TTL; ``renew`` extends a live lease; ``release`` frees it. No
over-admission: the count and the admission happen in one atomic step. Waiting is polling with
backoff (not FIFO-fair); the caller reports ``Lease.wait_ms`` in metadata.

Single flight (W-4). ``Coalescer.run(key, fn)`` runs ``fn`` once for concurrent identical requests.
Roles: ``leader`` ran it; ``shared`` received the leader's value (or its typed ``ToolError``);
``bypass`` ran it alone (the in-flight cap was reached, or the shared store is unreachable);
``abandoned`` was a follower whose leader was dropped and which then produced the value itself by
taking the flight over. A leader whose caller is cancelled (or whose ``fn`` raises something that is
not a ``ToolError``) publishes "abandoned": followers are not failed, they race to take the flight
over (one leads, the rest follow it). A leader that dies without publishing stops renewing its
lease; followers see the lease gone with no result and do the same. It is not a cache: a flight is
forgotten when it completes (its result stays readable for ``FLIGHT_RESULT_TTL_MS`` only for the
followers already waiting). Counters count one final role per finished call.

Step store (F-3). ``(run_id, query_digest, step_id)`` → status, attempt, result. ``claim`` is atomic:
it returns the completed result, or "busy" while another worker's lease is live, or a new attempt
number (a dead worker's claim is re-claimed after its lease expires, bumping the attempt).
``complete``/``fail``/``renew`` are fenced by the attempt: a stale attempt is rejected with
``VersionConflict``. ``recover`` returns a result only for a completed step whose three keys all
match; nothing is shared across runs and an unfinished step is never promoted. Callers write the
result (``complete`` returns once it is stored) before they acknowledge the job.

Time: implementations take an injected ``Clock`` and use ``now_ms()`` for expiries (tests move a
``FakeClock``); waiting uses the real event-loop / monotonic time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Generic, Literal, Protocol, TypeVar

from kernel.clock import Clock, IdFactory, RandomIds, SystemClock
from kernel.errors import InvalidArgument, Timeout, ToolError, Transport, VersionConflict

T = TypeVar("T")

# ---------------------------------------------------------------------------------------------
# Limits (units in the names)

BREAKER_FAILURE_THRESHOLD = 3
BREAKER_EMPTY_THRESHOLD = 3
BREAKER_TRANSIENT_OPEN_MS = 60_000
BREAKER_TERMINAL_OPEN_MS = 15 * 60_000
BREAKER_MAX_OPEN_MS = 24 * 3600_000
BREAKER_PROBE_LIMIT = 1
BREAKER_PROBE_LEASE_MS = 60_000  # a probe holder that dies frees the probe slot after this
BREAKER_KEY_TTL_MS = 48 * 3600_000  # idle breaker state is forgotten (back end housekeeping)

BULKHEAD_LEASE_MS = 60_000
POLL_MIN_S = 0.002  # first wait between polls (bulkhead admission, flight results)
POLL_MAX_S = 0.025  # backoff cap: bounds the extra latency a poll adds

FLIGHT_MAX_IN_FLIGHT = 1024  # distinct flights; beyond it callers bypass (REFERENCE 4.10)
FLIGHT_LEASE_MS = 10_000  # leader lease, renewed every third of it while the leader runs
FLIGHT_RESULT_TTL_MS = 30_000
FLIGHT_MAX_TAKEOVERS = 3  # abandoned flights a caller follows before running alone

STEP_LEASE_MS = 300_000
STEP_TTL_MS = 7 * 24 * 3600_000
MAX_STEP_RESULT_BYTES = 512 * 1024  # bigger results are stored elsewhere and referenced

# ---------------------------------------------------------------------------------------------
# Circuit breakers

TERMINAL_FAILURE_KINDS = frozenset(
    {"provider_quota", "provider_authentication", "provider_permission", "permission_denied"}
)
RATE_LIMITED_FAILURE_KINDS = frozenset({"provider_rate_limited", "rate_limited"})
REQUEST_SCOPED_FAILURE_KINDS = frozenset({"provider_invalid_request", "invalid_query"})

FailureClass = Literal["terminal", "rate_limited", "request", "other"]
BreakerStateName = Literal["closed", "open", "half_open"]
ScopeKind = Literal["session", "run", "fleet"]


def classify_failure(kind: str) -> FailureClass:
    """The breaker's view of a failure kind (REFERENCE 4.10); unknown kinds count as ordinary failures."""
    if kind in TERMINAL_FAILURE_KINDS:
        return "terminal"
    if kind in RATE_LIMITED_FAILURE_KINDS:
        return "rate_limited"
    if kind in REQUEST_SCOPED_FAILURE_KINDS:
        return "request"
    return "other"


def normalize_engine(engine: str) -> str:
    name = engine.strip().lower()
    if not name:
        raise InvalidArgument("engine name must not be blank")
    return name


@dataclass(frozen=True, slots=True)
class BreakerScope:
    """Who shares a breaker: one session, one run, or the whole fleet (``id`` names it)."""

    kind: ScopeKind
    id: str = "default"

    def __post_init__(self) -> None:
        if self.kind not in ("session", "run", "fleet"):
            raise InvalidArgument(f"breaker scope must be session, run or fleet, not {self.kind!r}")
        if not self.id:
            raise InvalidArgument("breaker scope id must not be empty")


@dataclass(frozen=True, slots=True)
class BreakerConfig:
    failure_threshold: int = BREAKER_FAILURE_THRESHOLD
    empty_threshold: int = BREAKER_EMPTY_THRESHOLD
    transient_open_ms: int = BREAKER_TRANSIENT_OPEN_MS
    terminal_open_ms: int = BREAKER_TERMINAL_OPEN_MS
    max_open_ms: int = BREAKER_MAX_OPEN_MS
    probe_limit: int = BREAKER_PROBE_LIMIT
    probe_lease_ms: int = BREAKER_PROBE_LEASE_MS

    def __post_init__(self) -> None:
        for name in ("failure_threshold", "empty_threshold", "probe_limit", "probe_lease_ms"):
            if getattr(self, name) < 1:
                raise InvalidArgument(f"breaker {name} must be >= 1")
        if min(self.transient_open_ms, self.terminal_open_ms, self.max_open_ms) < 0:
            raise InvalidArgument("breaker open times must be >= 0")

    @classmethod
    def from_health(
        cls, max_failures: int | None = None, suspend_seconds: float | None = None
    ) -> BreakerConfig:
        """Reference config: ``health.max_failures`` sets both thresholds, ``suspend_seconds`` the transient open."""
        cfg = cls()
        if max_failures is not None:
            cfg = replace(cfg, failure_threshold=max_failures, empty_threshold=max_failures)
        if suspend_seconds is not None:
            cfg = replace(cfg, transient_open_ms=int(suspend_seconds * 1000))
        return cfg

    def open_ms(self, failure_class: FailureClass | None, retry_after_ms: int | None) -> int:
        base = self.terminal_open_ms if failure_class == "terminal" else self.transient_open_ms
        return min(max(base, retry_after_ms or 0), self.max_open_ms)


@dataclass(frozen=True, slots=True)
class Permit:
    """Admission to call an engine. ``generation`` fences late outcomes; ``-1`` = degraded (no-op)."""

    engine: str
    generation: int
    probe: bool = False
    token: str = ""

    @property
    def degraded(self) -> bool:
        return self.generation < 0


@dataclass(frozen=True, slots=True)
class Rejected:
    retry_after_ms: int
    state: BreakerStateName


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a permitted call observed: ``success``, ``empty``, ``failure(kind)`` or ``abandoned``."""

    status: Literal["success", "empty", "failure", "abandoned"]
    kind: str = ""
    retry_after_ms: int | None = None

    @classmethod
    def success(cls) -> Outcome:
        return cls("success")

    @classmethod
    def empty(cls) -> Outcome:
        return cls("empty")

    @classmethod
    def failure(cls, kind: str, retry_after_ms: int | None = None) -> Outcome:
        return cls("failure", kind, retry_after_ms)

    @classmethod
    def abandoned(cls) -> Outcome:
        return cls("abandoned")

    @property
    def failure_class(self) -> FailureClass | None:
        return classify_failure(self.kind) if self.status == "failure" else None


@dataclass(frozen=True, slots=True)
class BreakerState:
    state: BreakerStateName
    generation: int
    consecutive_failures: int = 0
    consecutive_empty: int = 0
    retry_after_ms: int = 0
    probes_in_flight: int = 0


class CircuitBreakers(Protocol):
    """The breakers of one scope, keyed by normalised engine name."""

    def acquire(self, engine: str) -> Permit | Rejected: ...

    def record(self, permit: Permit, outcome: Outcome) -> bool:
        """Apply an outcome; False when it changed nothing (stale permit, ignored kind, degraded)."""
        ...

    def state(self, engine: str) -> BreakerState: ...


@dataclass(slots=True)
class _BreakerRecord:
    state: BreakerStateName = "closed"
    generation: int = 0
    fails: int = 0
    empties: int = 0
    open_until_ms: int = 0
    probes: dict[str, int] = field(default_factory=dict)  # token -> lease expiry (ms)


class MemoryCircuitBreakers:
    """In-process breakers; the same transitions as the Redis Lua scripts, under one lock."""

    def __init__(
        self,
        scope: BreakerScope,
        config: BreakerConfig | None = None,
        *,
        clock: Clock | None = None,
        new_id: IdFactory | None = None,
        table: dict[tuple[str, str, str], _BreakerRecord] | None = None,
        lock: threading.Lock | None = None,
    ) -> None:
        self.scope = scope
        self.config = config or BreakerConfig()
        self._clock = clock or SystemClock()
        self._new_id = new_id or RandomIds()
        self._table = table if table is not None else {}
        self._lock = lock or threading.Lock()

    def _rec(self, engine: str) -> _BreakerRecord:
        key = (self.scope.kind, self.scope.id, engine)
        rec = self._table.get(key)
        if rec is None:
            rec = self._table[key] = _BreakerRecord()
        return rec

    def acquire(self, engine: str) -> Permit | Rejected:
        engine = normalize_engine(engine)
        now = self._clock.now_ms()
        with self._lock:
            rec = self._rec(engine)
            if rec.state == "open":
                if now < rec.open_until_ms:
                    return Rejected(rec.open_until_ms - now, "open")
                rec.state, rec.generation, rec.probes = "half_open", rec.generation + 1, {}
            if rec.state == "half_open":
                rec.probes = {t: exp for t, exp in rec.probes.items() if exp > now}
                if len(rec.probes) < self.config.probe_limit:
                    token = self._new_id("probe")
                    rec.probes[token] = now + self.config.probe_lease_ms
                    return Permit(engine, rec.generation, probe=True, token=token)
                return Rejected(max(min(rec.probes.values()) - now, 1), "half_open")
            return Permit(engine, rec.generation)

    def record(self, permit: Permit, outcome: Outcome) -> bool:
        if permit.degraded:
            return False
        now = self._clock.now_ms()
        cfg = self.config
        cls = outcome.failure_class
        with self._lock:
            rec = self._rec(permit.engine)
            if rec.generation != permit.generation:
                return False

            def trip(failure_class: FailureClass | None) -> None:
                rec.state, rec.generation = "open", rec.generation + 1
                rec.open_until_ms = now + cfg.open_ms(failure_class, outcome.retry_after_ms)
                rec.fails = rec.empties = 0
                rec.probes = {}

            if permit.probe:
                if rec.state != "half_open" or permit.token not in rec.probes:
                    return False
                if outcome.status == "success":
                    rec.state, rec.generation, rec.fails, rec.empties, rec.probes = (
                        "closed",
                        rec.generation + 1,
                        0,
                        0,
                        {},
                    )
                else:
                    trip(cls)
                return True
            if rec.state != "closed":
                return False
            if outcome.status == "success":
                rec.fails = rec.empties = 0
            elif outcome.status == "empty":
                rec.empties, rec.fails = rec.empties + 1, 0
                if rec.empties >= cfg.empty_threshold:
                    trip(None)
            elif outcome.status == "failure":
                if cls == "request":
                    return False
                if cls in ("terminal", "rate_limited"):
                    trip(cls)
                else:
                    rec.fails, rec.empties = rec.fails + 1, 0
                    if rec.fails >= cfg.failure_threshold:
                        trip(cls)
            else:
                return False
            return True

    def state(self, engine: str) -> BreakerState:
        engine = normalize_engine(engine)
        now = self._clock.now_ms()
        with self._lock:
            rec = self._rec(engine)
            if rec.state == "open" and now >= rec.open_until_ms:
                return BreakerState("half_open", rec.generation, rec.fails, rec.empties, 0, 0)
            live = sum(1 for exp in rec.probes.values() if exp > now) if rec.state == "half_open" else 0
            retry = rec.open_until_ms - now if rec.state == "open" else 0
            return BreakerState(rec.state, rec.generation, rec.fails, rec.empties, retry, live)


# ---------------------------------------------------------------------------------------------
# Bulkheads


@dataclass(frozen=True, slots=True)
class Lease:
    name: str
    lease_id: str
    limit: int
    expires_at_ms: int
    wait_ms: int = 0


def check_bulkhead_args(name: str, limit: int, lease_ms: int) -> None:
    if not name:
        raise InvalidArgument("bulkhead name must not be empty")
    if limit < 1:
        raise InvalidArgument(f"bulkhead limit must be >= 1, got {limit}")
    if lease_ms < 1:
        raise InvalidArgument(f"bulkhead lease_ms must be >= 1, got {lease_ms}")


class Bulkheads(Protocol):
    def try_acquire(self, name: str, limit: int, *, lease_ms: int = BULKHEAD_LEASE_MS) -> Lease | None: ...

    async def acquire(
        self, name: str, limit: int, timeout_s: float, *, lease_ms: int = BULKHEAD_LEASE_MS
    ) -> Lease: ...

    def acquire_blocking(
        self, name: str, limit: int, timeout_s: float, *, lease_ms: int = BULKHEAD_LEASE_MS
    ) -> Lease: ...

    def renew(self, lease: Lease, *, lease_ms: int = BULKHEAD_LEASE_MS) -> Lease | None: ...

    def release(self, lease: Lease) -> bool: ...

    def holders(self, name: str) -> int: ...


def _next_delay(delay: float) -> float:
    # Jitter keeps many pollers in different processes from retrying in lockstep.
    return min(delay * 2, POLL_MAX_S) * (0.5 + random.random() / 2)


class BulkheadBase:
    """Waiting, blocking and scoped holding, built on a back end's atomic ``try_acquire``."""

    def try_acquire(self, name: str, limit: int, *, lease_ms: int = BULKHEAD_LEASE_MS) -> Lease | None:
        raise NotImplementedError

    def renew(self, lease: Lease, *, lease_ms: int = BULKHEAD_LEASE_MS) -> Lease | None:
        raise NotImplementedError

    def release(self, lease: Lease) -> bool:
        raise NotImplementedError

    async def acquire(
        self, name: str, limit: int, timeout_s: float, *, lease_ms: int = BULKHEAD_LEASE_MS
    ) -> Lease:
        loop = asyncio.get_running_loop()
        start = loop.time()
        delay = POLL_MIN_S
        while True:
            lease = self.try_acquire(name, limit, lease_ms=lease_ms)
            elapsed = loop.time() - start
            if lease is not None:
                return replace(lease, wait_ms=int(elapsed * 1000))
            if elapsed >= timeout_s:
                raise Timeout(
                    f"bulkhead {name!r} full ({limit} holders) for {timeout_s:.3f}s",
                    op="bulkhead",
                    duration_ms=int(elapsed * 1000),
                )
            await asyncio.sleep(min(delay, max(timeout_s - elapsed, 0.0)))
            delay = _next_delay(delay)

    def acquire_blocking(
        self, name: str, limit: int, timeout_s: float, *, lease_ms: int = BULKHEAD_LEASE_MS
    ) -> Lease:
        start = time.monotonic()
        delay = POLL_MIN_S
        while True:
            lease = self.try_acquire(name, limit, lease_ms=lease_ms)
            elapsed = time.monotonic() - start
            if lease is not None:
                return replace(lease, wait_ms=int(elapsed * 1000))
            if elapsed >= timeout_s:
                raise Timeout(
                    f"bulkhead {name!r} full ({limit} holders) for {timeout_s:.3f}s",
                    op="bulkhead",
                    duration_ms=int(elapsed * 1000),
                )
            time.sleep(min(delay, max(timeout_s - elapsed, 0.0)))
            delay = _next_delay(delay)

    @contextlib.asynccontextmanager
    async def hold(
        self, name: str, limit: int, timeout_s: float, *, lease_ms: int = BULKHEAD_LEASE_MS
    ) -> AsyncIterator[Lease]:
        """Acquire, renew every third of the lease while the body runs, release on any exit."""
        lease = await self.acquire(name, limit, timeout_s, lease_ms=lease_ms)

        async def keep_alive() -> None:
            while True:
                await asyncio.sleep(lease_ms / 3000)
                with contextlib.suppress(Transport):
                    self.renew(lease, lease_ms=lease_ms)

        renewer = asyncio.create_task(keep_alive())
        try:
            yield lease
        finally:
            renewer.cancel()
            await asyncio.gather(renewer, return_exceptions=True)
            with contextlib.suppress(Transport):  # the lease expires on its own
                self.release(lease)


class MemoryBulkheads(BulkheadBase):
    def __init__(self, *, clock: Clock | None = None, new_id: IdFactory | None = None) -> None:
        self._clock = clock or SystemClock()
        self._new_id = new_id or RandomIds()
        self._lock = threading.Lock()
        self._leases: dict[str, dict[str, int]] = {}  # name -> lease id -> expiry (ms)

    def _live(self, name: str, now: int) -> dict[str, int]:
        live = {k: exp for k, exp in self._leases.get(name, {}).items() if exp > now}
        self._leases[name] = live
        return live

    def try_acquire(self, name: str, limit: int, *, lease_ms: int = BULKHEAD_LEASE_MS) -> Lease | None:
        check_bulkhead_args(name, limit, lease_ms)
        now = self._clock.now_ms()
        with self._lock:
            live = self._live(name, now)
            if len(live) >= limit:
                return None
            lease_id = self._new_id("lease")
            live[lease_id] = now + lease_ms
            return Lease(name, lease_id, limit, now + lease_ms)

    def renew(self, lease: Lease, *, lease_ms: int = BULKHEAD_LEASE_MS) -> Lease | None:
        now = self._clock.now_ms()
        with self._lock:
            live = self._live(lease.name, now)
            if lease.lease_id not in live:
                return None
            live[lease.lease_id] = now + lease_ms
            return replace(lease, expires_at_ms=now + lease_ms)

    def release(self, lease: Lease) -> bool:
        with self._lock:
            return self._leases.get(lease.name, {}).pop(lease.lease_id, None) is not None

    def holders(self, name: str) -> int:
        with self._lock:
            return len(self._live(name, self._clock.now_ms()))


# ---------------------------------------------------------------------------------------------
# Single flight

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


# ---------------------------------------------------------------------------------------------
# Step store


@dataclass(frozen=True, slots=True)
class StepKey:
    run_id: str
    query_digest: str
    step_id: str

    def __post_init__(self) -> None:
        if not (self.run_id and self.query_digest and self.step_id):
            raise InvalidArgument("run_id, query_digest and step_id are all required")

    def __str__(self) -> str:
        return f"{self.run_id}/{self.query_digest}/{self.step_id}"


@dataclass(frozen=True, slots=True)
class Claimed:
    attempt: int
    lease_until_ms: int


@dataclass(frozen=True, slots=True)
class Completed:
    attempt: int
    result: Any


@dataclass(frozen=True, slots=True)
class Busy:
    attempt: int
    retry_after_ms: int


StepStatus = Literal["running", "completed", "failed"]


@dataclass(frozen=True, slots=True)
class StepRecord:
    status: StepStatus
    attempt: int
    lease_until_ms: int = 0
    result: Any = None
    error_kind: dict[str, Any] | None = None


def encode_step_result(result: Any) -> str:
    try:
        text = json.dumps(result, separators=(",", ":"), sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(f"step result must be JSON: {exc}") from exc
    if len(text.encode()) > MAX_STEP_RESULT_BYTES:
        raise InvalidArgument(
            f"step result is {len(text.encode())} bytes, over {MAX_STEP_RESULT_BYTES}; store a reference"
        )
    return text


class StepStore(Protocol):
    def claim(self, key: StepKey, *, lease_ms: int = STEP_LEASE_MS) -> Claimed | Completed | Busy: ...

    def complete(self, key: StepKey, attempt: int, result: Any) -> None: ...

    def fail(self, key: StepKey, attempt: int, error_kind: dict[str, Any] | None = None) -> None: ...

    def renew(self, key: StepKey, attempt: int, *, lease_ms: int = STEP_LEASE_MS) -> bool: ...

    def recover(self, key: StepKey) -> Completed | None: ...

    def get(self, key: StepKey) -> StepRecord | None: ...


def stale_attempt(key: StepKey, attempt: int, status: str, current: int) -> VersionConflict:
    return VersionConflict(
        f"step {key} attempt {attempt} is stale (status {status or 'absent'}, attempt {current})",
        path=str(key),
        expected=attempt,
        actual=current,
    )


@dataclass(slots=True)
class _StepRow:
    status: StepStatus
    attempt: int
    lease_until_ms: int = 0
    result: str | None = None
    error_kind: str | None = None


class MemoryStepStore:
    """Steps in a dict; results stored as JSON text like the Redis store (no aliasing)."""

    def __init__(self, *, clock: Clock | None = None) -> None:
        self._clock = clock or SystemClock()
        self._lock = threading.Lock()
        self._rows: dict[StepKey, _StepRow] = {}

    def claim(self, key: StepKey, *, lease_ms: int = STEP_LEASE_MS) -> Claimed | Completed | Busy:
        now = self._clock.now_ms()
        with self._lock:
            row = self._rows.get(key)
            if row is not None and row.status == "completed":
                return Completed(row.attempt, json.loads(row.result or "null"))
            if row is not None and row.status == "running" and row.lease_until_ms > now:
                return Busy(row.attempt, row.lease_until_ms - now)
            attempt = (row.attempt if row else 0) + 1
            self._rows[key] = _StepRow("running", attempt, now + lease_ms)
            return Claimed(attempt, now + lease_ms)

    def _fenced(self, key: StepKey, attempt: int) -> _StepRow:
        row = self._rows.get(key)
        if row is None or row.status != "running" or row.attempt != attempt:
            raise stale_attempt(key, attempt, row.status if row else "", row.attempt if row else 0)
        return row

    def complete(self, key: StepKey, attempt: int, result: Any) -> None:
        text = encode_step_result(result)
        with self._lock:
            row = self._fenced(key, attempt)
            row.status, row.result, row.lease_until_ms = "completed", text, 0

    def fail(self, key: StepKey, attempt: int, error_kind: dict[str, Any] | None = None) -> None:
        with self._lock:
            row = self._fenced(key, attempt)
            row.status, row.lease_until_ms = "failed", 0
            row.error_kind = json.dumps(error_kind) if error_kind is not None else None

    def renew(self, key: StepKey, attempt: int, *, lease_ms: int = STEP_LEASE_MS) -> bool:
        now = self._clock.now_ms()
        with self._lock:
            try:
                row = self._fenced(key, attempt)
            except VersionConflict:
                return False
            row.lease_until_ms = now + lease_ms
            return True

    def recover(self, key: StepKey) -> Completed | None:
        with self._lock:
            row = self._rows.get(key)
            if row is None or row.status != "completed":
                return None
            return Completed(row.attempt, json.loads(row.result or "null"))

    def get(self, key: StepKey) -> StepRecord | None:
        with self._lock:
            row = self._rows.get(key)
            if row is None:
                return None
            return StepRecord(
                row.status,
                row.attempt,
                row.lease_until_ms,
                json.loads(row.result) if row.result is not None else None,
                json.loads(row.error_kind) if row.error_kind is not None else None,
            )


# ---------------------------------------------------------------------------------------------
# The bundle a session or worker is handed


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
