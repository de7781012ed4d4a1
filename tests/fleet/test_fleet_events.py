"""One session's events reach one Redis Stream from every process, in order (SPEC S-5, F-1)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from orchestrator import Agent
from orchestrator.fanout import Branch
from tests.fleet.conftest import BIN, ROOT, FleetEnv, WorkerProcess

pytestmark = pytest.mark.fleet


def test_s5_orchestrator_and_worker_events_share_the_session_stream(
    fleet: FleetEnv, shared_workers: list[WorkerProcess], tmp_path: Path
) -> None:
    (tmp_path / "a.txt").write_text("alpha\n")
    with Agent(fleet.settings()) as agent:
        session = agent.session(tmp_path)
        local = session.tool("ls", {})  # a direct call: a one-branch job in fleet mode
        assert local.exit_code == 0
        fan = session.fan_out([Branch("read", {"file_path": "a.txt"}, "read a")])  # a fan-out branch
        assert fan.status == "complete"
        sid = session.id
    out = subprocess.run(
        [str(BIN / "a3s-fleet"), "events", sid],
        env=fleet.env, cwd=ROOT, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    events = [json.loads(line) for line in out.stdout.splitlines()]
    tools = [(e["tool"], e["type"]) for e in events]
    assert ("ls", "tool_start") in tools and ("ls", "tool_end") in tools
    assert ("read", "tool_start") in tools and ("read", "tool_end") in tools
    seqs = [e["seq"] for e in events]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    ids = [e["id"] for e in events]
    resumed = subprocess.run(
        [str(BIN / "a3s-fleet"), "events", sid, "--after", ids[1]],
        env=fleet.env, cwd=ROOT, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert [json.loads(line)["id"] for line in resumed.stdout.splitlines()] == ids[2:]
