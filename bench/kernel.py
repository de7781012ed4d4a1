"""Kernel benchmark (issues 2 and 13): no-op invocations per second, in the loop and through the public
synchronous SDK, then projection throughput (``bench.kernel_projection``).

    python -m bench.kernel            # targets: >= 10,000 calls/s, in the loop and through session.tool

1. **Governed, in the loop**: ``kernel.invoke_agent`` awaited on the agent's loop (permission policy
   allow-rule, pre-hook surface, budget, slots, deadline, projection with evidence); an async no-op.
2. **Public sync SDK**: ``session.tool("noop", {})`` from ordinary synchronous code — what a host
   program calls. Three handlers, measured in interleaved rounds (same session, same load):
   - ``def noop(args)``: a plain handler runs on the caller's thread (``Kernel.invoke_host_inline``);
   - ``async def noop(args)``: the call is handed to the loop thread and waited for;
   - ``def noop(args)`` registered with ``inline=False``: the loop thread hands it to a worker thread
     (how every sync handler ran before issue 13).
   Each round runs ``ROUND_CALLS`` calls of each; the rate is the median round.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from typing import Any

from kernel import PermissionPolicy, SessionOptions

N_CALLS = 20_000
ROUNDS = 7
ROUND_CALLS = 3_000
TARGET = 10_000


async def _calls_per_second(session: Any, n: int) -> float:
    kernel = session.kernel
    t0 = time.perf_counter()
    for _ in range(n):
        await kernel.invoke_agent("noop", {})
    return n / (time.perf_counter() - t0)


def bench_invocations() -> float:
    from orchestrator import Agent

    with tempfile.TemporaryDirectory() as tmp, Agent() as agent:
        opts = SessionOptions(permission_policy=PermissionPolicy(allow=["noop"]), artifact_store="memory")
        session = agent.session(tmp, opts)

        async def noop(args: dict[str, Any]) -> str:
            return "ok"

        session.register_tool("noop", noop, description="no-op", parameters={"type": "object"})
        agent.loop.run(_calls_per_second(session, 2_000))  # warm-up
        rate = agent.loop.run(_calls_per_second(session, N_CALLS))
        ends = [e for e in session.events() if e.type == "tool_end"]
        assert ends and ends[-1].origin == "agent" and ends[-1].data["exit_code"] == 0
        return rate


def bench_sync_sdk(rounds: int = ROUNDS, round_calls: int = ROUND_CALLS) -> dict[str, float]:
    """Median calls/s of ``session.tool`` from synchronous code, per handler kind (interleaved)."""
    from orchestrator import Agent

    def plain(args: dict[str, Any]) -> str:
        return "ok"

    async def coroutine(args: dict[str, Any]) -> str:
        return "ok"

    kinds = {
        "sync handler (caller's thread)": ("noop_plain", plain, True),
        "async handler (loop hand-off)": ("noop_async", coroutine, True),
        "sync handler, inline=False (loop + worker thread)": ("noop_thread", plain, False),
    }
    rates: dict[str, list[float]] = {kind: [] for kind in kinds}
    with tempfile.TemporaryDirectory() as tmp, Agent() as agent:
        session = agent.session(tmp, SessionOptions(artifact_store="memory"))
        for name, fn, inline in kinds.values():
            session.register_tool(name, fn, description="no-op", parameters={"type": "object"}, inline=inline)
            for _ in range(500):  # warm-up
                session.tool(name, {})
        for _ in range(rounds):
            for kind, (name, _fn, _inline) in kinds.items():
                t0 = time.perf_counter()
                for _ in range(round_calls):
                    result = session.tool(name, {})
                rates[kind].append(round_calls / (time.perf_counter() - t0))
                assert result.exit_code == 0 and result.output == "ok"
        ends = [e for e in session.events() if e.type == "tool_end"]
        assert ends and all(e.origin == "host_direct_trusted" for e in ends)
    return {kind: statistics.median(values) for kind, values in rates.items()}


def main() -> None:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"load average {load:.1f} on {os.cpu_count()} cores")
    rate = bench_invocations()
    print(f"governed no-op invocations: {rate:,.0f}/s in the loop (target >= {TARGET:,}/s)")
    print(f"public sync SDK, session.tool from synchronous code ({ROUNDS} interleaved rounds, median):")
    for kind, value in bench_sync_sdk().items():
        flag = "ok" if value >= TARGET else "under target"
        print(f"  {kind:<50} {value:>9,.0f}/s  {1e6 / value:6.1f} us/call  {flag}")
    try:
        from bench.kernel_projection import bench_projection
    except ImportError:
        print("projection benchmark: bench/kernel_projection.py missing")
        return
    bench_projection()


if __name__ == "__main__":
    main()
