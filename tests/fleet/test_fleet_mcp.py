"""On a fleet, workers start the MCP servers a session names from their own config (SPEC M-1, F-1).

The job carries the session snapshot, which names servers only; the worker (a prefork child, so
its calls cross from the job's loop to the loop its connection lives on) starts the server of its
own ``A3S_MCP_CONFIG`` on first use and runs the call there.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator import Agent
from tests.fleet.conftest import FleetEnv, WorkerFactory
from tests.tools.mcp_support import calls, stdio_server

pytestmark = pytest.mark.fleet


def test_m1_f1_a_worker_starts_the_named_server_from_its_own_config(
    fleet: FleetEnv, spawn_worker: WorkerFactory, tmp_path: Path
) -> None:
    server_dir = tmp_path / "server"
    server_dir.mkdir()
    config = tmp_path / "mcp.json"
    config.write_text(
        json.dumps({"mcpServers": {"t": stdio_server(server_dir, env={"MCP_TEST_SECRET": "s3cret"})}})
    )
    env = fleet.with_overrides(A3S_MCP_CONFIG=str(config))
    worker = spawn_worker(env, "mcp", pool="prefork", concurrency=1)
    with Agent(env.settings()) as agent:
        session = agent.session(tmp_path)
        assert session.remote and "mcp__t__add" in session.tool_names()
        local_pid = session.mcp_status()["servers"][0]["pid"]
        snapshot = json.dumps(session.snapshot())
        assert '"mcp_servers": ["t"]' in snapshot
        assert "s3cret" not in snapshot and "mcp_server.py" not in snapshot  # names, never commands or env
        result = session.tool("mcp__t__add", {"a": 40, "b": 2})
        assert result.exit_code == 0, result.output
        assert result.output == "42" and result.metadata["a3s_fleet"]["worker"] == worker.name
        served_by = calls(server_dir)[-1]["pid"]
        assert served_by != local_pid  # the worker's own server process answered
        again = session.tool("mcp__t__add", {"a": 1, "b": 1})
        assert again.output == "2" and calls(server_dir)[-1]["pid"] == served_by  # started once per process
        bad = session.tool("mcp__t__add", {"a": "x", "b": 1})
        assert bad.error_kind["type"] == "invalid_argument"
