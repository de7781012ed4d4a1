"""``a3s-fleet run --broker``: the run is an ``a3s.agent`` job on a real worker over a real Redis
(issue 8 item 4; SPEC A-1, A-4, F-1, K-3, S-5).

The CLI process has no usable model endpoint: only the worker's environment points at the scripted
OpenAI-compatible server, so a finished run proves the turns ran on the worker with its own
environment. The snapshot's rules (read-only allowed, ``--allow``/``--deny``) are enforced there,
and a call that would ask is denied (nobody can answer on a worker). The tool lines come from the
session's Redis Stream.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.fleet.test_fleet_agents import MODEL, Model
from tests.fleet.test_fleet_agents import model as model  # the scripted server fixture
from tests.fleet.test_fleet_agents import ws as ws  # a workspace with a.txt
from tests.task_support import first_user_text, tool_messages

from .conftest import BIN, ROOT, FleetEnv, WorkerFactory

pytestmark = pytest.mark.fleet


def script(model: Model, key: str) -> None:
    model.scripts[key] = [
        {
            "text": "Looking.",
            "tool_calls": [
                {"id": "r1", "name": "read", "arguments": {"file_path": "a.txt"}},
                {"id": "w1", "name": "write", "arguments": {"file_path": "b.txt", "content": "no"}},
                {"id": "w2", "name": "write", "arguments": {"file_path": "c.txt", "content": "yes"}},
            ],
        },
        {"text": f"{key}: a.txt says alpha."},
    ]


def cli(fleet: FleetEnv, ws: Path, prompt: str, *extra: str) -> subprocess.CompletedProcess[str]:
    # The orchestrator's own model endpoint goes nowhere: the worker makes the requests.
    env = fleet.with_overrides(OPENAI_BASE_URL="http://127.0.0.1:9/v1").env
    argv = [str(BIN / "a3s-fleet"), "run", prompt, "--model", MODEL, "--workspace", str(ws)]
    argv += ["--broker", fleet.url, "--allow", "write(c.txt)", *extra]
    return subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=180)


def test_f1_run_with_broker_runs_the_turns_on_a_worker_under_the_snapshots_rules(
    fleet: FleetEnv, spawn_worker: WorkerFactory, model: Model, ws: Path
) -> None:
    spawn_worker(model.env(fleet), "run", pool="threads", concurrency=2)
    script(model, "FLEET RUN")

    out = cli(fleet, ws, "FLEET RUN please", "--json")

    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["success"] is True and data["text"] == "FLEET RUN: a.txt says alpha."
    assert data["steps"] == 2 and data["model"] == MODEL and data["session_id"]
    calls = [(c["tool"], c["exit_code"]) for c in data["tool_calls"]]
    assert calls == [("read", 0), ("write", 1), ("write", 0)]
    assert not (ws / "b.txt").exists() and (ws / "c.txt").read_text() == "yes"
    bodies = [r.body for r in model.server.requests if "FLEET RUN" in first_user_text(r.body)]
    assert len(bodies) == 2
    results = tool_messages(bodies[1])
    assert "alpha" in results[0] and "permission_denied" in results[1]


def test_s5_run_with_broker_shows_the_workers_tool_calls_from_the_session_stream(
    fleet: FleetEnv, spawn_worker: WorkerFactory, model: Model, ws: Path
) -> None:
    spawn_worker(model.env(fleet), "run", pool="threads", concurrency=2)
    script(model, "FLEET VIEW")

    out = cli(fleet, ws, "FLEET VIEW please")

    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "FLEET VIEW: a.txt says alpha."
    lines = out.stderr.splitlines()
    assert any(line.startswith("✓ read a.txt (") for line in lines), out.stderr
    assert any(line.startswith("✗ write b.txt (") and "permission_denied" in line for line in lines)
    assert any(line.startswith("✓ write c.txt (") for line in lines)
