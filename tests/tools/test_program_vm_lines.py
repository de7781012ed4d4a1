"""A line from the QuickJS child is counted before it is parsed (SPEC K-6, K-8, P-3).

A script controls every value it sends: ``return new Array(2e6).fill([])`` is one 6 MiB line that
``json.loads`` turns into two million lists — ~156 MB more host memory and 0.23-0.73 s with the
event loop stopped (it holds the GIL). Now a line whose parse would cost more than ``MAX_LINE_COST``
(values 1, containers 4, fractions 2, exponents 4) is refused typed before it is parsed, weighed off
the loop. Real QuickJS; the memory probe runs the host in a
separate process with an address-space cap.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

from orchestrator import Agent
from tools.program.linevalues import MAX_LINE_COST, line_cost, within_cost_cap
from tools.program.source import prepare
from tools.program.vm import run_script

ROOT = Path(__file__).resolve().parents[2]
CAP_BYTES = 3 * 1024**3

HOST = """
import asyncio, json, resource, sys
from tools.program.source import prepare
from tools.program.vm import run_script
from tests.tools.loop_ticker import while_ticking

async def main():
    loop = asyncio.get_running_loop()

    async def handle(calls):
        return []

    def job(src):
        return {"profile": "program", "source": prepare(src), "inputs": {}}

    warm = await run_script(job("async function run() { return 1 }"), handle, loop.time() + 30)
    assert warm.ok, warm
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    big = job("async function run() { return new Array(2000000).fill([]) }")
    out, gap = await while_ticking(lambda: run_script(big, handle, loop.time() + 60))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    print(json.dumps({"ok": out.ok, "kind": out.kind, "error_kind": out.value.to_kind() if out.kind == "aborted" else None,
                      "gap_s": gap, "grew_mb": peak - base}), flush=True)

asyncio.run(main())
"""


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (CAP_BYTES, CAP_BYTES))


def test_k6_k8_a_line_of_two_million_tiny_values_is_refused_unparsed_and_off_the_loop() -> None:
    """Before: ok, the host grew 156 MB and the loop stood still 0.73 s; now refused typed,
    the host grows ~12 MB and the loop's longest gap is ~0.03 s."""
    out = subprocess.run(
        [sys.executable, "-c", HOST],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        timeout=180,
        preexec_fn=_limit,
    )
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    assert lines, out.stderr[-2000:]
    report = json.loads(lines[-1])
    assert report["ok"] is False and report["kind"] == "aborted", report
    assert report["error_kind"] == {
        "type": "budget_exhausted",
        "resource": "vm_message_values",
        "reason": "max_message_values",
    }
    assert report["grew_mb"] < 60, report
    assert report["gap_s"] < 0.15, report


def test_k8_p3_the_program_tool_reports_the_refusal_typed(tmp_path: Path) -> None:
    with Agent() as agent:
        s = agent.session(tmp_path)
        result = s.program(source="async function run() { return new Array(400000).fill({}) }")
    assert result.exit_code == 1
    assert result.error_kind == {
        "type": "budget_exhausted",
        "resource": "vm_message_values",
        "reason": "max_message_values",
    }, result.output


def test_p3_a_long_line_whose_separators_are_inside_strings_still_parses(tmp_path: Path) -> None:
    """800 kB of ``,[{:`` in one string: over the cheap bound, under the exact count."""
    with Agent() as agent:
        s = agent.session(tmp_path)
        result = s.program(source="async function run() { return {s: ',[{:'.repeat(200000)} }")
    assert result.exit_code == 0, result.output
    assert result.metadata["script_result"]["s"] == ",[{:" * 200_000


def test_k8_the_cost_is_an_upper_bound_and_stops_past_the_cap() -> None:
    # 3 commas (one quoted), 2 colons, 1 [ and 2 { (4 each), 1 + the line: 18; exact count 17.
    assert line_cost('{"a":[1,2,{"b":"x,y"}]}') == 18
    many = "[" + ",".join(['","'] * MAX_LINE_COST) + "]"  # the quoted commas push the cheap bound over
    assert MAX_LINE_COST < line_cost(many) <= MAX_LINE_COST + 1100  # stops within _FLUSH strings
    assert within_cost_cap(many.encode()) is None
    text = '{"t":"done","s":"' + ",,,," * MAX_LINE_COST + '"}'
    assert within_cost_cap(text.encode()) == text


def test_k8_the_weights_values_containers_fractions_exponents() -> None:
    """A scalar weighs 1, ``[``/``{`` 4, a fraction's ``.`` 2, an exponent 4; ``true``/``false`` are
    scalars (their ``e`` is not an exponent), and text inside strings is not weighed (exact pass)."""
    assert line_cost("[1,2,3]") == 1 + 2 + 4
    assert line_cost("[true,false,null]") == 1 + 2 + 4
    assert line_cost("[1.5,2e+300,3.0E-5,4e7]") == 1 + 3 + 4 + 2 * 2 + 4 * 3
    assert line_cost("[{},[]]") == 1 + 1 + 4 * 3
    assert line_cost("[" + ",".join(["0"] * 1_000_000) + "]") <= MAX_LINE_COST  # a million numbers
    assert line_cost("[" + ",".join(["1.5"] * 400_000) + "]") > MAX_LINE_COST  # ~74 ms on their own
    assert line_cost("[" + ",".join(["{}"] * 1_000_000) + "]") > MAX_LINE_COST
    # Weighed exactly, outside strings: e, true, dots and brackets inside strings are free.
    text = '["' + "true.e[{" * 200_000 + '",' + ",".join(["1"] * 100) + "]"
    assert line_cost(text) == 1 + 100 + 4


async def test_k6_a_long_line_is_parsed_without_setting_off_the_cyclic_collector() -> None:
    """8,000 arrays nested 12 deep (a 200 kB line, within the caps) make ~100,000 lists: parsed with
    the collector on, that set off ~140 collections mid-parse — in a session's heap up to 0.12 s
    of the event loop (gen-2 passes over the whole heap). JSON makes no cycles: now none run."""
    loop = asyncio.get_running_loop()

    async def handle(calls: list) -> list:
        return []

    def job(src: str) -> dict:
        return {"profile": "program", "source": prepare(src), "inputs": {}}

    assert (await run_script(job("async function run() { return 1 }"), handle, loop.time() + 30)).ok
    started: list[int] = []

    def count(phase: str, info: dict) -> None:
        if phase == "start":
            started.append(info["generation"])

    nested = "async function run() { return new Array(8000).fill([[[[[[[[[[[[0]]]]]]]]]]]]) }"
    gc.callbacks.append(count)
    try:
        out = await run_script(job(nested), handle, loop.time() + 30)
    finally:
        gc.callbacks.remove(count)
    assert out.ok and len(out.value) == 8000
    assert len(started) < 20, f"{len(started)} collections during the run"


def test_k8_exponents_are_counted_across_the_regex_slices() -> None:
    """The exponent search runs by 256 KiB slices (a regex holds the GIL for its whole search): an
    ``e1`` across a slice boundary is counted once, not twice nor never."""
    for pad in range(256 * 1024 - 3, 256 * 1024 + 2):
        text = "[" + "0" * pad + ",1e1]"
        assert line_cost(text) == 1 + 1 + 4 + 4, pad
