"""Flower shows the fleet (SPEC F-5, F-6): a real Flower, started on a free loopback port against the test's
own Redis with the documented basic auth (``--basic-auth``), lists every job by its label — the plan's
command (``kind: id — description``) or the branch's description, with ``[<run_id>:<index>]`` — and
records a job whose command failed as FAILURE, one that passed as SUCCESS."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from orchestrator import Agent
from orchestrator.fanout import Branch
from tests.redis_server import free_port

from .conftest import ROOT, FleetEnv, WorkerProcess

pytestmark = pytest.mark.fleet

FLOWER_READY_S = 60.0
FLOWER_SEES_JOBS_S = 30.0


@dataclass
class Flower:
    client: httpx.Client
    log: Path

    def get(self, path: str) -> httpx.Response | None:
        try:
            return self.client.get(path)
        except httpx.TransportError:
            return None

    def tasks_of_run(self, run_id: str, count: int) -> dict[str, dict[str, Any]]:
        """Flower's view of the ``count`` jobs labelled with ``run_id``, once each has a final state."""
        deadline = time.monotonic() + FLOWER_SEES_JOBS_S
        while True:
            resp = self.get("/api/tasks?limit=1000")
            tasks = resp.json() if resp is not None and resp.status_code == 200 else {}
            mine = {tid: t for tid, t in tasks.items() if _label(t).get("run_id") == run_id}
            final = {tid: t for tid, t in mine.items() if t.get("state") in ("SUCCESS", "FAILURE")}
            if len(final) == count:
                return final
            assert time.monotonic() < deadline, f"flower saw {len(final)} of {count} jobs: {mine}"
            time.sleep(0.2)


def _label(task: dict[str, Any]) -> dict[str, Any]:
    try:
        label = json.loads(task.get("kwargs") or "{}")
    except ValueError:
        return {}
    return label if isinstance(label, dict) else {}


@pytest.fixture(scope="module")
def flower(
    fleet: FleetEnv, shared_workers: list[WorkerProcess], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Flower]:
    port = free_port()
    user, password = "fleet", secrets.token_urlsafe(12)
    log = tmp_path_factory.mktemp("flower") / "flower.log"
    argv = [sys.executable, "-m", "celery", "-A", "workers.app:app", "flower", "--address=127.0.0.1"]
    argv += [f"--port={port}", f"--basic-auth={user}:{password}"]  # docs/fleet.md: Flower's API
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            argv, env=fleet.env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    base = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=base, timeout=5, trust_env=False, auth=(user, password)) as client:
            view = Flower(client, log)
            deadline = time.monotonic() + FLOWER_READY_S
            # Ready once Flower has *heard* from our workers (events), so it sees the jobs we send next.
            while True:
                resp = view.get("/api/workers?status=true")
                if (
                    resp is not None
                    and resp.status_code == 200
                    and {w.name for w in shared_workers} <= set(resp.json())
                ):
                    break
                assert proc.poll() is None, log.read_text()
                assert time.monotonic() < deadline, (
                    f"flower not ready: {resp and resp.text}\n{log.read_text()[-2000:]}"
                )
                time.sleep(0.2)
            # The API needs the credentials: without them, 401.
            with httpx.Client(base_url=base, timeout=5, trust_env=False) as anonymous:
                assert anonymous.get("/api/tasks").status_code == 401
            yield view
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def test_f5_flower_records_a_failing_command_as_failure_and_names_jobs_by_the_plan(
    fleet: FleetEnv, flower: Flower, tmp_path: Path
) -> None:
    """Issue 13 item 3: one plan, one passing and one failing command → one SUCCESS, one FAILURE in
    Flower, each named by its command; the report (the fan-in) is the same as embedded."""
    commands = [
        {"id": "unit", "kind": "test", "description": "the unit tests", "command": "echo fine"},
        {"id": "lint", "kind": "lint", "description": "style check", "command": "echo bad >&2; exit 3"},
    ]
    with Agent(fleet.settings()) as agent:
        report = agent.session(tmp_path).verify_commands("flower plan", commands)
    assert report.verdict == "failed"
    by_id = {c.id: c for c in report.commands}
    assert (by_id["unit"].status, by_id["lint"].status, by_id["lint"].exit_code) == ("passed", "failed", 3)
    [run_id] = report.run_ids
    seen = {_label(t)["branch_index"]: t for t in flower.tasks_of_run(run_id, 2).values()}
    unit, lint = seen[0], seen[1]
    assert (unit["state"], lint["state"]) == ("SUCCESS", "FAILURE")
    assert unit["name"] == f"a3s.tool:test: unit — the unit tests [{run_id}:0]"
    assert lint["name"] == f"a3s.tool:lint: lint — style check [{run_id}:1]"
    assert lint["exception"] == "JobFailed('bash failed: exit_code=1 (command exited 3)')"
    assert _label(lint) == {
        "run_id": run_id,
        "branch_index": 1,
        "description": "lint: lint — style check",
        "tool": "bash",
    }


def test_f5_flower_api_lists_the_fanout_jobs_with_their_run_id_and_description(
    fleet: FleetEnv, flower: Flower, shared_workers: list[WorkerProcess], tmp_path: Path
) -> None:
    run_id = "flower-run-1"
    branches = [Branch("ls", {"path": ""}, f"listing #{i}") for i in range(8)]
    with Agent(fleet.settings()) as agent:
        result = agent.session(tmp_path).fan_out(branches, run_id=run_id, timeout_ms=30_000)
    assert result.status == "complete"
    task_ids = {o.result.metadata["a3s_fleet"]["task_id"] for o in result.outcomes if o.result}
    mine = flower.tasks_of_run(run_id, 8)
    assert set(mine) == task_ids
    indexes = set()
    for task in mine.values():
        assert task["state"] == "SUCCESS"
        assert task["worker"] in {w.name for w in shared_workers}
        label = _label(task)
        i = label["branch_index"]
        # Every event of the job — the client's task-sent and the worker's — carries the same name.
        assert task["name"] == f"a3s.tool:listing #{i} [{run_id}:{i}]"
        assert label == {"run_id": run_id, "branch_index": i, "description": f"listing #{i}", "tool": "ls"}
        indexes.add(i)
    assert indexes == set(range(8))
