"""In-memory shared state (SPEC W-3, W-4, F-3, F-4) for embedded mode: pure, thread-safe and usable
from several event loops at once. The behavioural suites shared with Redis are in
tests/workers/test_state_*.py; this file covers what only the memory store must promise."""

from __future__ import annotations

import ast
import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import kernel.state
from kernel.state import BreakerConfig, BreakerScope, Claimed, MemoryStateStore, Outcome, Permit, StepKey

FORBIDDEN = {"redis", "celery", "kombu", "fakeredis", "tools", "workers", "orchestrator", "flows"}


def test_f4_kernel_state_is_pure() -> None:
    imported = set()
    trees = [ast.parse(p.read_text()) for p in Path(kernel.state.__file__).parent.glob("*.py")]
    for node in (n for tree in trees for n in ast.walk(tree)):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert imported and not imported & FORBIDDEN


def test_w4_threads_never_over_admit_a_memory_bulkhead() -> None:
    bulkheads = MemoryStateStore().bulkheads()
    lock = threading.Lock()
    holding = peak = 0

    def worker() -> None:
        nonlocal holding, peak
        for _ in range(20):
            lease = bulkheads.acquire_blocking("search", 2, timeout_s=10)
            with lock:
                holding += 1
                peak = max(peak, holding)
            time.sleep(0.001)
            with lock:
                holding -= 1
            bulkheads.release(lease)

    with ThreadPoolExecutor(6) as pool:
        for f in [pool.submit(worker) for _ in range(6)]:
            f.result()
    assert peak == 2 and bulkheads.holders("search") == 0


def test_w3_threads_racing_a_half_open_breaker_get_exactly_the_probe_count() -> None:
    store = MemoryStateStore()
    b = store.breakers(BreakerScope("fleet"), BreakerConfig(transient_open_ms=50, probe_limit=2))
    got = b.acquire("ddg")
    assert isinstance(got, Permit)
    b.record(got, Outcome.failure("rate_limited"))
    time.sleep(0.06)
    barrier = threading.Barrier(8)

    def race() -> int:
        barrier.wait()
        return sum(1 for _ in range(50) if isinstance(b.acquire("ddg"), Permit))

    with ThreadPoolExecutor(8) as pool:
        assert sum(pool.map(lambda _: race(), range(8))) == 2


def test_f3_threads_racing_one_step_claim_it_once() -> None:
    steps = MemoryStateStore().steps()
    key = StepKey("run", "q", "s")
    barrier = threading.Barrier(8)

    def claim() -> object:
        barrier.wait()
        return steps.claim(key)

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda _: claim(), range(8)))
    claims = [r for r in results if isinstance(r, Claimed)]
    assert len(claims) == 1 and claims[0].attempt == 1
    assert all(getattr(r, "attempt", None) == 1 for r in results)  # the others saw it busy


def test_w4_one_flight_is_shared_across_event_loops_in_different_threads() -> None:
    co = MemoryStateStore().coalescer()
    calls = 0

    async def search() -> str:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0.2)
        return "hits"

    def in_own_loop() -> object:
        return asyncio.run(co.run("q", search))

    with ThreadPoolExecutor(3) as pool:
        outs = list(pool.map(lambda _: in_own_loop(), range(3)))
    assert calls == 1
    assert sorted(o.role for o in outs) == ["leader", "shared", "shared"]
