"""Kernel benchmark (issue 2): governed no-op invocations per second in process, and projection
throughput on a 10 MiB output under both presets as a ratio to ``hashlib.sha256`` of the same bytes.

    python -m bench.kernel            # targets: >= 10,000 calls/s on one core; projection <= 3x sha256

Governed = the model-side gate runs (permission policy allow-rule, pre-hook surface, budget, slots,
deadline, projection with evidence); the no-op tool is an async host tool returning "ok".
"""

from __future__ import annotations

import tempfile
import time
from typing import Any

from kernel import PermissionPolicy, SessionOptions

N_CALLS = 20_000


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
        agent._loop.run(_calls_per_second(session, 2_000))  # warm-up
        rate = agent._loop.run(_calls_per_second(session, N_CALLS))
        ends = [e for e in session.events() if e.type == "tool_end"]
        assert ends and ends[-1].origin == "agent" and ends[-1].data["exit_code"] == 0
        return rate


def main() -> None:
    rate = bench_invocations()
    print(f"governed no-op invocations: {rate:,.0f}/s in process (target >= 10,000/s)")
    try:
        from bench.kernel_projection import bench_projection
    except ImportError:
        print("projection benchmark: bench/kernel_projection.py missing")
        return
    bench_projection()


if __name__ == "__main__":
    main()
