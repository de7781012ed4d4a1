"""Flower shows a batch agent job and its sub-agent fan-out (SPEC F-5, A-4): a real Flower on a free
loopback port, against the test's Redis, lists the batch job, its children and its continuation, each
named and labelled (batch/run id, parent, branch index, agent, description)."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from orchestrator.batch import BatchRequest, run_batch
from tests.model_servers import ScriptedOpenAIServer
from tests.redis_server import free_port
from tests.task_support import by_prompt, item, task_call

from .conftest import ROOT, FleetEnv, WorkerFactory

pytestmark = pytest.mark.fleet

FLOWER_READY_S = 60.0
FLOWER_SEES_JOBS_S = 30.0


def _label(task: dict[str, Any]) -> dict[str, Any]:
    try:
        label = json.loads(task.get("kwargs") or "{}")
    except ValueError:
        return {}
    return label if isinstance(label, dict) else {}


def test_f5_flower_lists_a_batch_job_and_its_children_with_their_labels(
    fleet: FleetEnv, spawn_worker: WorkerFactory, tmp_path: Path
) -> None:
    scripts: dict[str, list[dict[str, Any]]] = {
        "JOB flower": [task_call(item("petal 0"), item("petal 1")), {"text": "bloomed"}],
        "petal 0": [{"text": "first petal"}],
        "petal 1": [{"text": "second petal"}],
    }
    ws = tmp_path / "ws"
    ws.mkdir()
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text(json.dumps({"id": "rose", "prompt": "JOB flower"}) + "\n")
    with ScriptedOpenAIServer(route=by_prompt(scripts)) as server:
        env = fleet.with_overrides(**server.env())
        worker = spawn_worker(env, "flowery", pool="threads", concurrency=2)
        port = free_port()
        user, password = "fleet", secrets.token_urlsafe(12)
        log = tmp_path / "flower.log"
        argv = [sys.executable, "-m", "celery", "-A", "workers.app:app", "flower", "--address=127.0.0.1"]
        argv += [f"--port={port}", f"--basic-auth={user}:{password}"]
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                argv, env=env.env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        try:
            with httpx.Client(
                base_url=f"http://127.0.0.1:{port}", timeout=5, trust_env=False, auth=(user, password)
            ) as client:
                deadline = time.monotonic() + FLOWER_READY_S
                while True:  # ready once Flower has heard from the worker
                    try:
                        resp = client.get("/api/workers?status=true")
                        if resp.status_code == 200 and worker.name in resp.json():
                            break
                    except httpx.TransportError:
                        pass
                    assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
                    time.sleep(0.2)
                state = run_batch(
                    BatchRequest(
                        str(jobs),
                        str(tmp_path / "out.jsonl"),
                        model="openai:flower",
                        workspace=str(ws),
                        settings=env.settings(),
                    )
                )
                assert state.done == 1
                batch_id = state.batch_id
                deadline = time.monotonic() + FLOWER_SEES_JOBS_S
                while True:
                    tasks = client.get("/api/tasks?limit=1000").json()
                    agent_jobs = [
                        t for t in tasks.values() if str(t.get("name", "")).startswith("a3s.agent:")
                    ]
                    mine = [t for t in agent_jobs if batch_id in json.dumps(_label(t))]
                    if len(mine) >= 4 and all(t.get("state") == "SUCCESS" for t in mine):
                        break
                    assert time.monotonic() < deadline, f"flower saw {mine}"
                    time.sleep(0.2)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
    labels = [_label(t) for t in mine]
    names = sorted(t["name"] for t in mine)
    [job] = [lb for lb in labels if lb.get("run_id") == batch_id and "segment" not in lb]
    assert job == {
        "run_id": batch_id,
        "branch_index": 0,
        "description": "job rose",
        "agent": "general",
        "batch_id": batch_id,
        "job_id": "rose",
    }
    children = sorted(
        (lb for lb in labels if lb.get("parent_run_id") == batch_id), key=lambda lb: lb["branch_index"]
    )
    assert [(c["branch_index"], c["agent"], c["description"]) for c in children] == [
        (0, "explore", "do petal 0"),
        (1, "explore", "do petal 1"),
    ]
    assert children[0]["run_id"] == children[1]["run_id"] != batch_id  # the fan-out's own id
    [resumed] = [lb for lb in labels if lb.get("segment") == 1]
    assert resumed["run_id"] == batch_id and resumed["agent"] == "general"
    assert f"a3s.agent:general: job rose [{batch_id}:0]" in names
    assert any(n.startswith("a3s.agent:explore: do petal 1 [") for n in names)
