"""Fan-out over real workers (SPEC F-1, X-3, F-5): the same calls as the embedded run, the same results;
cancellation reaches the jobs; ``a3s-fleet status`` sees workers, queues and runs."""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import subprocess
import time
from pathlib import Path

import pytest

from config.settings import Settings
from orchestrator import Agent
from orchestrator.dispatch import CeleryRunner
from orchestrator.fanout import Branch, FanOutPolicy, fan_out

from .conftest import BIN, EXTRA_TOOLS, ROOT, FleetEnv, WorkerProcess

pytestmark = pytest.mark.fleet


def _branches() -> list[Branch]:
    out: list[Branch] = []
    for i in range(32):
        kind = i % 4
        if kind == 0:
            out.append(
                Branch("read", {"file_path": "notes.txt", "offset": 1 + i * 7, "limit": 5}, f"notes page {i}")
            )
        elif kind == 1:
            out.append(Branch("ls", {"path": "src" if i % 8 == 1 else ""}, f"list {i}"))
        elif kind == 2:
            out.append(Branch("read", {"file_path": "README.md"}, f"readme {i}"))
        else:
            out.append(Branch("read", {"file_path": f"missing-{i}.txt"}, f"missing {i}"))  # a typed failure
    return out


def test_f1_32_branch_fanout_on_workers_equals_the_embedded_run(
    fleet: FleetEnv, shared_workers: list[WorkerProcess], workspace: Path
) -> None:
    """F-1: the same session calls, embedded vs. as Celery jobs on two real workers: same results."""
    branches = _branches()
    with Agent(Settings(extra_tools=EXTRA_TOOLS)) as agent:
        embedded = agent.session(workspace).fan_out(branches, allow_partial_failure=True)
    with Agent(fleet.settings()) as agent:
        session = agent.session(workspace)
        assert isinstance(session.runner.remote, CeleryRunner)
        t0 = time.monotonic()
        fleet_run = session.fan_out(branches, allow_partial_failure=True, timeout_ms=60_000)
        elapsed = time.monotonic() - t0
    assert elapsed < 20
    assert len(fleet_run.outcomes) == len(embedded.outcomes) == 32
    assert fleet_run.succeeded == embedded.succeeded == 24
    workers_seen = set()
    for mine, theirs in zip(fleet_run.outcomes, embedded.outcomes, strict=True):
        assert mine.result is not None and theirs.result is not None
        assert (mine.status, mine.result.output, mine.result.exit_code) == (
            theirs.status,
            theirs.result.output,
            theirs.result.exit_code,
        )
        assert (mine.result.error_kind or {}).get("type") == (theirs.result.error_kind or {}).get("type")
        assert "a3s_fleet" not in theirs.result.metadata
        workers_seen.add(mine.result.metadata["a3s_fleet"]["worker"])
    assert workers_seen <= {w.name for w in shared_workers} and workers_seen


def test_f1_cancelled_fanout_stops_running_and_queued_jobs(
    fleet: FleetEnv, shared_workers: list[WorkerProcess], tmp_path: Path
) -> None:
    """X-3/K-6: a fan-out that times out cancels its branches: the running jobs stop before their side
    effect (cancel flag, polled by the job) and queued ones never start (flag + revoke)."""
    branches = [
        Branch("append_once", {"path": "ledger.txt", "key": f"k{i}", "delay_ms": 3_000}, f"slow {i}")
        for i in range(8)
    ]
    with Agent(fleet.settings()) as agent:
        session = agent.session(tmp_path)
        t0 = time.monotonic()
        result = session.fan_out(branches, timeout_ms=700)
        settled = time.monotonic() - t0
    assert result.status == "failed"
    assert {o.status for o in result.outcomes} == {"timed_out"}
    assert settled < 5
    time.sleep(2.5)  # past the point where an uncancelled job would have appended
    ledger = tmp_path / "ledger.txt"
    assert not ledger.exists() or ledger.read_text() == ""


def test_f5_status_lists_workers_queue_and_the_running_run(
    fleet: FleetEnv, shared_workers: list[WorkerProcess], tmp_path: Path
) -> None:
    """F-5 / operations: `a3s-fleet status --json` shows live workers, the queue and a run in flight."""
    # Naps outlast the status calls (each waits up to its --timeout for worker replies); the run is
    # cancelled once the status output has been read.
    branches = [Branch("nap", {"ms": 60_000, "tag": str(i)}, f"nap {i}") for i in range(4)]
    with Agent(fleet.settings()) as agent:
        session = agent.session(tmp_path)
        running = agent.loop.submit(
            fan_out(session.runner, "status-run-1", branches, FanOutPolicy(timeout_ms=90_000))
        )
        # Wait for the run to be registered and its jobs to be running (not a fixed sleep: under
        # load, starting the run can take longer than any guess).
        deadline = time.monotonic() + 25
        while True:
            out = subprocess.run(
                [str(BIN / "a3s-fleet"), "status", "--json", "--timeout", "2"],
                env=fleet.env, cwd=ROOT, capture_output=True, text=True, timeout=60, check=True,
            )  # fmt: skip
            seen = json.loads(out.stdout)
            busy = [job for w in seen["workers"] for job in w["active"]]
            if any(r["run_id"] == "status-run-1" for r in seen["runs"]) and busy:
                break
            assert time.monotonic() < deadline, f"run never showed up in status: {out.stdout}"
            time.sleep(0.2)
        text = subprocess.run(
            [str(BIN / "a3s-fleet"), "status", "--timeout", "1"],
            env=fleet.env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
        running.cancel()
        with contextlib.suppress(concurrent.futures.CancelledError):
            running.result(timeout=30)
    status = json.loads(out.stdout)
    names = {w["name"] for w in status["workers"]}
    assert {w.name for w in shared_workers} <= names
    assert fleet.queue in status["queues"]
    run = next(r for r in status["runs"] if r["run_id"] == "status-run-1")
    assert run["total"] == 4 and not run["stale"]
    active = [job for w in status["workers"] for job in w["active"]]
    assert any("status-run-1" in (job["name"] or "") for job in active)
    assert "status-run-1" in text and fleet.queue in text


def test_f5_failed_jobs_end_failure_in_celery_and_both_fan_ins_keep_the_typed_result(
    fleet: FleetEnv, shared_workers: list[WorkerProcess], tmp_path: Path
) -> None:
    """Issue 13 item 3: a job whose tool failed is recorded by Celery as FAILURE (a passing one SUCCESS),
    after its result was published — the list fan-in and the result-backend fan-in (``wait="poll"``)
    both still get the typed ``ToolResult``, not a generic worker error."""
    from workers.app import make_app

    branches = [Branch("read", {"file_path": "missing.txt"}, "missing"), Branch("ls", {"path": ""}, "list")]
    policy = FanOutPolicy(allow_partial_failure=True, timeout_ms=60_000)
    outcomes = {}
    with Agent(fleet.settings()) as agent:
        session = agent.session(tmp_path)
        outcomes["list"] = session.fan_out(branches, allow_partial_failure=True, timeout_ms=60_000).outcomes
        poller = CeleryRunner(
            agent.fleet_app(), session.snapshot, fleet.settings(), session_id=session.id, wait="poll"
        )
        try:
            outcomes["poll"] = agent.loop.run(fan_out(poller, "poll-run-1", branches, policy)).outcomes
        finally:
            agent.loop.run(poller.aclose(), timeout=10)
    app = make_app(fleet.settings())
    try:
        for mode, (missing, listing) in outcomes.items():
            assert missing.result is not None and listing.result is not None, mode
            assert (missing.status, (missing.result.error_kind or {}).get("type")) == ("failed", "not_found")
            assert listing.status == "succeeded", mode
            if mode == "poll":  # only this fan-in stores Celery results: the state is in the backend
                states = [
                    app.AsyncResult(o.result.metadata["a3s_fleet"]["task_id"]).state
                    for o in (missing, listing)
                ]
                assert states == ["FAILURE", "SUCCESS"]
    finally:
        app.close()
