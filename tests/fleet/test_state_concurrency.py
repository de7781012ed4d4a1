"""Fleet state under real concurrency (SPEC F-4, W-3, W-4, F-3, S-5): several OS processes against
one real Redis (the test session's own server, DB 15, a unique key prefix per test, deleted afterwards)."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator

import pytest

from kernel.events import Event
from kernel.state import BreakerConfig, BreakerScope, Claimed, Coalescer, Outcome, Permit, StepKey
from workers.state import RedisStateStore, RedisStreamReader, RedisStreamSink, make_client
from workers.state.coalesce import RedisFlightBackend

pytestmark = pytest.mark.fleet

CTX = multiprocessing.get_context("fork")  # children build their own clients after the fork
SCOPE = BreakerScope("fleet", "concurrency")


URL = ""  # set by the `url` fixture before any child forks: the children inherit it


@pytest.fixture(scope="module", autouse=True)
def url(redis_urls: Callable[[int], str]) -> str:
    global URL
    URL = redis_urls(15)
    return URL


@pytest.fixture()
def prefix(url: str) -> Iterator[str]:
    client = make_client(url)
    name = f"test-state-{uuid.uuid4().hex[:10]}"
    yield name
    keys = list(client.scan_iter(f"{name}:*", count=500))
    if keys:
        client.delete(*keys)


def run_processes(target, n: int, *args: object) -> None:
    procs = [CTX.Process(target=target, args=(i, *args)) for i in range(n)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(20)
        assert p.exitcode == 0, f"child exited with {p.exitcode}"


# -- bulkhead -------------------------------------------------------------------------------------

TRACK_LUA = """
local c = redis.call('INCR', KEYS[1])
if c > tonumber(redis.call('GET', KEYS[2]) or '0') then redis.call('SET', KEYS[2], c) end
return c
"""


def bulkhead_worker(i: int, prefix: str, barrier, rounds: int, limit: int) -> None:
    store = RedisStateStore(make_client(URL), prefix=prefix)
    bh = store.bulkheads()
    track = store.client.register_script(TRACK_LUA)
    barrier.wait()
    for _ in range(rounds):
        lease = bh.acquire_blocking("search", limit, timeout_s=15, lease_ms=5_000)
        track(keys=[f"{prefix}:holding", f"{prefix}:peak"])
        time.sleep(0.002)
        store.client.decr(f"{prefix}:holding")
        store.client.incr(f"{prefix}:done")
        assert bh.release(lease)


def test_f4_processes_hammering_one_bulkhead_never_over_admit(prefix: str) -> None:
    procs, rounds, limit = 4, 30, 3
    run_processes(bulkhead_worker, procs, prefix, CTX.Barrier(procs), rounds, limit)
    client = make_client(URL)
    assert int(client.get(f"{prefix}:done")) == procs * rounds
    assert int(client.get(f"{prefix}:peak")) == limit  # reached, never exceeded
    assert RedisStateStore(client, prefix=prefix).bulkheads().holders("search") == 0


def hold_forever(prefix: str, ready) -> None:
    bh = RedisStateStore(make_client(URL), prefix=prefix).bulkheads()
    assert bh.try_acquire("search", 1, lease_ms=400) is not None
    ready.set()
    time.sleep(60)


def test_w4_a_killed_worker_frees_its_permit_after_the_lease_ttl(prefix: str) -> None:
    ready = CTX.Event()
    child = CTX.Process(target=hold_forever, args=(prefix, ready))
    child.start()
    try:
        assert ready.wait(10)
        os.kill(child.pid, signal.SIGKILL)
        child.join(5)
        bh = RedisStateStore(make_client(URL), prefix=prefix).bulkheads()
        assert bh.try_acquire("search", 1) is None  # still leased to the dead worker
        lease = bh.acquire_blocking("search", 1, timeout_s=3)
        assert 100 <= lease.wait_ms <= 1_500
    finally:
        child.kill()


# -- breaker --------------------------------------------------------------------------------------


def probe_worker(i: int, prefix: str, barrier, probe_limit: int, window_s: float) -> None:
    store = RedisStateStore(make_client(URL), prefix=prefix)
    b = store.breakers(SCOPE, BreakerConfig(transient_open_ms=300, probe_limit=probe_limit))
    barrier.wait()
    probes = closed = 0
    end = time.monotonic() + window_s
    while time.monotonic() < end:
        got = b.acquire("ddg")
        if isinstance(got, Permit):
            probes += got.probe
            closed += not got.probe
    store.client.incrby(f"{prefix}:probes", probes)
    store.client.incrby(f"{prefix}:closed", closed)


@pytest.mark.parametrize("probe_limit", [1, 2])
def test_w3_processes_racing_a_half_open_breaker_get_exactly_the_probe_count(
    prefix: str, probe_limit: int
) -> None:
    store = RedisStateStore(make_client(URL), prefix=prefix)
    b = store.breakers(SCOPE, BreakerConfig(transient_open_ms=300, probe_limit=probe_limit))
    first = b.acquire("ddg")
    assert isinstance(first, Permit) and b.record(first, Outcome.failure("rate_limited"))
    # Workers start hammering while it is still open and keep going across the half-open edge.
    run_processes(probe_worker, 4, prefix, CTX.Barrier(4), probe_limit, 0.8)
    assert int(store.client.get(f"{prefix}:probes")) == probe_limit
    assert int(store.client.get(f"{prefix}:closed")) == 0
    assert b.state("ddg").state == "half_open" and b.state("ddg").probes_in_flight == probe_limit


def failure_worker(i: int, prefix: str, barrier) -> None:
    store = RedisStateStore(make_client(URL), prefix=prefix)
    b = store.breakers(SCOPE)
    permits = [b.acquire("brave") for _ in range(5)]
    barrier.wait()
    for p in permits:
        if isinstance(p, Permit):
            b.record(p, Outcome.failure("transport"))


def test_f4_concurrent_failures_trip_the_breaker_exactly_once(prefix: str) -> None:
    """20 failures from 4 processes on generation-0 permits: one transition, the rest are stale."""
    run_processes(failure_worker, 4, prefix, CTX.Barrier(4))
    st = RedisStateStore(make_client(URL), prefix=prefix).breakers(SCOPE).state("brave")
    assert (st.state, st.generation, st.consecutive_failures) == ("open", 1, 0)
    assert 55_000 < st.retry_after_ms <= 60_000


# -- step store -----------------------------------------------------------------------------------


def claim_worker(i: int, prefix: str, barrier) -> None:
    store = RedisStateStore(make_client(URL), prefix=prefix)
    barrier.wait()
    got = store.steps().claim(StepKey("run-1", "q", "s1"), lease_ms=10_000)
    store.client.rpush(f"{prefix}:claims", type(got).__name__)


def test_f3_processes_racing_one_step_claim_it_exactly_once(prefix: str) -> None:
    run_processes(claim_worker, 6, prefix, CTX.Barrier(6))
    client = make_client(URL)
    assert sorted(client.lrange(f"{prefix}:claims", 0, -1)) == ["Busy"] * 5 + ["Claimed"]
    steps = RedisStateStore(client, prefix=prefix).steps()
    steps.complete(StepKey("run-1", "q", "s1"), 1, {"ok": True})
    assert steps.recover(StepKey("run-1", "q", "s1")).result == {"ok": True}
    assert isinstance(steps.claim(StepKey("run-2", "q", "s1")), Claimed)


# -- single flight --------------------------------------------------------------------------------


def flight_worker(i: int, prefix: str, barrier) -> None:
    store = RedisStateStore(make_client(URL), prefix=prefix)

    async def search() -> dict:
        store.client.incr(f"{prefix}:runs")
        await asyncio.sleep(0.4)
        return {"hits": ["a", "b"]}

    barrier.wait()
    out = asyncio.run(store.coalescer().run("query=python asyncio", search))
    assert out.value == {"hits": ["a", "b"]}
    store.client.rpush(f"{prefix}:roles", out.role)


def test_w4_identical_requests_from_processes_run_once(prefix: str) -> None:
    run_processes(flight_worker, 4, prefix, CTX.Barrier(4))
    client = make_client(URL)
    assert int(client.get(f"{prefix}:runs")) == 1
    assert sorted(client.lrange(f"{prefix}:roles", 0, -1)) == ["leader", "shared", "shared", "shared"]
    stats = RedisStateStore(client, prefix=prefix).coalescer().stats()
    assert (stats["leader_requests"], stats["shared_requests"], stats["in_flight"]) == (1, 3, 0)


def doomed_leader(prefix: str, ready) -> None:
    client = make_client(URL)
    co = Coalescer(RedisFlightBackend(client, prefix=prefix), lease_ms=600)

    async def slow() -> str:
        ready.set()
        await asyncio.sleep(60)
        return "never"

    asyncio.run(co.run("q", slow))


async def test_w4_a_killed_leader_process_is_taken_over_by_a_follower(prefix: str) -> None:
    ready = CTX.Event()
    child = CTX.Process(target=doomed_leader, args=(prefix, ready))
    child.start()
    try:
        assert await asyncio.to_thread(ready.wait, 10)
        co = Coalescer(RedisFlightBackend(make_client(URL), prefix=prefix), lease_ms=600)

        async def fresh() -> str:
            return "fresh"

        follower = asyncio.create_task(co.run("q", fresh))
        await asyncio.sleep(0.1)
        os.kill(child.pid, signal.SIGKILL)
        start = time.monotonic()
        out = await asyncio.wait_for(follower, 5)
        assert (out.role, out.value, out.abandoned_waits) == ("abandoned", "fresh", 1)
        assert time.monotonic() - start < 1.5  # within about one lease
    finally:
        child.kill()


# -- events ---------------------------------------------------------------------------------------


def emitter(prefix: str, session: str, n: int) -> None:
    sink = RedisStreamSink(make_client(URL), session, prefix=prefix)
    for i in range(n):
        kind = "tool_end" if i == n - 1 else "tool_output_delta"
        sink.emit(Event(kind, "call-1", "bash", "agent", int(time.time() * 1000), data={"i": i}))
        time.sleep(0.01)


def test_s5_a_client_in_another_process_reads_events_live_and_in_order(prefix: str) -> None:
    reader = RedisStreamReader(make_client(URL), "sess", prefix=prefix)
    stream = reader.read("$", block_ms=500, until=lambda e: e.type == "tool_end", idle_timeout_s=10)
    child = CTX.Process(target=emitter, args=(prefix, "sess", 30))
    child.start()
    arrivals, seen = [], []
    for item in stream:
        arrivals.append(time.monotonic())
        seen.append((item.event.data["i"], item.event.seq))
    child.join(10)
    assert seen == [(i, i + 1) for i in range(30)]
    assert arrivals[-1] - arrivals[0] > 0.15  # delivered while being written, not all at the end
    resumed = list(reader.read(reader.range(count=10)[-1].id, block_ms=1, idle_timeout_s=0))
    assert [r.event.data["i"] for r in resumed] == list(range(10, 30))
