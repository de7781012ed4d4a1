"""Single flight (SPEC W-4): roles leader/shared/bypass/abandoned and their counters, one suite on
memory and on the Redis scripts (fakeredis)."""

from __future__ import annotations

import asyncio

import pytest

from kernel.errors import RateLimited
from kernel.state import Coalescer
from kernel.testing import FakeClock
from workers.state import RedisStateStore, make_client
from workers.state.testing import BACKENDS, fakeredis_store, make_store

ROLE_KEYS = {
    "max_in_flight",
    "in_flight",
    "leader_requests",
    "shared_requests",
    "bypassed_requests",
    "abandoned_requests",
}


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest):
    return make_store(request.param)


class Work:
    """A search stand-in that counts how often it really ran."""

    def __init__(self, value: object = "results", delay_s: float = 0.1) -> None:
        self.calls = 0
        self.value = value
        self.delay_s = delay_s
        self.started = asyncio.Event()

    async def __call__(self) -> object:
        self.calls += 1
        self.started.set()
        await asyncio.sleep(self.delay_s)
        return self.value


async def test_w4_identical_concurrent_requests_run_once(store) -> None:
    co = store.coalescer()
    work = Work({"results": [1, 2]})
    outs = await asyncio.gather(*(co.run("q=python", work) for _ in range(5)))
    assert work.calls == 1
    assert sorted(o.role for o in outs) == ["leader", "shared", "shared", "shared", "shared"]
    assert all(o.value == {"results": [1, 2]} for o in outs)
    stats = co.stats()
    assert set(stats) == ROLE_KEYS
    assert (stats["leader_requests"], stats["shared_requests"], stats["in_flight"]) == (1, 4, 0)


async def test_w4_different_keys_do_not_coalesce_and_it_is_not_a_cache(store) -> None:
    co = store.coalescer()
    work = Work(delay_s=0.01)
    a, b = await asyncio.gather(co.run("q=a", work), co.run("q=b", work))
    assert (a.role, b.role, work.calls) == ("leader", "leader", 2)
    again = await co.run("q=a", work)
    assert (again.role, work.calls) == ("leader", 3)


async def test_w4_a_typed_leader_error_is_shared_with_followers(store) -> None:
    co = store.coalescer()

    async def limited() -> object:
        await asyncio.sleep(0.05)
        raise RateLimited("429 from engine", retry_after_ms=1500)

    results = await asyncio.gather(*(co.run("q", limited) for _ in range(3)), return_exceptions=True)
    assert all(isinstance(r, RateLimited) and r.data["retry_after_ms"] == 1500 for r in results)
    stats = co.stats()
    assert (stats["leader_requests"], stats["shared_requests"]) == (1, 2)


async def test_w4_cancelled_leader_does_not_fail_followers_one_takes_over(store) -> None:
    co = store.coalescer()
    work = Work("late", delay_s=0.2)
    leader = asyncio.create_task(co.run("q", work))
    await work.started.wait()
    followers = [asyncio.create_task(co.run("q", work)) for _ in range(3)]
    await asyncio.sleep(0.05)  # followers are now waiting on the leader
    leader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await leader
    outs = await asyncio.gather(*followers)
    assert all(o.value == "late" for o in outs)
    assert sorted(o.role for o in outs) == ["abandoned", "shared", "shared"]
    assert all(o.abandoned_waits == 1 for o in outs)
    assert work.calls == 2  # the cancelled run and the takeover, nothing more
    stats = co.stats()
    assert (stats["abandoned_requests"], stats["shared_requests"], stats["leader_requests"]) == (1, 2, 0)


async def test_w4_a_leader_that_dies_silently_is_taken_over_after_its_lease() -> None:
    """A worker killed mid-search never publishes; its lease lapses and a follower takes over."""
    for backend in BACKENDS:
        clock = FakeClock()
        co = make_store(backend, clock).coalescer()
        decision, _ = co.backend.begin("q", "dead-leader", co.lease_ms, co.max_in_flight)
        assert decision == "lead"
        work = Work("fresh", delay_s=0.0)
        follower = asyncio.create_task(co.run("q", work))
        await asyncio.sleep(0.05)
        assert not follower.done() and work.calls == 0
        clock.advance(co.lease_ms / 1000)
        out = await asyncio.wait_for(follower, 5)
        assert (out.role, out.value, work.calls) == ("abandoned", "fresh", 1), backend


async def test_w4_beyond_max_in_flight_callers_bypass(store) -> None:
    co = store.coalescer(max_in_flight=1)
    work = Work(delay_s=0.1)
    outs = await asyncio.gather(co.run("q1", work), co.run("q2", work))
    assert sorted(o.role for o in outs) == ["bypass", "leader"]
    assert co.stats()["bypassed_requests"] == 1


async def test_w4_redis_values_must_be_json_else_followers_compute_their_own() -> None:
    co = fakeredis_store().coalescer()
    work = Work(object(), delay_s=0.05)
    outs = await asyncio.gather(*(co.run("q", work) for _ in range(2)))
    assert sorted(o.role for o in outs) == ["abandoned", "leader"]
    assert work.calls == 2


async def test_w4_unreachable_redis_degrades_to_bypass() -> None:
    client = make_client("redis://127.0.0.1:1/0", connect_timeout_s=0.2, socket_timeout_s=0.2)
    co: Coalescer = RedisStateStore(client).coalescer()
    out = await co.run("q", Work(delay_s=0.0))
    assert out.role == "bypass" and out.value == "results"
    assert co.stats()["in_flight"] == 0
