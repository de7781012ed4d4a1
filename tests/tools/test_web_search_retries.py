"""The run's browser retry budget at its own layer (SPEC W-4, F-4; REFERENCE 4.10 ``RetryBudget``).

A session and the ``task`` children it delegated (``<parent>.<task_id>``) share 4 headless retries,
kept as a bulkhead of the shared state store: in memory embedded, on real Redis for a fleet (two
``RedisStateStore`` clients stand for two workers). The Chromium end of it is one test in
``test_web_search_browser.py``.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable

from kernel.state import MemoryStateStore, StateStore
from kernel.testing import FakeClock
from tools.web_search.retries import BROWSER_RETRY_BUDGET, RETRY_BUDGET_LEASE_MS, BrowserRetries
from tools.web_search.tool import run_of

RUN = ("r", "r.task-1", "r.task-2", "r.task-2.task-9")  # a parent, its children, a grandchild


def take_concurrently(
    stores: list[StateStore], sessions: tuple[str, ...], tries: int
) -> list[BrowserRetries]:
    """Every session tries ``tries`` retries at once, each through its own store (worker)."""
    budgets = [
        BrowserRetries(stores[i % len(stores)].bulkheads(), run_of(sid)) for i, sid in enumerate(sessions)
    ]
    barrier = threading.Barrier(len(budgets))

    def spend(budget: BrowserRetries) -> None:
        barrier.wait()
        for _ in range(tries):
            budget.take()

    threads = [threading.Thread(target=spend, args=(b,)) for b in budgets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return budgets


def test_w4_a_run_and_its_delegated_children_share_four_browser_retries() -> None:
    clock = FakeClock()
    store = MemoryStateStore(clock=clock)
    budgets = take_concurrently([store], RUN, tries=3)
    assert sum(b.taken for b in budgets) == BROWSER_RETRY_BUDGET == 4
    assert budgets[0].report() == {"taken": budgets[0].taken, "run_used": 4, "run_limit": 4}
    # Another run has its own budget; this one stays spent (retries are never given back)…
    other = BrowserRetries(store.bulkheads(), run_of("s.task-1"))
    assert [other.take() for _ in range(5)] == [True] * 4 + [False]
    assert not BrowserRetries(store.bulkheads(), run_of("r.task-3")).take()
    # …until the budget's lease (a day) has passed.
    clock.advance(RETRY_BUDGET_LEASE_MS / 1000 + 1)
    assert BrowserRetries(store.bulkheads(), run_of("r.task-3")).take()


def test_f4_the_run_budget_on_redis_is_shared_by_workers(redis_urls: Callable[[int], str]) -> None:
    from workers.state import RedisStateStore

    prefix = f"t-{uuid.uuid4().hex[:8]}"
    workers = [RedisStateStore.from_url(redis_urls(3), prefix=prefix) for _ in range(2)]
    try:
        budgets = take_concurrently(list(workers), RUN, tries=3)
        assert sum(b.taken for b in budgets) == 4
        assert BrowserRetries(workers[1].bulkheads(), "r").used() == 4
        assert BrowserRetries(workers[0].bulkheads(), "other-run").take()
        ttl = workers[0].client.pttl(f"{prefix}:bh:web_search:browser_retries:run:r")
        assert 0 < ttl <= RETRY_BUDGET_LEASE_MS  # Redis forgets the run's budget on its own
    finally:
        for w in workers:
            w.client.close()


def test_w4_an_unreachable_store_spends_no_retry() -> None:
    from workers.state import RedisStateStore

    dead = RedisStateStore.from_url("redis://127.0.0.1:1/0")  # nothing listens on port 1
    budget = BrowserRetries(dead.bulkheads(), "r")
    assert budget.take() is False and budget.report() == {"taken": 0, "run_used": None, "run_limit": 4}
    dead.client.close()
