"""Flower shows the fan-out (SPEC F-5): started against the test broker, its HTTP API lists every job of
a run with the run id, branch index, description and tool in its kwargs (and, from the worker's
events, the name ``a3s.tool:<run_id>:<index>``)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from orchestrator import Agent
from orchestrator.fanout import Branch
from tests.redis_server import free_port

from .conftest import ROOT, FleetEnv, WorkerProcess

pytestmark = pytest.mark.fleet

FLOWER_READY_S = 30.0


def _get(client: httpx.Client, path: str) -> httpx.Response | None:
    try:
        return client.get(path)
    except httpx.TransportError:
        return None


def test_f5_flower_api_lists_the_fanout_jobs_with_their_run_id(
    fleet: FleetEnv, shared_workers: list[WorkerProcess], tmp_path: Path
) -> None:
    port = free_port()
    env = {**fleet.env, "FLOWER_UNAUTHENTICATED_API": "true"}
    log = tmp_path / "flower.log"
    with open(log, "wb") as out:
        flower = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "workers.app:app", "flower", "--address=127.0.0.1", f"--port={port}"],
            env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5, trust_env=False) as client:
            deadline = time.monotonic() + FLOWER_READY_S
            # Ready once Flower has *heard* from our workers (events), so it sees the jobs we send next.
            while True:
                resp = _get(client, "/api/workers?status=true")
                if (
                    resp is not None
                    and resp.status_code == 200
                    and {w.name for w in shared_workers} <= set(resp.json())
                ):
                    break
                assert flower.poll() is None, log.read_text()
                assert time.monotonic() < deadline, (
                    f"flower not ready: {resp and resp.text}\n{log.read_text()[-2000:]}"
                )
                time.sleep(0.2)
            run_id = "flower-run-1"
            branches = [Branch("ls", {"path": ""}, f"listing #{i}") for i in range(8)]
            with Agent(fleet.settings()) as agent:
                result = agent.session(tmp_path).fan_out(branches, run_id=run_id, timeout_ms=30_000)
            assert result.status == "complete"
            task_ids = {o.result.metadata["a3s_fleet"]["task_id"] for o in result.outcomes if o.result}
            deadline = time.monotonic() + 15
            while True:
                resp = _get(client, "/api/tasks?limit=1000")
                tasks = resp.json() if resp is not None and resp.status_code == 200 else {}
                mine = {tid: t for tid, t in tasks.items() if tid in task_ids and t.get("state") == "SUCCESS"}
                if len(mine) == len(task_ids) == 8:
                    break
                assert time.monotonic() < deadline, (
                    f"flower saw {len(mine)} of 8 jobs: {json.dumps(tasks)[:2000]}"
                )
                time.sleep(0.2)
    finally:
        flower.terminate()
        try:
            flower.wait(timeout=10)
        except subprocess.TimeoutExpired:
            flower.kill()
            flower.wait(timeout=5)
    indexes = set()
    for task in mine.values():
        assert task["worker"] in {w.name for w in shared_workers}
        label = json.loads(task["kwargs"])
        # The worker's events carry the shadow name; the client's task-sent event the task's own
        # name, and Flower keeps whichever it merged last. The label in kwargs is in both.
        assert task["name"] in ("a3s.tool", f"a3s.tool:{run_id}:{label['branch_index']}")
        assert label["run_id"] == run_id and label["tool"] == "ls"
        assert label["description"] == f"listing #{label['branch_index']}"
        indexes.add(label["branch_index"])
    assert indexes == set(range(8))
