"""A fleet workflow step's branch index is a free slot of its run, not a session-wide count (SPEC F-1, F-5, F-7).

``BranchStepRunner`` numbered steps with one counter per session: a long-lived session (a host
running workflow after workflow) passed the job envelope's ``MAX_BRANCH_INDEX`` (100 000) and every
later step was refused. Now a step takes the lowest index its run has free, so indexes stay below
the run's step limit. A recording runner stands in for the fleet.
"""

from __future__ import annotations

import asyncio

from flows.workflow.driver import MAX_CONCURRENT_STEPS, StepCall
from kernel.result import ToolResult
from orchestrator.dispatch_workflow import BranchStepRunner
from orchestrator.fanout import Branch


class Held:
    """Records each branch's (run, index) and holds it until released."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, int]] = []
        self.gates: dict[tuple[str, int], asyncio.Event] = {}

    async def run_branch(self, run_id: str, index: int, branch: Branch) -> ToolResult:
        self.seen.append((run_id, index))
        gate = self.gates.setdefault((run_id, index), asyncio.Event())
        await gate.wait()
        del self.gates[(run_id, index)]
        return ToolResult.success(branch.tool, f"{run_id}:{index}")

    def release(self, run_id: str, index: int) -> None:
        self.gates[(run_id, index)].set()


def _call(run_id: str, step: str) -> StepCall:
    return StepCall(run_id, step, "nap", {"ms": 1}, "q", 1)


async def test_f7_sequential_steps_reuse_their_runs_first_slot() -> None:
    """Before: 0, 1, 2, … for every step of every run of the session."""
    runner = Held()
    steps = BranchStepRunner(runner)
    for n in range(300):
        run_id = f"run-{n % 3}"
        task = asyncio.ensure_future(steps.run_step(_call(run_id, f"s{n}")))
        await asyncio.sleep(0)
        runner.release(run_id, 0)
        assert (await task).output == f"{run_id}:0"
    assert {index for _, index in runner.seen} == {0}


async def test_f7_concurrent_steps_take_the_lowest_free_slots_of_their_run() -> None:
    runner = Held()
    steps = BranchStepRunner(runner)
    first = [asyncio.ensure_future(steps.run_step(_call("a", f"s{i}"))) for i in range(MAX_CONCURRENT_STEPS)]
    other = asyncio.ensure_future(steps.run_step(_call("b", "t0")))
    await asyncio.sleep(0)
    assert sorted(i for r, i in runner.seen if r == "a") == list(range(MAX_CONCURRENT_STEPS))
    assert ("b", 0) in runner.seen  # another run's slots are its own
    runner.release("a", 5)
    assert (await first[5]).output == "a:5"
    again = asyncio.ensure_future(steps.run_step(_call("a", "late")))
    await asyncio.sleep(0)
    assert runner.seen[-1] == ("a", 5)  # the freed slot, not MAX_CONCURRENT_STEPS
    for index in range(MAX_CONCURRENT_STEPS):  # slot 5 is the late step's now
        runner.release("a", index)
    runner.release("b", 0)
    await asyncio.gather(*first[:5], *first[6:], other, again)
