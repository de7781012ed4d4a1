"""``program`` speed: start-to-first-tool-call latency, and nested-call cost against ``session.tool``.

Targets (issue 11): the first tool call of a script starts ≤ 50 ms after ``session.program(...)`` is
called; a nested call made by a script costs ≤ 1.5× a direct ``session.tool(...)`` call of the same
tool. Both go through the public path a user calls (``session.program`` / ``session.tool``) on one
embedded session, interleaved round by round.

- *latency*: a host tool records when it starts; the script's first statement calls it. Measured
  with the warm pool (the steady state of a session running programs one after another: the pool
  refills between programs) and cold (no pool: a fresh ``python`` per program).
- *per-call cost*: a script making ``CALLS`` sequential ``read`` calls of a small file, minus the
  same script making none, divided by ``CALLS``; against ``CALLS`` sequential ``session.tool("read")``
  calls from a host thread, divided by ``CALLS``.

Run: ``python -m bench.program``.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from orchestrator import Agent
from tools._children import kill
from tools.program import pool as vm_pool

ROUNDS = 15
CALLS = 200
LATENCY_TARGET_MS = 50.0
RATIO_TARGET = 1.5
POOL_REFILL_S = 0.4  # pause between programs so the warm pool refills, as between model turns


def _latency(session: Any, marks: list[float]) -> float:
    marks.clear()
    t0 = time.perf_counter()
    result = session.program(source="async function run(ctx) { await ctx.tool('mark', {}) }")
    assert result.exit_code == 0, result.output
    return (marks[0] - t0) * 1000


def _program_calls(session: Any, n: int) -> float:
    src = f"async function run(ctx) {{ for (let i = 0; i < {n}; i++) await ctx.read('small.txt'); }}"
    t0 = time.perf_counter()
    result = session.program(source=src, limits={"maxToolCalls": max(1, n)})
    elapsed = time.perf_counter() - t0
    assert result.exit_code == 0, result.output
    return elapsed


def _direct_calls(session: Any, n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        assert session.tool("read", {"file_path": "small.txt"}).exit_code == 0
    return time.perf_counter() - t0


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp, Agent() as agent:
        Path(tmp, "small.txt").write_text("".join(f"line {i}\n" for i in range(20)))
        session = agent.session(tmp)
        marks: list[float] = []
        session.register_tool(
            "mark",
            lambda _args: marks.append(time.perf_counter()) or "ok",
            description="records when it runs",
            parameters={"type": "object"},
        )
        _latency(session, marks)  # warm up the pool, the kernel and the schema caches
        warm, cold, per_program, per_direct = [], [], [], []
        default_size = vm_pool.pool().size
        for _ in range(ROUNDS):
            time.sleep(POOL_REFILL_S)
            warm.append(_latency(session, marks))
            vm_pool.pool().size = 0
            vm_pool.pool().shutdown()
            cold.append(_latency(session, marks))
            vm_pool.pool().size = default_size
            vm_pool.pool().take().add_done_callback(lambda f: _release(f))  # start refilling
            time.sleep(POOL_REFILL_S)
            base = _program_calls(session, 0)
            time.sleep(POOL_REFILL_S)
            many = _program_calls(session, CALLS)
            per_program.append((many - base) / CALLS * 1e6)
            per_direct.append(_direct_calls(session, CALLS) / CALLS * 1e6)
        w, c = statistics.median(warm), statistics.median(cold)
        p, d = statistics.median(per_program), statistics.median(per_direct)
        print(
            f"start-to-first-tool-call, warm pool: median {w:.1f} ms (p90 {_p90(warm):.1f} ms) "
            f"target <= {LATENCY_TARGET_MS:.0f} ms: {'met' if w <= LATENCY_TARGET_MS else 'MISSED'}"
        )
        print(f"start-to-first-tool-call, cold (no pool): median {c:.1f} ms (p90 {_p90(cold):.1f} ms)")
        ratio = p / d
        print(
            f"nested read via program: {p:.0f} us/call; session.tool('read'): {d:.0f} us/call; "
            f"ratio {ratio:.2f}x (target <= {RATIO_TARGET}x: {'met' if ratio <= RATIO_TARGET else 'MISSED'})"
        )


def _release(fut: Any) -> None:
    """The child taken only to trigger a refill is not used: kill it."""
    if fut.exception() is None:
        proc = fut.result()
        kill(proc)
        vm_pool.discard(proc)


def _p90(values: list[float]) -> float:
    return sorted(values)[int(len(values) * 0.9) - 1]


if __name__ == "__main__":
    main()
