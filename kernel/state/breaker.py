"""Circuit breakers (W-3): states, tripping rules and the in-memory implementation; see the package docstring."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from typing import Literal, Protocol

from kernel.clock import Clock, IdFactory, RandomIds, SystemClock
from kernel.errors import InvalidArgument
from kernel.state.limits import (
    BREAKER_EMPTY_THRESHOLD,
    BREAKER_FAILURE_THRESHOLD,
    BREAKER_MAX_OPEN_MS,
    BREAKER_PROBE_LEASE_MS,
    BREAKER_PROBE_LIMIT,
    BREAKER_TERMINAL_OPEN_MS,
    BREAKER_TRANSIENT_OPEN_MS,
)

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
