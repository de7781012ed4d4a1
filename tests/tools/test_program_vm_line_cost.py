"""Lines from the QuickJS child are weighed by what parsing them costs, not by a flat value count
(SPEC K-6, K-8).

Before, any line of more than 262,144 JSON values was refused: 300,000 numbers (~100 ms of
``json.loads``) or the results of a ``Promise.all`` of 20,000 steps ended the run
``budget_exhausted{resource: "vm_message_values"}``. Now scalars weigh 1, arrays and objects 4,
fractions 2 and exponents 4, within 1,048,576: these arrive, container floods stay refused. Real
QuickJS through the host's channel (``run_script``).
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

from orchestrator import Agent
from tools.program import vm
from tools.program.source import prepare
from tools.program.vm import run_script

REFUSED = {"type": "budget_exhausted", "resource": "vm_message_values", "reason": "max_message_values"}


async def _run(src: str, handle: Any = None) -> Any:
    loop = asyncio.get_running_loop()

    async def no_calls(calls: list) -> list:
        return []

    job = {"profile": "program", "source": prepare(src), "inputs": {}}
    return await run_script(job, handle or no_calls, loop.time() + 120)


async def test_k8_300000_doubles_in_one_result_arrive() -> None:
    out = await _run("async function run() { return Array.from({length: 300000}, (_, i) => i / 7 + 0.1) }")
    assert out.ok, (out.kind, out.error)
    assert len(out.value) == 300_000 and out.value[7] == 1.1 and out.value[299_999] == 299_999 / 7 + 0.1


async def test_k8_a_million_integers_and_a_million_short_strings_arrive() -> None:
    ints = await _run("async function run() { return Array.from({length: 1000000}, (_, i) => i) }")
    assert ints.ok, (ints.kind, ints.error)
    assert ints.value[-1] == 999_999 and len(ints.value) == 1_000_000
    strs = await _run(
        "async function run() { return Array.from({length: 1000000}, (_, i) => 's' + (i % 1000)) }"
    )
    assert strs.ok, (strs.kind, strs.error)
    assert strs.value[-1] == "s999" and len(strs.value) == 1_000_000


async def test_k8_the_results_of_a_promise_all_of_20000_steps_arrive() -> None:
    """Two rounds of 10,000 host requests (the pending cap), then the 20,000 step results returned."""

    async def handle(calls: list) -> list:
        return [{"id": c["id"], "ok": True, "value": {"exitCode": 0, "n": c["id"]}} for c in calls]

    src = """async function run(ctx) {
      const step = i => ctx.readFile('f' + i).then(v => ({stepId: 's' + i, exitCode: v.exitCode,
                                                          output: {n: v.n, half: i / 2}, metadata: {}}));
      const a = await Promise.all(Array.from({length: 10000}, (_, i) => step(i)));
      const b = await Promise.all(Array.from({length: 10000}, (_, i) => step(10000 + i)));
      return a.concat(b);
    }"""
    out = await _run(src, handle)
    assert out.ok, (out.kind, out.error)
    assert len(out.value) == 20_000
    assert out.value[19_999] == {
        "stepId": "s19999",
        "exitCode": 0,
        "output": {"n": 20_000, "half": 9999.5},
        "metadata": {},
    }


async def test_k8_eight_mib_of_empty_arrays_is_still_refused_typed() -> None:
    """A forged JSON.stringify fills the line (the VM's 64 MiB would not hold 2.8 million arrays)."""
    src = """async function run() {
      const real = JSON.stringify;
      let first = true;
      JSON.stringify = v => { if (!first) return real(v); first = false; return '[' + '[],'.repeat(2796000) + '[]]' };
      return 1;
    }"""
    out = await _run(src)
    assert out.ok is False and out.kind == "aborted", (out.kind, out.error)
    assert out.value.to_kind() == REFUSED
    assert "1048576" in out.error


async def test_k8_a_million_empty_objects_and_deep_nesting_are_refused() -> None:
    wide = await _run("async function run() { return new Array(1000000).fill({}) }")
    assert wide.kind == "aborted" and wide.value.to_kind() == REFUSED, (wide.kind, wide.error)
    deep = await _run("async function run() { return new Array(60000).fill([[[[[[[[[[[[0]]]]]]]]]]]]) }")
    assert deep.kind == "aborted" and deep.value.to_kind() == REFUSED, (deep.kind, deep.error)
    assert "1048576" in wide.error and "1048576" in deep.error


async def test_k8_a_long_line_with_lone_surrogates_is_repaired_off_the_loop() -> None:
    """300,000 strings cut through an emoji (a 3 MB line): each lone surrogate becomes U+FFFD, the
    walk of every value now in a worker thread (before, the line was refused)."""
    out = await _run("async function run() { return new Array(300000).fill('ab😀'.slice(0, 3)) }")
    assert out.ok, (out.kind, out.error)
    assert len(out.value) == 300_000 and set(out.value) == {"ab\ufffd"}


class _SearchSpy:
    """The surrogate regex, recording on which thread each ``search`` ran."""

    def __init__(self, regex: Any) -> None:
        self.regex, self.threads = regex, []

    def search(self, data: bytes) -> Any:
        self.threads.append(threading.get_ident())
        return self.regex.search(data)


async def test_k6_a_long_line_s_surrogate_scan_runs_off_the_event_loop(monkeypatch: Any) -> None:
    """The regex looking for lone surrogates held the GIL ~40 ms over 8 MiB on the loop (an 8 MB
    string's line: longest loop gap 48-73 ms before, 24-34 ms now). Now it runs only when a ``\\u``
    escape or a surrogate's UTF-8 lead byte is in the line at all, and for a long line in the
    worker thread that weighs it; a lone surrogate there is still repaired."""
    spy = _SearchSpy(vm._SURROGATE_HINT)
    monkeypatch.setattr(vm, "_SURROGATE_HINT", spy)
    loop_thread = threading.get_ident()
    plain = await _run("async function run() { return 'x'.repeat(600000) }")
    assert plain.ok and plain.value == "x" * 600_000
    lone = await _run("async function run() { return 'x'.repeat(600000) + '\\ud800' }")
    assert lone.ok and lone.value == "x" * 600_000 + "\ufffd"
    assert spy.threads and loop_thread not in spy.threads, "the surrogate regex ran on the event loop"


def test_k8_p3_a_program_s_promise_all_of_20000_steps_sends_300000_numbers_to_a_tool(tmp_path: Path) -> None:
    """Through the real ``program`` tool. Before the cost bound, the call's line (300,000 values)
    ended the run ``budget_exhausted{vm_message_values}``; now the tool answers (here ``ls`` refuses
    the extra argument: its schema check). A program's own result stays bounded by its 1 MiB
    indented size (``max_script_result_bytes``), which 300,000 numbers exceed whatever the line costs."""
    src = """async function run(ctx) {
      const rows = await Promise.all(Array.from({length: 20000}, async (_, i) => { await null; return Array(15).fill(i % 10) }));
      const r = await ctx.tool('ls', {path: '.', numbers: rows.flat()});
      return {rows: rows.length, exitCode: r.exitCode, output: r.output};
    }"""
    with Agent() as agent:
        result = agent.session(tmp_path).program(source=src)
    assert result.exit_code == 0, result.output
    value = result.metadata["script_result"]
    assert value["rows"] == 20_000 and value["exitCode"] == 1
    assert "/numbers: additional property is not allowed" in value["output"]


def test_k8_f7_a_workflow_returning_300000_numbers_succeeds(tmp_path: Path) -> None:
    """Through the real ``dynamic_workflow`` tool (its result bound is 1 MiB of compact JSON).
    Before the cost bound: ``budget_exhausted{vm_message_values}``."""
    with Agent() as agent:
        result = agent.session(tmp_path).workflow(
            source="async function run(wf, input) { return Array.from({length: 300000}, (_, i) => i % 10) }",
            input={},
        )
    assert result.exit_code == 0, result.output
    assert result.metadata["output"] == [i % 10 for i in range(300_000)]


def test_k8_f7_a_workflow_returning_a_promise_all_of_20000_steps_succeeds(tmp_path: Path) -> None:
    """20,000 awaited steps of 16 values each (320,000): refused before the cost bound, now returned."""
    src = """async function run(wf, input) {
      return await Promise.all(Array.from({length: 20000}, async (_, i) => {
        await null;
        return {k: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, i % 7]};
      }));
    }"""
    with Agent() as agent:
        result = agent.session(tmp_path).workflow(source=src, input={})
    assert result.exit_code == 0, result.output
    value = result.metadata["output"]
    assert len(value) == 20_000 and value[19_999] == {"k": [0] * 11 + [19_999 % 7]}
