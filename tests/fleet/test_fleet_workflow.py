"""Dynamic workflows on a real fleet: steps are jobs on real workers (SPEC F-1, F-3, F-5, F-7).

Real Redis, real ``a3s-fleet worker`` processes, the real CLI. The side-effect tool is the fleet
fixtures' ``append_once`` (it logs every start in ``<path>.starts``, so a test can count how many
times a step really ran, and appends its key once).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator import Agent

from .conftest import BIN, ROOT, FleetEnv, WorkerFactory, WorkerProcess

pytestmark = pytest.mark.fleet

KILL_ENV = {
    "A3S_VISIBILITY_TIMEOUT_S": "3",
    "A3S_JOB_TIME_LIMIT_S": "2",
    "A3S_JOB_SOFT_TIME_LIMIT_S": "1",
    "A3S_MAX_DELIVERIES": "5",
}

FLOW = """
async function run(wf, input) {
  const one = await wf.step('one', 'append_once', {path: 'ledger.txt', key: input.query + '-one'});
  const [two, three] = await Promise.all([
    wf.step('two', 'append_once', {path: 'ledger.txt', key: input.query + '-two', delay_ms: input.delay || 0}),
    wf.step('three', 'nap', {ms: 10, tag: input.query}),
  ]);
  return [one.output, two.output, three.output];
}
"""


def _starts(root: Path) -> list[str]:
    path = root / "ledger.txt.starts"
    return path.read_text().split() if path.exists() else []


def _wait_for(pred: Any, what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def test_f7_steps_run_as_labelled_jobs_on_workers_and_recover_by_run_and_query(
    fleet: FleetEnv, shared_workers: list[WorkerProcess], tmp_path: Path
) -> None:
    names = {w.name for w in shared_workers}
    with Agent(fleet.settings()) as agent:
        s = agent.session(tmp_path)
        first = s.workflow(source=FLOW, input={"query": "q1"}, run_id="fleet-wf-1")
        assert first.exit_code == 0, first.output
        assert first.metadata["output"][2] == "napped 10ms q1"
        assert first.metadata["workflow"]["log"] == "redis stream a3s:workflow:fleet-wf-1"
        # Every step ran on a worker, under the workflow's run id and the step's id.
        import asyncio

        from orchestrator.dispatch_workflow import RedisEventLogs
        from workers.runtime import state_url

        envelopes = asyncio.run(RedisEventLogs(state_url(fleet.settings())).read("fleet-wf-1"))
        done = {
            e["event"]["step_id"]: e["event"]["output"]
            for e in envelopes
            if e["event"]["type"] == "step_completed"
        }
        assert set(done) == {"one", "two", "three"}
        assert all(out["metadata"]["a3s_fleet"]["worker"] in names for out in done.values())
        assert sorted(_starts(tmp_path)) == ["q1-one", "q1-two"]
        again = s.workflow(source=FLOW, input={"query": "q1"}, run_id="fleet-wf-1")
        assert {st["status"] for st in again.metadata["workflow"]["steps"]} == {"recovered"}
        assert sorted(_starts(tmp_path)) == ["q1-one", "q1-two"]  # no job ran again
        other = s.workflow(source=FLOW, input={"query": "q2"}, run_id="fleet-wf-1")
        assert {st["status"] for st in other.metadata["workflow"]["steps"]} == {"completed"}
        assert sorted(_starts(tmp_path)) == ["q1-one", "q1-two", "q2-one", "q2-two"]
    status = subprocess.run(
        [str(BIN / "a3s-fleet"), "workflow", "status", "fleet-wf-1", "--json"],
        env=fleet.env, cwd=ROOT, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert json.loads(status.stdout)["status"] == "completed"


def test_f2_fleet_steps_overlap_and_a_failing_step_fails_the_run(
    fleet: FleetEnv, shared_workers: list[WorkerProcess], tmp_path: Path
) -> None:
    barrier = "touch {me}.started; for i in $(seq 600); do [ -f {other}.started ] && exit 0; sleep 0.05; done; exit 9"
    src = f"""async function run(wf) {{
      await Promise.all([
        wf.step('a', 'bash', {{command: {json.dumps(barrier.format(me="a", other="b"))}}}),
        wf.step('b', 'bash', {{command: {json.dumps(barrier.format(me="b", other="a"))}}}),
      ]);
      await wf.step('boom', 'bash', {{command: 'echo nope >&2; exit 5'}});
    }}"""
    with Agent(fleet.settings()) as agent:
        result = agent.session(tmp_path).workflow(source=src, run_id="fleet-wf-2")
    assert result.exit_code == 1
    steps = {st["step_id"]: st["status"] for st in result.metadata["workflow"]["steps"]}
    assert steps == {"a": "completed", "b": "completed", "boom": "failed"}  # a and b met at the barrier
    assert "step 'boom' (bash) failed" in result.output and "nope" in result.output


def test_f3_a_worker_killed_mid_step_loses_no_step(
    fleet: FleetEnv, spawn_worker: WorkerFactory, tmp_path: Path
) -> None:
    env = fleet.with_overrides(**KILL_ENV)
    worker = spawn_worker(env, "wf-victim", pool="threads", concurrency=2)
    with Agent(env.settings()) as agent:
        s = agent.session(tmp_path)
        import concurrent.futures

        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            pending = pool.submit(
                s.workflow, source=FLOW, input={"query": "k", "delay": 600}, run_id="fleet-wf-kill"
            )
            _wait_for(lambda: "k-two" in _starts(tmp_path), "step two to start")
            worker.kill()
            spawn_worker(env, "wf-rescuer", pool="threads", concurrency=2)
            result = pending.result(timeout=120)
    assert result.exit_code == 0, result.output
    assert {st["status"] for st in result.metadata["workflow"]["steps"]} == {"completed"}
    assert sorted((tmp_path / "ledger.txt").read_text().split()) == ["k-one", "k-two"]  # effects once


def test_f3_a_sigkilled_cli_resumes_and_the_step_in_flight_is_recovered_not_rerun(
    fleet: FleetEnv, shared_workers: list[WorkerProcess], tmp_path: Path
) -> None:
    (tmp_path / "flow.js").write_text(FLOW)
    cmd = [str(BIN / "a3s-fleet"), "workflow", "run", "flow.js", "--run-id", "fleet-wf-cli"]
    args = ["--input", json.dumps({"query": "c", "delay": 3000}), "--workspace", str(tmp_path)]
    proc = subprocess.Popen([*cmd, *args], env=fleet.env, cwd=tmp_path, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    try:
        _wait_for(lambda: "c-two" in _starts(tmp_path), "step two to start on a worker")
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # The job outlives the driver: it finishes on its worker and its result is kept in the step store.
    _wait_for(lambda: "c-two" in (tmp_path / "ledger.txt").read_text().split(), "step two's effect")
    resumed = subprocess.run(
        [*cmd, *args, "--json"], env=fleet.env, cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert resumed.returncode == 0, resumed.stderr
    data = json.loads(resumed.stdout)
    assert data["status"] == "completed"
    steps = {st["step_id"]: st["status"] for st in data["steps"]}
    assert steps["one"] == "recovered"  # recorded in the stream: not dispatched again
    assert _starts(tmp_path).count("c-one") == 1
    assert _starts(tmp_path).count("c-two") == 1  # re-dispatched, recovered by the worker's step store
    assert sorted((tmp_path / "ledger.txt").read_text().split()) == ["c-one", "c-two"]


def test_f1_a_step_whose_job_envelope_would_be_refused_fails_typed_instead_of_hanging(
    fleet: FleetEnv, shared_workers: list[WorkerProcess], tmp_path: Path
) -> None:
    """A tool name over the envelope's 128 characters: building its job raised out of the runner's
    publishing task, nothing of that batch was sent and the step's fan-in waited until the run's
    deadline. Now that branch fails ``invalid_argument`` at once, and the rest of its batch runs."""
    src = """async function run(wf) {
      const [ok, long] = await Promise.allSettled([
        wf.step('ok', 'nap', {ms: 1, tag: 'fine'}),
        wf.step('long', 'x'.repeat(200), {}),
      ]);
      return {ok: ok.value.output, kind: long.reason.errorKind};
    }"""
    started = time.monotonic()
    with Agent(fleet.settings()) as agent:
        result = agent.session(tmp_path).workflow(
            source=src, run_id="fleet-wf-envelope", limits={"timeout_ms": 30000}
        )
    assert result.exit_code == 0, result.output
    assert result.metadata["output"]["ok"] == "napped 1ms fine"
    assert result.metadata["output"]["kind"]["type"] == "invalid_argument"
    assert result.metadata["output"]["kind"]["path"] == "tool"
    assert time.monotonic() - started < 20


def test_f3_a_failed_step_runs_again_when_the_fleet_run_is_resumed(
    fleet: FleetEnv, shared_workers: list[WorkerProcess], tmp_path: Path
) -> None:
    """The step fails its first time and succeeds after. Its job's failed result is stored in the
    workers' step store under the step's idempotency key; before, the resumed run sent the same key
    and the worker recovered the stored failure — a failed step never ran again on a fleet, unlike
    embedded. Now the key counts the step's recorded failures (``wf:<digest>/<failures>:<step>``)."""
    src = """async function run(wf) {
      const r = await wf.step('flaky', 'bash', {command: 'echo run >> tries; if [ -f ok ]; then echo fine; else touch ok; exit 5; fi'});
      return r.output.trim();
    }"""
    with Agent(fleet.settings()) as agent:
        s = agent.session(tmp_path)
        first = s.workflow(source=src, input={"query": "flaky"}, run_id="fleet-wf-flaky")
        assert first.exit_code == 1, first.output
        again = s.workflow(source=src, input={"query": "flaky"}, run_id="fleet-wf-flaky")
        assert again.exit_code == 0, again.output
        assert again.metadata["output"] == "fine"
        assert (tmp_path / "tries").read_text().split() == ["run", "run"]
        done = s.workflow(source=src, input={"query": "flaky"}, run_id="fleet-wf-flaky")
        assert done.metadata["workflow"]["steps"][0]["status"] == "recovered"  # a success is not rerun
    assert (tmp_path / "tries").read_text().split() == ["run", "run"]
