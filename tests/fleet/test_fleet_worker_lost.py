"""A dead worker does not stall a run (issue 15 item 8; SPEC F-3, F-6, F-1): a whole worker SIGKILLed
mid-``verify`` — production visibility timeout (1800 s) — has its unfinished commands redelivered once
a live worker sees it lost (``worker_lost_after_s``, 10 s), not after the visibility timeout; the
report is complete and every command's effect happened exactly once.

How the kill lands deterministically: worker A (prefork, the production pool) starts alone and takes
all four commands; one finishes at once, three block until the test creates ``go``. Worker B (threads)
then joins, A is killed with its whole process group, its commands are seen to die with it (no
orphan), and ``go`` appears: the three blocked commands never reached their effect on A, are
redelivered to B and run there; the finished one is not run again.
"""

from __future__ import annotations

import concurrent.futures
import json
import time
from pathlib import Path

import pytest
import redis

from orchestrator import Agent
from workers.presence import UNACKED_KEY

from .conftest import FleetEnv, WorkerFactory

pytestmark = pytest.mark.fleet

BLOCKED = ("b1", "b2", "b3")
RECOVERY_BOUND_S = 90.0  # generous for a loaded machine; the point is "not 1800 s"


def _command(cid: str, blocking: bool) -> dict[str, object]:
    wait = "while [ ! -f go ]; do sleep 0.05; done; " if blocking else ""
    return {
        "id": cid,
        "kind": "check",
        "command": f"echo {cid} >> starts.txt; echo $$ >> pids.txt; {wait}echo {cid} >> ledger.txt",
        "timeout_ms": 120_000,
    }


def _unacked_for(env: FleetEnv) -> int:
    """Messages of ``env``'s queue delivered and not yet acknowledged (kombu's Redis ``unacked`` hash
    holds ``[message, exchange, routing_key]`` per delivery tag)."""
    client = redis.Redis.from_url(env.url)
    try:
        return sum(1 for raw in client.hvals(UNACKED_KEY) if json.loads(raw)[2] == env.queue)
    finally:
        client.close()


def _running(pid: int) -> bool:
    """``pid`` exists and is not a zombie waiting for its reaper."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def _lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


@pytest.mark.timeout(300)
def test_f3_worker_sigkilled_mid_verify_is_detected_and_its_commands_redelivered_at_once(
    fleet: FleetEnv, spawn_worker: WorkerFactory, tmp_path: Path
) -> None:
    env = FleetEnv(fleet.url, f"{fleet.queue}.lost")  # own queue; production timeouts
    assert env.settings().visibility_timeout_s == 1800
    victim = spawn_worker(env, "victim", pool="prefork", concurrency=4)
    commands = [_command("quick", False)] + [_command(c, True) for c in BLOCKED]
    starts = tmp_path / "starts.txt"
    with Agent(env.settings()) as agent, concurrent.futures.ThreadPoolExecutor(1) as pool:
        session = agent.session(tmp_path)
        pending = pool.submit(session.verify_commands, "lost worker", commands)
        deadline = time.monotonic() + 60
        while not (set(_lines(starts)) == {"quick", *BLOCKED} and "quick" in _lines(tmp_path / "ledger.txt")):
            assert time.monotonic() < deadline, f"the victim never ran every command: {_lines(starts)}"
            time.sleep(0.05)
        # Kill only once the quick command's job is acknowledged (a sleep was not enough under load:
        # an unacknowledged finished job is redelivered, by design, and its effect happens twice).
        while _unacked_for(env) != len(BLOCKED):
            assert time.monotonic() < deadline, (
                f"the quick job was never acknowledged: {_unacked_for(env)} held"
            )
            time.sleep(0.05)
        victim_commands = [int(pid) for pid in _lines(tmp_path / "pids.txt")]
        spawn_worker(env, "survivor", pool="threads", concurrency=4)
        victim.kill()  # SIGKILL to the main process and its pool: its three jobs stay unacknowledged
        killed_at = time.monotonic()
        # Its commands die with it, but not in the same instant: were `go` made first, a blocked
        # command still alive for a few ms under load would see it and do its effect (seen in CI).
        while alive := [pid for pid in victim_commands if _running(pid)]:
            assert time.monotonic() < killed_at + 30, f"commands outlived their killed worker: {alive}"
            time.sleep(0.02)
        (tmp_path / "go").touch()
        report = pending.result(timeout=RECOVERY_BOUND_S + 30)
        recovered_in = time.monotonic() - killed_at
    assert report.verdict == "passed", [(c.id, c.status, c.output[-200:]) for c in report.commands]
    assert recovered_in < RECOVERY_BOUND_S  # lost after 10 s, redelivered on the next two beats
    assert sorted(_lines(tmp_path / "ledger.txt")) == sorted(["quick", *BLOCKED])  # each effect once
    started = _lines(starts)
    assert started.count("quick") == 1  # finished and acknowledged before the kill: never run again
    assert all(started.count(c) == 2 for c in BLOCKED)  # started on the victim, then on the survivor
