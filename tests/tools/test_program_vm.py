"""The QuickJS child process itself: no orphans, one script per child (SPEC P-3, K-6).

The host process is a real separate Python process here, so the test can SIGKILL it the way an
operator or the OOM killer would, and then look for survivors.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tools.program import vm

ROOT = Path(__file__).resolve().parents[2]

HOST = """
import json, sys, threading, time
from orchestrator import Agent
from tools.program import vm

agent = Agent()
session = agent.session(sys.argv[1])
session.register_tool("block", lambda args: time.sleep(3600) or "x", description="blocks", parameters={"type": "object"})

def report():
    while not vm.active_pids():
        time.sleep(0.01)
    idle = [f.result(timeout=30).pid for f in list(vm.pool()._idle)]
    print(json.dumps({"active": sorted(vm.active_pids()), "idle": idle}), flush=True)

threading.Thread(target=report, daemon=True).start()
session.program(source="async function run(ctx) { await ctx.tool('block', {}) }", limits={"timeoutMs": 600000})
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


def test_p3_vm_children_die_with_a_sigkilled_host(workspace: Path) -> None:
    """Running and warm pooled children are tied to the host: PR_SET_PDEATHSIG, not luck."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    host = subprocess.Popen(
        [sys.executable, "-c", HOST, str(workspace)], stdout=subprocess.PIPE, env=env, cwd=ROOT, text=True
    )
    try:
        assert host.stdout is not None
        line = host.stdout.readline()
        assert line, "the host process died before reporting its children"
        pids = json.loads(line)
        children = pids["active"] + pids["idle"]
        assert pids["active"] and pids["idle"]
        assert all(_alive(pid) for pid in children)
        host.send_signal(signal.SIGKILL)
        host.wait(30)
        deadline = time.monotonic() + 20
        while any(_alive(pid) for pid in children) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [pid for pid in children if _alive(pid)]
    finally:
        if host.poll() is None:
            host.kill()
            host.wait()
        if host.stdout is not None:
            host.stdout.close()


async def test_p3_each_script_gets_a_fresh_child_and_the_child_exits_after_it() -> None:
    async def no_calls(calls: list[dict[str, object]]) -> list[dict[str, object]]:
        return []

    import asyncio

    loop = asyncio.get_running_loop()
    seen: list[int] = []

    async def who(calls: list[dict[str, object]]) -> list[dict[str, object]]:
        seen.extend(vm.active_pids())
        return [
            {"id": c["id"], "ok": True, "value": {"name": "x", "text": "", "exitCode": 0, "metadata": {}}}
            for c in calls
        ]

    job = {
        "profile": "program",
        "inputs": {},
        "source": "async function run(ctx) { await ctx.tool('x', {}); return 1 }",
    }
    first = await vm.run_script(job, who, loop.time() + 30)
    second = await vm.run_script(job, who, loop.time() + 30)
    assert first.ok and second.ok and first.value == second.value == 1
    assert len(set(seen)) == 2  # never the same process twice
    # A child that reported exits on its own and is reaped off the caller's path.
    for _ in range(500):
        if not vm.active_pids() and not any(_alive(pid) for pid in seen):
            break
        await asyncio.sleep(0.02)
    assert not any(_alive(pid) for pid in seen)
    assert not vm.active_pids()


@pytest.mark.parametrize("pool_size", [0])
async def test_p3_a_cold_start_without_a_warm_pool_still_runs(pool_size: int) -> None:
    import asyncio

    pool = vm.VmPool(size=pool_size)
    job = {
        "profile": "program",
        "inputs": {"a": 2},
        "source": "async function run(ctx, i) { return i.a + 1 }",
    }
    outcome = await vm.run_script(
        job, lambda calls: asyncio.sleep(0, []), asyncio.get_running_loop().time() + 30, vm_pool=pool
    )
    assert outcome.ok and outcome.value == 3
    pool.shutdown()
