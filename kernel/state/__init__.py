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

from kernel.state.breaker import (
    RATE_LIMITED_FAILURE_KINDS,
    REQUEST_SCOPED_FAILURE_KINDS,
    TERMINAL_FAILURE_KINDS,
    BreakerConfig,
    BreakerScope,
    BreakerState,
    BreakerStateName,
    CircuitBreakers,
    FailureClass,
    MemoryCircuitBreakers,
    Outcome,
    Permit,
    Rejected,
    ScopeKind,
    classify_failure,
    normalize_engine,
)
from kernel.state.bulkhead import BulkheadBase, Bulkheads, Lease, MemoryBulkheads, check_bulkhead_args
from kernel.state.coalesce import (
    ROLE_COUNTERS,
    CoalesceOutcome,
    Coalescer,
    FlightBackend,
    FlightResult,
    MemoryFlightBackend,
    Role,
)
from kernel.state.limits import (
    BREAKER_EMPTY_THRESHOLD,
    BREAKER_FAILURE_THRESHOLD,
    BREAKER_KEY_TTL_MS,
    BREAKER_MAX_OPEN_MS,
    BREAKER_PROBE_LEASE_MS,
    BREAKER_PROBE_LIMIT,
    BREAKER_TERMINAL_OPEN_MS,
    BREAKER_TRANSIENT_OPEN_MS,
    BULKHEAD_LEASE_MS,
    FLIGHT_LEASE_MS,
    FLIGHT_MAX_IN_FLIGHT,
    FLIGHT_MAX_TAKEOVERS,
    FLIGHT_RESULT_TTL_MS,
    MAX_STEP_RESULT_BYTES,
    POLL_MAX_S,
    POLL_MIN_S,
    STEP_LEASE_MS,
    STEP_TTL_MS,
)
from kernel.state.steps import (
    Busy,
    Claimed,
    Completed,
    MemoryStepStore,
    StepKey,
    StepRecord,
    StepStatus,
    StepStore,
    encode_step_result,
    stale_attempt,
)
from kernel.state.store import MemoryStateStore, StateStore

__all__ = [
    "BREAKER_EMPTY_THRESHOLD",
    "BREAKER_FAILURE_THRESHOLD",
    "BREAKER_KEY_TTL_MS",
    "BREAKER_MAX_OPEN_MS",
    "BREAKER_PROBE_LEASE_MS",
    "BREAKER_PROBE_LIMIT",
    "BREAKER_TERMINAL_OPEN_MS",
    "BREAKER_TRANSIENT_OPEN_MS",
    "BULKHEAD_LEASE_MS",
    "FLIGHT_LEASE_MS",
    "FLIGHT_MAX_IN_FLIGHT",
    "FLIGHT_MAX_TAKEOVERS",
    "FLIGHT_RESULT_TTL_MS",
    "MAX_STEP_RESULT_BYTES",
    "POLL_MAX_S",
    "POLL_MIN_S",
    "RATE_LIMITED_FAILURE_KINDS",
    "REQUEST_SCOPED_FAILURE_KINDS",
    "ROLE_COUNTERS",
    "STEP_LEASE_MS",
    "STEP_TTL_MS",
    "TERMINAL_FAILURE_KINDS",
    "BreakerConfig",
    "BreakerScope",
    "BreakerState",
    "BreakerStateName",
    "BulkheadBase",
    "Bulkheads",
    "Busy",
    "CircuitBreakers",
    "Claimed",
    "CoalesceOutcome",
    "Coalescer",
    "Completed",
    "FailureClass",
    "FlightBackend",
    "FlightResult",
    "Lease",
    "MemoryBulkheads",
    "MemoryCircuitBreakers",
    "MemoryFlightBackend",
    "MemoryStateStore",
    "MemoryStepStore",
    "Outcome",
    "Permit",
    "Rejected",
    "Role",
    "ScopeKind",
    "StateStore",
    "StepKey",
    "StepRecord",
    "StepStatus",
    "StepStore",
    "check_bulkhead_args",
    "classify_failure",
    "encode_step_result",
    "normalize_engine",
    "stale_attempt",
]
