"""Bulkheads (SPEC W-4, F-4): expiring-lease semaphores, one suite on memory and on Redis Lua."""

from __future__ import annotations

import asyncio

import pytest

from kernel.errors import InvalidArgument, Timeout
from kernel.testing import FakeClock
from workers.state.testing import BACKENDS, make_store


@pytest.fixture(params=BACKENDS)
def clock_bulkheads(request: pytest.FixtureRequest):
    clock = FakeClock()
    return clock, make_store(request.param, clock).bulkheads()


@pytest.fixture(params=BACKENDS)
def bulkheads(request: pytest.FixtureRequest):
    return make_store(request.param).bulkheads()  # real time


def test_w4_admits_up_to_the_limit_then_refuses(clock_bulkheads) -> None:
    _clock, bh = clock_bulkheads
    leases = [bh.try_acquire("search", 3) for _ in range(3)]
    assert all(leases) and len({lease.lease_id for lease in leases}) == 3
    assert bh.try_acquire("search", 3) is None
    assert bh.holders("search") == 3
    assert bh.try_acquire("other", 1) is not None  # bulkheads are independent by name
    assert bh.release(leases[0])
    assert not bh.release(leases[0])  # releasing twice frees nothing more
    assert bh.try_acquire("search", 3) is not None
    assert bh.try_acquire("search", 3) is None


def test_w4_a_dead_holder_frees_its_permit_after_the_lease_ttl(clock_bulkheads) -> None:
    clock, bh = clock_bulkheads
    dead = bh.try_acquire("search", 1, lease_ms=2_000)
    assert dead is not None and bh.try_acquire("search", 1) is None
    clock.advance(1.999)
    assert bh.try_acquire("search", 1) is None
    clock.advance(0.002)
    assert bh.holders("search") == 0
    assert bh.try_acquire("search", 1) is not None
    assert bh.renew(dead) is None  # too late: the permit went to someone else


def test_w4_renew_keeps_a_live_lease(clock_bulkheads) -> None:
    clock, bh = clock_bulkheads
    lease = bh.try_acquire("search", 1, lease_ms=2_000)
    clock.advance(1.5)
    renewed = bh.renew(lease, lease_ms=2_000)
    assert renewed is not None and renewed.expires_at_ms == clock.now_ms() + 2_000
    clock.advance(1.5)
    assert bh.try_acquire("search", 1) is None  # would have expired without the renewal


async def test_w4_acquire_waits_for_a_release_and_reports_wait_time(bulkheads) -> None:
    first = bulkheads.try_acquire("search", 1)

    async def release_later() -> None:
        await asyncio.sleep(0.15)
        bulkheads.release(first)

    releaser = asyncio.create_task(release_later())
    lease = await bulkheads.acquire("search", 1, timeout_s=5)
    await releaser
    assert 120 <= lease.wait_ms < 2_000
    assert bulkheads.holders("search") == 1


async def test_w4_acquire_times_out_with_a_typed_error(bulkheads) -> None:
    bulkheads.try_acquire("search", 1)
    with pytest.raises(Timeout) as info:
        await bulkheads.acquire("search", 1, timeout_s=0.1)
    assert info.value.data["op"] == "bulkhead" and info.value.data["duration_ms"] >= 100
    with pytest.raises(Timeout):
        bulkheads.acquire_blocking("search", 1, timeout_s=0.05)


async def test_w4_no_over_admission_among_concurrent_tasks(bulkheads) -> None:
    holding = 0
    peak = 0

    async def worker() -> None:
        nonlocal holding, peak
        for _ in range(5):
            async with bulkheads.hold("search", 3, timeout_s=10) as lease:
                assert lease.limit == 3
                holding += 1
                peak = max(peak, holding)
                await asyncio.sleep(0.003)
                holding -= 1

    await asyncio.gather(*(worker() for _ in range(8)))
    assert peak == 3
    assert bulkheads.holders("search") == 0


def test_w4_rejects_nonsense_limits(bulkheads) -> None:
    with pytest.raises(InvalidArgument):
        bulkheads.try_acquire("search", 0)
    with pytest.raises(InvalidArgument):
        bulkheads.try_acquire("", 1)
