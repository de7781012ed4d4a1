"""The run's browser retry budget (SPEC W-4; REFERENCE 4.10 ``RetryBudget``).

A headless engine that fails transiently is retried once, and a *run* — a session and the ``task``
children it delegated, in process or on the fleet — has ``BROWSER_RETRY_BUDGET`` (4) such retries
in all. The budget is a bulkhead of the shared state store (``kernel.state``: in memory embedded,
Redis on a fleet), named after the run the same way the search bulkhead is, whose permits are
never released: a retry spent holds its permit until the budget's lease (a day) runs out. So the
bulkhead's one atomic admission (a lock in process, a Lua script on Redis) is what bounds every
session and worker of the run together; no second counter exists. When the store cannot be
reached no retry is taken (the engine's first failure stands).
"""

from __future__ import annotations

from typing import Any

from kernel.errors import Transport
from kernel.state import BulkheadBase

BROWSER_RETRY_BUDGET = 4  # headless retries per run (W-4: bounded browser retries)
RETRY_BUDGET_LEASE_MS = 24 * 3600_000  # a run's spent retries are forgotten a day later


def budget_name(run_id: str) -> str:
    return f"web_search:browser_retries:run:{run_id}"


class BrowserRetries:
    def __init__(
        self,
        bulkheads: BulkheadBase,
        run_id: str,
        *,
        limit: int = BROWSER_RETRY_BUDGET,
        lease_ms: int = RETRY_BUDGET_LEASE_MS,
    ) -> None:
        self.bulkheads = bulkheads
        self.name = budget_name(run_id)
        self.limit = limit
        self.lease_ms = lease_ms
        self.taken = 0  # by this holder (one search)

    def take(self) -> bool:
        """Spend one retry of the run's budget; False when it is used up (or unreachable)."""
        try:
            lease = self.bulkheads.try_acquire(self.name, self.limit, lease_ms=self.lease_ms)
        except Transport:
            return False
        if lease is None:
            return False
        self.taken += 1
        return True

    def used(self) -> int | None:
        """Retries the whole run has spent (within the lease); None when the store is unreachable."""
        try:
            return self.bulkheads.holders(self.name)
        except Transport:
            return None

    def report(self) -> dict[str, Any]:
        """``browser_retries`` metadata: this search's retries and the run's."""
        return {"taken": self.taken, "run_used": self.used(), "run_limit": self.limit}
