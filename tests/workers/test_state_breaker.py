"""Circuit breakers (SPEC W-3, F-4; REFERENCE 4.10): one behavioural suite, run on the in-memory
store and on the Redis Lua scripts (via fakeredis)."""

from __future__ import annotations

import pytest

from kernel.errors import Transport
from kernel.state import (
    BREAKER_MAX_OPEN_MS,
    BREAKER_TERMINAL_OPEN_MS,
    BREAKER_TRANSIENT_OPEN_MS,
    BreakerConfig,
    BreakerScope,
    Outcome,
    Permit,
    Rejected,
)
from kernel.testing import FakeClock
from workers.state import RedisStateStore, make_client
from workers.state.testing import BACKENDS, make_store

SESSION = BreakerScope("session", "s1")


@pytest.fixture(params=BACKENDS)
def clock_store(request: pytest.FixtureRequest):
    clock = FakeClock()
    return clock, make_store(request.param, clock)


def permit(board, engine: str = "ddg") -> Permit:
    got = board.acquire(engine)
    assert isinstance(got, Permit), got
    return got


def test_w3_closed_admits_and_success_resets_counters(clock_store) -> None:
    _clock, store = clock_store
    b = store.breakers(SESSION)
    for _ in range(2):
        assert b.record(permit(b), Outcome.failure("transport"))
    assert b.state("ddg").consecutive_failures == 2
    assert b.record(permit(b), Outcome.success())
    st = b.state("ddg")
    assert (st.state, st.consecutive_failures, st.generation) == ("closed", 0, 0)


def test_w3_three_failures_in_a_row_open_for_the_transient_time(clock_store) -> None:
    clock, store = clock_store
    b = store.breakers(SESSION)
    for _ in range(3):
        b.record(permit(b), Outcome.failure("timeout"))
    got = b.acquire("ddg")
    assert got == Rejected(BREAKER_TRANSIENT_OPEN_MS, "open")
    clock.advance(59.0)
    got = b.acquire("ddg")
    assert isinstance(got, Rejected) and got.retry_after_ms == 1000
    clock.advance(1.0)
    assert permit(b).probe


def test_w3_terminal_kind_opens_at_once_for_15_minutes(clock_store) -> None:
    _clock, store = clock_store
    b = store.breakers(SESSION)
    b.record(permit(b, "tavily"), Outcome.failure("provider_quota"))
    got = b.acquire("tavily")
    assert got == Rejected(BREAKER_TERMINAL_OPEN_MS, "open")
    assert b.state("tavily").state == "open"


def test_w3_rate_limited_opens_at_once_and_retry_after_is_a_floor_capped_at_24h(clock_store) -> None:
    _clock, store = clock_store
    b = store.breakers(SESSION)
    b.record(permit(b, "brave"), Outcome.failure("rate_limited", retry_after_ms=120_000))
    assert b.acquire("brave") == Rejected(120_000, "open")
    b.record(permit(b, "bing"), Outcome.failure("provider_rate_limited", retry_after_ms=5_000))
    assert b.acquire("bing") == Rejected(BREAKER_TRANSIENT_OPEN_MS, "open")  # floor: never shorter
    b.record(permit(b, "wiki"), Outcome.failure("provider_quota", retry_after_ms=10 * BREAKER_MAX_OPEN_MS))
    assert b.acquire("wiki") == Rejected(BREAKER_MAX_OPEN_MS, "open")


def test_w3_three_empty_in_a_row_open_and_a_failure_breaks_the_streak(clock_store) -> None:
    _clock, store = clock_store
    b = store.breakers(SESSION)
    b.record(permit(b), Outcome.empty())
    b.record(permit(b), Outcome.empty())
    b.record(permit(b), Outcome.failure("transport"))  # breaks the empty streak
    b.record(permit(b), Outcome.empty())
    assert b.state("ddg").state == "closed"
    b.record(permit(b), Outcome.empty())
    b.record(permit(b), Outcome.empty())
    assert b.acquire("ddg") == Rejected(BREAKER_TRANSIENT_OPEN_MS, "open")


def test_w3_request_scoped_failures_never_count_except_against_a_probe(clock_store) -> None:
    clock, store = clock_store
    b = store.breakers(SESSION)
    for _ in range(5):
        assert not b.record(permit(b), Outcome.failure("invalid_query"))
        assert not b.record(permit(b), Outcome.failure("provider_invalid_request"))
    assert b.state("ddg").state == "closed" and b.state("ddg").consecutive_failures == 0
    b.record(permit(b), Outcome.failure("provider_permission"))
    clock.advance(BREAKER_TERMINAL_OPEN_MS / 1000)
    probe = permit(b)
    assert b.record(probe, Outcome.failure("invalid_query"))
    assert b.acquire("ddg") == Rejected(BREAKER_TRANSIENT_OPEN_MS, "open")


def test_w3_half_open_admits_exactly_the_probe_count(clock_store) -> None:
    clock, store = clock_store
    b = store.breakers(SESSION, BreakerConfig(probe_limit=2, probe_lease_ms=10_000))
    b.record(permit(b), Outcome.failure("rate_limited"))
    clock.advance(60)
    p1, p2 = permit(b), permit(b)
    assert p1.probe and p2.probe and p1.token != p2.token
    third = b.acquire("ddg")
    assert isinstance(third, Rejected) and third.state == "half_open"
    assert third.retry_after_ms == 10_000
    assert b.state("ddg").probes_in_flight == 2


def test_w3_probe_success_closes_and_makes_other_permits_stale(clock_store) -> None:
    clock, store = clock_store
    b = store.breakers(SESSION, BreakerConfig(probe_limit=2))
    b.record(permit(b), Outcome.failure("rate_limited"))
    clock.advance(60)
    p1, p2 = permit(b), permit(b)
    assert b.record(p1, Outcome.success())
    st = b.state("ddg")
    assert st.state == "closed" and st.generation == p1.generation + 1
    assert not b.record(p2, Outcome.failure("provider_quota"))  # stale generation: no-op
    assert b.state("ddg").state == "closed"


def test_w3_failed_empty_or_abandoned_probe_reopens(clock_store) -> None:
    clock, store = clock_store
    b = store.breakers(SESSION)
    b.record(permit(b), Outcome.failure("rate_limited"))
    for outcome, open_ms in (
        (Outcome.empty(), BREAKER_TRANSIENT_OPEN_MS),
        (Outcome.abandoned(), BREAKER_TRANSIENT_OPEN_MS),
        (Outcome.failure("provider_authentication"), BREAKER_TERMINAL_OPEN_MS),
    ):
        clock.advance(BREAKER_TERMINAL_OPEN_MS / 1000)
        probe = permit(b)
        assert probe.probe
        assert b.record(probe, outcome)
        assert b.acquire("ddg") == Rejected(open_ms, "open"), outcome


def test_w3_a_dead_probe_holder_frees_the_slot_after_its_lease(clock_store) -> None:
    clock, store = clock_store
    b = store.breakers(SESSION, BreakerConfig(probe_lease_ms=5_000))
    b.record(permit(b), Outcome.failure("rate_limited"))
    clock.advance(60)
    dead = permit(b)
    assert isinstance(b.acquire("ddg"), Rejected)
    clock.advance(5)
    fresh = permit(b)
    assert fresh.probe
    assert not b.record(dead, Outcome.success())  # its lease lapsed: it no longer speaks for the engine
    assert b.record(fresh, Outcome.success())
    assert b.state("ddg").state == "closed"


def test_w3_stale_permit_from_before_a_trip_is_a_no_op(clock_store) -> None:
    _clock, store = clock_store
    b = store.breakers(SESSION)
    early = permit(b)
    b.record(permit(b), Outcome.failure("provider_quota"))
    assert not b.record(early, Outcome.success())
    assert b.state("ddg").state == "open"


def test_w3_scopes_and_engines_are_independent_and_names_normalised(clock_store) -> None:
    _clock, store = clock_store
    s1 = store.breakers(SESSION)
    s2 = store.breakers(BreakerScope("session", "s2"))
    run = store.breakers(BreakerScope("run", "s1"))
    s1.record(permit(s1, " DDG "), Outcome.failure("provider_quota"))
    assert isinstance(s1.acquire("ddg"), Rejected)
    assert isinstance(store.breakers(SESSION).acquire("Ddg"), Rejected)  # same scope, new view
    assert isinstance(s2.acquire("ddg"), Permit)
    assert isinstance(run.acquire("ddg"), Permit)
    assert isinstance(s1.acquire("brave"), Permit)


def test_w3_health_config_overrides_thresholds_and_suspend_time(clock_store) -> None:
    _clock, store = clock_store
    b = store.breakers(SESSION, BreakerConfig.from_health(max_failures=1, suspend_seconds=5))
    b.record(permit(b), Outcome.empty())
    assert b.acquire("ddg") == Rejected(5_000, "open")


def test_w3_fail_closed_engines_reject_when_redis_is_unreachable() -> None:
    """Paid/rate-limited engines fail closed with a typed error; others get a no-op permit."""
    client = make_client("redis://127.0.0.1:1/0", connect_timeout_s=0.2, socket_timeout_s=0.2)
    b = RedisStateStore(client).breakers(SESSION, fail_closed=["Tavily"])
    with pytest.raises(Transport) as info:
        b.acquire("tavily")
    assert info.value.to_kind() == {"type": "transport", "op": "redis"}
    got = b.acquire("ddg")
    assert isinstance(got, Permit) and got.degraded
    assert not b.record(got, Outcome.failure("provider_quota"))
    assert not b.record(Permit("ddg", 0), Outcome.success())  # lost outcome, not an exception
