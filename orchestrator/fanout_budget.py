"""The session's budget around a remote runner: every branch sent to a worker is admitted and counted
here, where the session lives (SPEC K-3, F-1).

A worker restores the session from a snapshot and counts in its own copy, cached per process: before
this, nothing it spent came back, so the session's count never moved and a 4-call budget let any
number of fan-out branches, direct calls or workflow steps run. Now each branch is *held* on the
session's budget before its job is sent (``BudgetTracker.hold_call``: concurrent branches see it,
the snapshot its worker starts from does not, so the worker's own count never runs ahead of the
session's) — refused ``budget_exhausted`` otherwise, with nothing sent, as embedded — and settled
when it ends: with what the worker reports the call spent (``a3s_fleet.spent``: the call, its output
bytes, its nested calls', a ``task``'s children's), or, lacking a report, the call and its output
bytes. A branch that never returns (cancelled, worker lost, transport failure) releases its hold and
is charged the one call: the job may have run.

The worker's copy of the budget knows nothing of the session's other calls in flight, so each job
also carries its ``Allotment`` (``BudgetTracker.hold_call``): the call alone, or for a tool that
``delegates`` — makes nested calls (``batch``, ``program``, ``dynamic_workflow``), runs children
(``task``) or asks a model (``generate_object``) — all that is left, held for it. Before, two
``batch`` branches in flight could each spend the whole remainder on their children.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from flows.fanout import Branch, BranchRunner
from flows.task.settle import known_spend, reported_usage, total
from kernel.budget import USAGE_KEYS
from kernel.kernel import Kernel
from kernel.result import ToolResult


class BudgetedRunner:
    """``BranchRunner`` that admits each branch on the session's budget before ``remote`` runs it."""

    def __init__(self, kernel: Kernel, remote: BranchRunner) -> None:
        self.kernel = kernel
        self.remote = remote

    async def run_branch(self, run_id: str, index: int, branch: Branch) -> ToolResult:
        held = self.kernel.hold_remote(branch.tool, branch.args)
        if isinstance(held, ToolResult):
            return held  # refused, released and charged as embedded
        result: ToolResult | None = None
        try:
            allotment = held.allotment.to_json() if held.allotment is not None else None
            result = await self.remote.run_branch(run_id, index, replace(branch, allotment=allotment))
            return result
        finally:
            self.kernel.budget.settle(held, branch_spend(result))

    async def aclose(self) -> None:
        closer = getattr(self.remote, "aclose", None)
        if closer is not None:
            await closer()


def branch_spend(result: ToolResult | None) -> dict[str, int]:
    """What a branch spent of the session's budget (see the module docstring)."""
    if result is None:  # cancelled or failed to dispatch: the job may have run
        return {"tool_calls": 1}
    meta = result.metadata if isinstance(result.metadata, dict) else {}
    fleet = meta.get("a3s_fleet")
    reported = fleet.get("spent") if isinstance(fleet, Mapping) else None
    if isinstance(reported, Mapping):
        return {k: _count(reported.get(k)) for k in USAGE_KEYS}
    # No report (the job never reached the kernel, or an older worker): the call and its output,
    # and what a `task` call's children say they spent.
    spent = [known_spend(usage) for usage in reported_usage(meta.get("tasks")).values()]
    out = total([{"tool_calls": 1, "output_bytes": len(result.output.encode("utf-8", "surrogatepass"))}])
    children = total(s for s in spent if s is not None)
    return {k: out[k] + children[k] for k in out}


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
