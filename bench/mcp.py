"""MCP benchmark (issue 10): the per-call cost of an MCP tool through the kernel over a direct call.

    python -m bench.mcp [--http] [--rounds N] [--calls N]     # target: ours <= 1.3x the direct call

Both paths use the *same* server process and the same ``mcp.ClientSession`` (the one the session's
connection holds), on the same event loop:

- **direct**: ``await client.call_tool("add", {...})`` — the SDK alone;
- **kernel**: ``await kernel.invoke_agent("mcp__b__add", {...})`` — a governed model-side call:
  resolve, schema validation, permission rule, budget, slots and deadline, the MCP spec and result
  conversion, sanitising, projection with evidence and the four events.

Rounds alternate (direct, kernel, direct, …) so load on a shared machine hits both alike; the
figure is the ratio of the medians of per-call time over the rounds. Two payloads: ``add`` (a tiny
call) and ``echo`` of 16 KiB (a result the projector hashes and the redactor scans).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from kernel import PermissionPolicy, SessionOptions

DEFAULT_ROUNDS = 30
DEFAULT_CALLS = 40
TARGET_RATIO = 1.3
ECHO_BYTES = 16 * 1024
SERVER = [sys.executable, "-m", "bench.mcp_server"]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


async def _per_call(fn: Callable[[], Awaitable[Any]], n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        await fn()
    return (time.perf_counter() - t0) / n


def _measure(
    agent: Any, session: Any, tool: str, args: dict[str, Any], rounds: int, calls: int
) -> tuple[float, float]:
    conn = session.kernel.services["mcp"].connections["b"]
    client = conn._session  # the very ClientSession the kernel path uses
    kernel = session.kernel
    name = f"mcp__b__{tool}"

    async def direct() -> Any:
        result = await client.call_tool(tool, args)
        assert not result.is_error
        return result

    async def ours() -> Any:
        result = await kernel.invoke_agent(name, args)
        assert result.exit_code == 0, result.output
        return result

    loop = agent.loop
    loop.run(_per_call(direct, calls))  # warm-up both paths
    loop.run(_per_call(ours, calls))
    d_times, k_times = [], []
    for _ in range(rounds):
        d_times.append(loop.run(_per_call(direct, calls)))
        k_times.append(loop.run(_per_call(ours, calls)))
    return statistics.median(d_times), statistics.median(k_times)


@contextlib.contextmanager
def _http_server() -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [*SERVER, "http", str(port)], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
                break
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.kill()
        proc.wait()


def run(transport: str, rounds: int, calls: int) -> list[tuple[str, float, float]]:
    from orchestrator import Agent

    rows = []
    with contextlib.ExitStack() as stack:
        if transport == "http":
            server: dict[str, Any] = {"url": stack.enter_context(_http_server())}
        else:
            server = {"command": SERVER[0], "args": SERVER[1:], "cwd": ROOT}
        tmp = stack.enter_context(tempfile.TemporaryDirectory())
        agent = stack.enter_context(Agent())
        options = SessionOptions(
            mcp_servers={"b": server},
            permission_policy=PermissionPolicy(allow=["mcp__b__*"]),
            artifact_store="memory",
        )
        session = agent.session(tmp, options)
        status = session.mcp_status()["servers"][0]
        if status["state"] != "running":
            raise SystemExit(f"bench server did not start: {status['error']}")
        for label, tool, args in (
            ("add (tiny call)", "add", {"a": 2, "b": 3}),
            (f"echo {ECHO_BYTES // 1024} KiB", "echo", {"text": "x" * ECHO_BYTES}),
        ):
            direct, ours = _measure(agent, session, tool, args, rounds, calls)
            rows.append((label, direct, ours))
        session.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--http", action="store_true", help="also measure the streamable-HTTP transport")
    parser.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS)
    parser.add_argument("--calls", type=int, default=DEFAULT_CALLS)
    ns = parser.parse_args()
    transports = ["stdio", "http"] if ns.http else ["stdio"]
    print(
        f"MCP per-call time, median of {ns.rounds} interleaved rounds of {ns.calls} calls (same server, same session)"
    )
    worst = 0.0
    for transport in transports:
        for label, direct, ours in run(transport, ns.rounds, ns.calls):
            ratio = ours / direct
            worst = max(worst, ratio)
            print(
                f"  {transport:<5} {label:<16} direct {direct * 1e3:7.3f} ms   kernel {ours * 1e3:7.3f} ms"
                f"   overhead {(ours - direct) * 1e6:7.0f} us   ratio {ratio:.2f}x"
            )
    verdict = "met" if worst <= TARGET_RATIO else "MISSED"
    print(f"worst ratio {worst:.2f}x (target <= {TARGET_RATIO}x): {verdict}")


if __name__ == "__main__":
    main()
