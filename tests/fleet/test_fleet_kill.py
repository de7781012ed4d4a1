"""At-least-once delivery with effects once (SPEC F-3, F-1): a worker SIGKILLed mid-job, ten times in a
row, loses no job, and every side effect happens exactly once.

Why this worker runs with a 3 s visibility timeout: a message held by a worker that died *whole*
(main process and pool) stays in Redis's ``unacked`` hash until the visibility timeout passes and a
live worker's restore sweep (every ``restore_interval_s(vt)`` s, throttle 1) puts it back. Production
keeps 1800 s (longer than any job); 3 s (jobs here take 0.6 s, time limits 1/2 s stay below it) makes
ten kill-and-recover rounds fit in about a minute. The step lease is half of it (1.5 s).
"""

from __future__ import annotations

import concurrent.futures
import random
import time
from pathlib import Path

import pytest

from orchestrator import Agent
from orchestrator.fanout import Branch

from .conftest import FleetEnv, WorkerFactory

pytestmark = pytest.mark.fleet

KILLS = 10
BRANCHES_PER_ROUND = 4
JOB_MS = 600
KILL_ENV = {
    "A3S_VISIBILITY_TIMEOUT_S": "3",
    "A3S_JOB_TIME_LIMIT_S": "2",
    "A3S_JOB_SOFT_TIME_LIMIT_S": "1",
    "A3S_MAX_DELIVERIES": "5",
}


def _wait_for_start(starts: Path, keys: list[str], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if starts.exists() and set(starts.read_text().split()) & set(keys):
            return
        time.sleep(0.01)
    raise AssertionError(f"no job of {keys} started within {timeout_s}s")


def test_f3_worker_sigkilled_mid_job_ten_times_loses_nothing_and_effects_happen_once(
    fleet: FleetEnv, spawn_worker: WorkerFactory, tmp_path: Path
) -> None:
    env = fleet.with_overrides(**KILL_ENV)
    rng = random.Random(7)
    ledger, starts = tmp_path / "ledger.txt", tmp_path / "ledger.txt.starts"
    worker = spawn_worker(env, "victim", pool="threads", concurrency=2)
    redelivered_rounds = 0
    all_keys: list[str] = []
    with Agent(env.settings()) as agent, concurrent.futures.ThreadPoolExecutor(1) as pool:
        session = agent.session(tmp_path)
        for round_no in range(KILLS):
            keys = [f"r{round_no}-k{i}" for i in range(BRANCHES_PER_ROUND)]
            all_keys += keys
            branches = [
                Branch("append_once", {"path": "ledger.txt", "key": k, "delay_ms": JOB_MS}, f"append {k}")
                for k in keys
            ]
            pending = pool.submit(session.fan_out, branches, timeout_ms=60_000)
            _wait_for_start(starts, keys)
            time.sleep(rng.uniform(0.02, 0.2))  # the append happens JOB_MS/2 after the start mark
            worker.kill()  # SIGKILL to the whole process group: main process and pool
            worker = spawn_worker(env, f"victim{round_no}", pool="threads", concurrency=2)
            result = pending.result(timeout=60)
            assert result.status == "complete", [
                (o.index, o.status, o.result and o.result.output) for o in result.outcomes
            ]
            deliveries = [o.result.metadata["a3s_fleet"]["delivery"] for o in result.outcomes if o.result]
            redelivered_rounds += max(deliveries) >= 2
    lines = ledger.read_text().split()
    assert sorted(lines) == sorted(all_keys)  # every job's effect, each exactly once
    assert redelivered_rounds == KILLS  # each kill really hit a job in flight, which came back
