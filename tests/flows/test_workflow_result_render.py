"""A workflow's (and a program's) 1 MiB result is rendered off the event loop, bounded (SPEC K-6, F-2, P-3).

The result text shows the returned value as indented JSON. Indenting uses the json module's
pure-Python encoder: ~0.3-0.6 s for 1 MiB of tiny values, and it ran on the session's event loop,
stalling every other call of the process. Now the rendering runs in a worker thread and stops once
its text passes ``MAX_PRETTY_BYTES`` (then the compact JSON, already known to fit, is shown).
Measured with the loop ticker: the longest gap the loop had while the report was built.
"""

from __future__ import annotations

import json
from typing import Any

from flows.workflow.driver import MAX_RESULT_BYTES, WorkflowOutcome
from flows.workflow.tool import report
from tests.tools.loop_ticker import while_ticking

MAX_GAP_S = 0.2


def _result_value(output: str) -> Any:
    return json.loads(output.split("Result:\n", 1)[1])


async def test_k6_f2_a_1mib_workflow_result_is_rendered_off_the_loop_and_bounded() -> None:
    """Before: the loop stood still ~0.7 s and the text was ~5 MB (indented, 1 MiB compact)."""
    value = [[[0]] for _ in range(170_000)]
    assert len(json.dumps(value, separators=(",", ":"))) <= MAX_RESULT_BYTES
    outcome = WorkflowOutcome("r1", "completed", output=value)

    async def build() -> Any:
        return await report(outcome)

    result, gap = await while_ticking(build)
    assert result.exit_code == 0
    assert _result_value(result.output) == value and result.metadata["output"] == value
    assert gap < MAX_GAP_S, f"the event loop stood still {gap:.3f} s"
    assert len(result.output.encode()) <= MAX_RESULT_BYTES + 4096


async def test_k6_f2_a_small_result_is_still_indented() -> None:
    result = await report(WorkflowOutcome("r3", "completed", output={"a": [1, 2]}))
    assert '{\n  "a": [\n    1,\n    2\n  ]\n}' in result.output
