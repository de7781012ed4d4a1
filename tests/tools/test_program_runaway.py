"""A program's catastrophic regex ends as a runaway, not at its deadline (SPEC P-1, K-6).

QuickJS's regex engine never checks the VM's interrupt, so ``set_time_limit`` cannot stop
``/(a+)+$/.test('a'.repeat(40) + 'b')``: a program ran it at full CPU until the host killed the
child at ``timeoutMs`` (up to 1 h). Workflows avoided it with a slice cap between host requests
and the child's CPU fence (a soft ``RLIMIT_CPU`` a slice ahead); programs now get the same
(``PROGRAM_SLICE_MS``, lowered here to keep the test short). Real QuickJS.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import tools.program as program
from orchestrator import Agent

RUNAWAY = {"type": "budget_exhausted", "resource": "cpu", "reason": "runaway_script"}


def test_p1_k6_a_catastrophic_regex_in_a_program_is_a_runaway_not_a_run_to_the_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(program, "PROGRAM_SLICE_MS", 1000, raising=False)
    with Agent() as agent:
        s = agent.session(tmp_path)
        started = time.monotonic()
        result = s.program(
            source="async function run() { return /(a+)+$/.test('a'.repeat(40) + 'b') }",
            limits={"timeout_ms": 30000},
        )
        took = time.monotonic() - started
    assert result.exit_code == 1
    assert result.error_kind == RUNAWAY, result.output
    assert took < 15, f"ran {took:.1f} s of a 30 s deadline"


def test_p1_a_js_loop_without_a_tool_call_past_the_slice_is_a_runaway_and_tool_calls_reset_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(program, "PROGRAM_SLICE_MS", 1000, raising=False)
    with Agent() as agent:
        s = agent.session(tmp_path)
        spin = s.program(source="async function run() { for (;;) {} }", limits={"timeout_ms": 30000})
        assert spin.error_kind == RUNAWAY, spin.output
        # 0.6 s of work between tool calls, three times: 1.8 s in all, never a slice at once.
        paced = s.program(
            source="""async function run(ctx) {
              for (let i = 0; i < 3; i++) {
                const end = Date.now() + 600; while (Date.now() < end) {}
                await ctx.tool('ls', {});
              }
              return 'ok';
            }""",
            limits={"timeout_ms": 30000},
        )
    assert paced.exit_code == 0 and paced.metadata["script_result"] == "ok", paced.output
