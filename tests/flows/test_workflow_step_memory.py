"""What a run keeps of its finished steps: the form its history stores, not the whole result (SPEC F-3, F-7).

A step's task keeps its result until the run ends (a step id asked for again shares it). It used to
keep the whole ``ToolResult``: 120 steps whose results carried 1 MiB of metadata each held 458 MB
until the run ended, though the history stores their metadata compacted (≤ 256 KiB each, here a few
bytes). Now a finished step is kept as the history stores it. The driver, the real QuickJS VM and
the real file log; the steps are a recording runner whose results carry a probe object in their
metadata, so a test can see whether anything still holds a finished step's whole result.
"""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

from flows.workflow import FileEventLogs, StepCall, WorkflowDriver
from flows.workflow.driver import MAX_STEP_METADATA_BYTES
from kernel.errors import Transport
from kernel.result import ToolResult


class Probe:
    def __str__(self) -> str:
        return "probe"


class ProbingRunner:
    """Each step's result carries a large blob and a ``Probe``; each step reports how many probes of
    earlier steps are still alive when it starts."""

    def __init__(self) -> None:
        self.probes: list[weakref.ref[Probe]] = []
        self.alive_at_start: list[int] = []

    async def run_step(self, call: StepCall) -> ToolResult:
        gc.collect()
        self.alive_at_start.append(sum(ref() is not None for ref in self.probes))
        probe = Probe()
        self.probes.append(weakref.ref(probe))
        meta = {"blob": "x" * (MAX_STEP_METADATA_BYTES + 1), "probe": probe}
        if call.step_id.startswith("bad"):
            return ToolResult.failure(call.tool, Transport("x" * 100_000, op="test"), meta)
        return ToolResult.success(call.tool, f"done {call.step_id}", meta)


SRC = """async function run(wf) {
  for (let i = 0; i < 6; i++) {
    const r = await wf.step('s' + i, 'nap', {i});
    if (r.output !== 's'.replace('s', 'done s') + i) throw new Error('bad output ' + r.output);
    if (!r.metadata.compacted) throw new Error('metadata not compacted');
    try { await wf.step('bad' + i, 'nap', {i}); } catch (e) { if (e.errorKind.type !== 'transport') throw e; }
  }
  return 'ok';
}"""


async def test_f3_a_finished_step_is_kept_as_the_history_stores_it(tmp_path: Path) -> None:
    """Before: every finished step's probe (and its 256 KiB blob) stayed alive until the run ended."""
    runner = ProbingRunner()
    outcome = await WorkflowDriver(FileEventLogs(tmp_path), runner).run(SRC, {}, "mem-1")
    assert outcome.status == "completed", outcome.error
    assert outcome.output == "ok"
    assert len(runner.alive_at_start) == 12
    assert runner.alive_at_start == [0] * 12  # nothing holds an earlier step's whole result
