"""Fan-out: up to 32 branches of one run, with our own fan-in (SPEC X-3 shape, F-1).

A branch is one tool call (``tool``, ``args``) with a ``description``; a run fans them out through a
``Dispatcher`` — in process here, Celery jobs in the fleet — and fans them in itself:

- without ``allow_partial_failure`` the first failed branch fails the run and cancels the rest;
- with it, ``min_success_count`` (1 … n) returns as soon as that many branches succeeded and cancels
  the others;
- ``timeout_ms`` bounds the whole run: finished branches are kept, unfinished ones are cancelled and
  reported ``timed_out``;
- cancelled branches are *settled* (their cancellation has completed) before the terminal state is
  published, and closing the session cancels every branch.

Branches are never replayed here on the strength of error text: retries belong to the tools and
providers that have typed evidence a retry is safe.

It lives in ``flows/`` because both sides use it: the orchestrator's ``session.fan_out`` and the
``task`` tool's children (``flows.task``), which run in an orchestrator, embedded, or on a worker.
The runners that reach the fleet stay in ``orchestrator/`` (``orchestrator.fanout``, ``dispatch``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from kernel.errors import InvalidArgument, ToolError, error_from_exception
from kernel.result import ToolResult

log = logging.getLogger(__name__)

MAX_BRANCHES = 32
BranchStatus = Literal["succeeded", "failed", "cancelled", "timed_out"]


@dataclass(frozen=True)
class Branch:
    tool: str
    args: dict[str, Any]
    description: str = ""
    # A workflow step names its own idempotency key (stable across driver restarts) and its Flower
    # label (the step id); plain fan-out branches use ``<run_id>:<index>`` for both.
    key: str | None = None
    label: str | None = None
    # Set by the session's budget on a branch it sends to a worker: all the call may spend there
    # (``kernel.budget.Allotment.to_json``).
    allotment: dict[str, int | None] | None = None


@dataclass
class BranchOutcome:
    index: int
    description: str
    status: BranchStatus
    result: ToolResult | None
    duration_ms: int

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "description": self.description,
            "status": self.status,
            "duration_ms": self.duration_ms,
            "result": self.result.to_json() if self.result else None,
        }


@dataclass
class FanOutResult:
    run_id: str
    status: Literal["complete", "partial", "failed", "cancelled"]
    outcomes: list[BranchOutcome] = field(default_factory=list)

    @property
    def succeeded(self) -> int:
        return sum(o.status == "succeeded" for o in self.outcomes)

    @property
    def failed_indexes(self) -> list[int]:
        return [o.index for o in self.outcomes if o.status != "succeeded"]

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "status": self.status,
            "outcomes": [o.to_json() for o in self.outcomes],
        }


@dataclass(frozen=True)
class FanOutPolicy:
    allow_partial_failure: bool = False
    min_success_count: int | None = None
    timeout_ms: int | None = None
    max_parallel: int = MAX_BRANCHES

    def check(self, n: int) -> None:
        if not 1 <= n <= MAX_BRANCHES:
            raise InvalidArgument(f"a fan-out takes 1 to {MAX_BRANCHES} branches, got {n}")
        if self.min_success_count is not None:
            if not self.allow_partial_failure:
                raise InvalidArgument("min_success_count is only allowed with allow_partial_failure: true")
            if not 1 <= self.min_success_count <= n:
                raise InvalidArgument(f"min_success_count must be between 1 and the number of branches ({n})")
        if self.timeout_ms is not None and self.timeout_ms < 1:
            raise InvalidArgument("timeout_ms must be >= 1")


ProgressFn = Callable[[BranchOutcome], None]


class BranchRunner(Protocol):
    """How one branch runs: in this process, or as a Celery job on a worker."""

    async def run_branch(self, run_id: str, index: int, branch: Branch) -> ToolResult: ...


async def fan_out(
    runner: BranchRunner,
    run_id: str,
    branches: list[Branch],
    policy: FanOutPolicy,
    progress: ProgressFn | None = None,
) -> FanOutResult:
    """Run ``branches`` through ``runner`` with the fan-in rules of the module docstring."""
    policy.check(len(branches))
    n = len(branches)
    outcomes: list[BranchOutcome | None] = [None] * n
    gate = asyncio.Semaphore(max(1, min(policy.max_parallel, MAX_BRANCHES)))
    enough = asyncio.Event()
    need = policy.min_success_count if policy.allow_partial_failure else None
    started: dict[int, float] = {}

    async def one(i: int) -> None:
        async with gate:
            started[i] = time.monotonic()
            try:
                result = await runner.run_branch(run_id, i, branches[i])
            except ToolError as err:  # the dispatcher itself failed (e.g. broker down): typed, per branch
                result = ToolResult.failure(branches[i].tool, err)
            except Exception as exc:  # a runner's own defect: this branch fails typed, the others go on (K-8)
                log.error("fan-out branch %d (%s) runner raised", i, branches[i].tool, exc_info=exc)
                result = ToolResult.failure(branches[i].tool, error_from_exception(exc, branches[i].tool))
        status: BranchStatus = "succeeded" if result.exit_code == 0 else "failed"
        outcome = BranchOutcome(i, branches[i].description, status, result, _ms_since(started[i]))
        outcomes[i] = outcome
        if progress:
            progress(outcome)
        if status == "failed" and not policy.allow_partial_failure:
            enough.set()
        if need is not None and sum(o is not None and o.status == "succeeded" for o in outcomes) >= need:
            enough.set()

    loop = asyncio.get_running_loop()
    tasks = [asyncio.create_task(one(i), name=f"{run_id}:{i}") for i in range(n)]
    waiter = asyncio.create_task(enough.wait())
    deadline = None if policy.timeout_ms is None else loop.time() + policy.timeout_ms / 1000
    cancelled_by_caller = False
    hit_deadline = False
    try:
        while not enough.is_set():
            live = [t for t in tasks if not t.done()]
            if not live:
                break
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                hit_deadline = True
                break
            await asyncio.wait([*live, waiter], timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        cancelled_by_caller = True
    finally:
        waiter.cancel()
        for t in tasks:
            if not t.done():
                t.cancel()
        # Settle: every cancelled branch has finished cancelling before we publish a terminal state.
        await asyncio.gather(*tasks, return_exceptions=True)
    timed_out = hit_deadline and not cancelled_by_caller
    final: list[BranchOutcome] = []
    for i, o in enumerate(outcomes):
        if o is not None:
            final.append(o)
            continue
        status: BranchStatus = "timed_out" if timed_out else "cancelled"
        final.append(BranchOutcome(i, branches[i].description, status, None, _ms_since(started.get(i))))
    result = FanOutResult(run_id, _terminal(final, policy, cancelled_by_caller), final)
    if cancelled_by_caller:
        raise asyncio.CancelledError
    return result


def _terminal(
    outcomes: list[BranchOutcome], policy: FanOutPolicy, cancelled: bool
) -> Literal["complete", "partial", "failed", "cancelled"]:
    if cancelled:
        return "cancelled"
    ok = sum(o.status == "succeeded" for o in outcomes)
    if ok == len(outcomes):
        return "complete"
    if not policy.allow_partial_failure:
        return "failed"
    need = policy.min_success_count or 1
    return "partial" if ok >= need else "failed"


def _ms_since(t0: float | None) -> int:
    return 0 if t0 is None else int((time.monotonic() - t0) * 1000)
