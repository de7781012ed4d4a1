"""Branch runners of the SDK's fan-out: in this process, or a remote runner kept behind host hooks (F-1, K-3).

The fan-in itself (``fan_out``, ``Branch``, ``FanOutPolicy`` …) is ``flows.fanout`` — shared with
the ``task`` tool — and is re-exported here for existing callers.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from flows.fanout import (
    MAX_BRANCHES,
    Branch,
    BranchOutcome,
    BranchRunner,
    BranchStatus,
    FanOutPolicy,
    FanOutResult,
    ProgressFn,
    fan_out,
)
from kernel.result import ToolResult

__all__ = [
    "MAX_BRANCHES",
    "Branch",
    "BranchOutcome",
    "BranchRunner",
    "BranchStatus",
    "FanOutPolicy",
    "FanOutResult",
    "HostGatedRunner",
    "InProcessRunner",
    "ProgressFn",
    "fan_out",
]


class InProcessRunner:
    """Embedded mode: each branch is a trusted host-direct call on the session's own kernel."""

    def __init__(self, kernel: Any) -> None:
        self.kernel = kernel

    async def run_branch(self, run_id: str, index: int, branch: Branch) -> ToolResult:
        return await self.kernel.invoke_host(branch.tool, branch.args)


class HostGatedRunner:
    """A remote runner whose branches keep the session's host callables (K-3 in the fleet).

    Pre-tool hooks run in this process before a branch is sent (a denial never leaves the host; a
    rewrite is what the worker receives); post-tool hooks run here on the result that comes back.
    Policy, budget and limits travel in the snapshot and are enforced by the worker's kernel.
    """

    def __init__(self, kernel: Any, remote: BranchRunner) -> None:
        self.kernel = kernel
        self.remote = remote

    async def run_branch(self, run_id: str, index: int, branch: Branch) -> ToolResult:
        admitted = await self.kernel.admit_host(branch.tool, branch.args)
        if isinstance(admitted, ToolResult):
            return admitted
        result = await self.remote.run_branch(run_id, index, dataclasses.replace(branch, args=admitted))
        return await self.kernel.post_remote(branch.tool, admitted, result)

    async def aclose(self) -> None:
        closer = getattr(self.remote, "aclose", None)
        if closer is not None:
            await closer()
