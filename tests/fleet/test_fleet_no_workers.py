"""A fleet with no workers says so (issue 13 item 4; SPEC F-1, K-8): a run on a queue no live worker
consumes fails fast with one line naming the queue and the broker — from the SDK and from
``a3s-fleet verify --broker`` — and branches whose workers all vanish later fail after the bounded
queue-wait deadline instead of waiting forever."""

from __future__ import annotations

import concurrent.futures
import json
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from orchestrator import Agent
from orchestrator.fanout import Branch

from .conftest import BIN, ROOT, FleetEnv, WorkerFactory

pytestmark = pytest.mark.fleet

FAIL_FAST_S = 15.0  # the check gives a starting worker 3 s; the rest is slack for a loaded machine


def _empty_queue(fleet: FleetEnv, **overrides: str) -> FleetEnv:
    return FleetEnv(fleet.url, f"a3s.test.empty.{uuid.uuid4().hex[:8]}", dict(overrides))


def test_f1_a_run_on_a_queue_without_workers_fails_fast_naming_queue_and_broker(
    fleet: FleetEnv, tmp_path: Path
) -> None:
    env = _empty_queue(fleet)
    branches = [Branch("nap", {"ms": 10}, f"nap {i}") for i in range(3)]
    with Agent(env.settings()) as agent:
        session = agent.session(tmp_path)
        t0 = time.monotonic()
        result = session.fan_out(branches)  # no timeout: without the check this would wait forever
        direct = session.tool("nap", {"ms": 10})
        elapsed = time.monotonic() - t0
    assert elapsed < 2 * FAIL_FAST_S
    assert result.status == "failed"
    for outcome in result.outcomes:
        assert outcome.result is not None
        kind = outcome.result.error_kind or {}
        assert (kind.get("type"), kind.get("op")) == ("transport", "dispatch")
        assert f"no worker consumes queue '{env.queue}' on broker {env.url}" in outcome.result.output
    assert direct.exit_code == 1 and f"queue '{env.queue}'" in direct.output


def test_f6_verify_with_a_broker_but_no_worker_exits_2_with_one_line(fleet: FleetEnv, tmp_path: Path) -> None:
    env = _empty_queue(fleet)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"title": "t", "commands": [{"id": "a", "command": "true"}]}))
    t0 = time.monotonic()
    proc = subprocess.run(
        [str(BIN / "a3s-fleet"), "verify", str(plan), "--broker", env.url, "-w", str(tmp_path)],
        env=env.env, cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert time.monotonic() - t0 < FAIL_FAST_S + 30  # start-up of the CLI included
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert lines[0].startswith("error: fleet: no worker consumes queue")
    assert f"'{env.queue}'" in lines[0] and env.url in lines[0]


def test_f1_branches_fail_after_the_queue_wait_deadline_when_every_worker_vanished(
    fleet: FleetEnv, spawn_worker: WorkerFactory, tmp_path: Path
) -> None:
    """The run starts with a live worker; the worker is SIGKILLed mid-run and none comes back: the
    branches fail once no live worker consumed the queue for ``queue_wait_s``."""
    env = _empty_queue(fleet, A3S_QUEUE_WAIT_S="3", A3S_WORKER_LOST_AFTER_S="3")
    worker = spawn_worker(env, "vanishing", pool="threads", concurrency=2)
    branches = [Branch("nap", {"ms": 60_000, "tag": str(i)}, f"long nap {i}") for i in range(4)]
    with Agent(env.settings()) as agent, concurrent.futures.ThreadPoolExecutor(1) as pool:
        session = agent.session(tmp_path)
        pending = pool.submit(session.fan_out, branches, allow_partial_failure=True)
        deadline = time.monotonic() + 60
        while not _holds_jobs(env, worker.name):  # naps running on the worker
            assert time.monotonic() < deadline, "the worker never started a job"
            time.sleep(0.1)
        worker.kill()
        t_kill = time.monotonic()
        result = pending.result(timeout=90)
        waited = time.monotonic() - t_kill
    # lost after 3 s + 3 s of queue wait, checked about once a second; far below the 60 s naps
    assert 3 <= waited < 40
    assert result.status == "failed"
    for outcome in result.outcomes:
        assert outcome.result is not None
        kind = outcome.result.error_kind or {}
        assert (kind.get("type"), kind.get("op")) == ("transport", "dispatch"), outcome.result.output
        assert f"no worker has consumed queue '{env.queue}'" in outcome.result.output


def _holds_jobs(env: FleetEnv, worker: str) -> bool:
    """The worker's presence record lists messages it holds (``workers.presence``)."""
    from workers.protocol import FleetKeys
    from workers.state import make_client

    client = make_client(env.url)
    try:
        raw = client.get(FleetKeys().worker(worker))
    finally:
        client.close()
    return bool(raw and json.loads(raw)["tags"])
