"""A program that exhausts the VM's 64 MiB is told so, typed, whatever allocation failed (SPEC K-8, P-3).

QuickJS throws ``null`` when it cannot even allocate the "out of memory" error, and the bridge's
own last allocations (the result's JSON, the ``done`` line) can be the ones that fail. Those runs
were reported as ``tool_error{stage: "deadlock"}`` ("waiting on a promise that nothing will
settle") or ``program script failed: null`` — a model told that looks for a bug that is not there.
Now each is ``budget_exhausted{resource: "memory", reason: "vm_memory"}``. Real QuickJS.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator import Agent

MEMORY = {"type": "budget_exhausted", "resource": "memory", "reason": "vm_memory"}


@pytest.mark.parametrize(
    "source",
    [
        "async function run() { return new Array(2400000).fill({}) }",  # the result's JSON
        "async function run() { return new Array(3000000).fill(0) }",
        "async function run() { const a = []; for (;;) a.push({x: a.length}) }",  # rejected with null
    ],
    ids=["result_objects", "result_numbers", "growing_array"],
)
def test_k8_p3_running_out_of_vm_memory_is_reported_as_memory(tmp_path: Path, source: str) -> None:
    with Agent() as agent:
        result = agent.session(tmp_path).program(source=source)
    assert result.exit_code == 1
    assert result.error_kind == MEMORY, result.output


def test_p3_a_script_error_is_still_the_script_s(tmp_path: Path) -> None:
    with Agent() as agent:
        result = agent.session(tmp_path).program(source="async function run() { throw new Error('mine') }")
    assert result.error_kind == {"type": "tool_error", "stage": "script"}, result.output
    assert "mine" in result.output


def test_k8_replacing_internal_error_does_not_break_the_report(tmp_path: Path) -> None:
    source = "async function run() { globalThis.InternalError = undefined; const a = []; for (;;) a.push([a.length]) }"
    with Agent() as agent:
        result = agent.session(tmp_path).program(source=source)
    assert result.error_kind == MEMORY, result.output
