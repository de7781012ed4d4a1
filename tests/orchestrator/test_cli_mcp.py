"""``--mcp-config`` on the CLI (SPEC M-1; issue 10): tools listed and called, failures one line each.

The workspace's own ``.mcp.json`` is read only with ``--mcp-workspace-config``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.tools.mcp_support import stdio_server

BIN = [sys.executable, "-m", "orchestrator.cli"]


def run(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("A3S_")}
    environ.update(env)
    return subprocess.run([*BIN, *args], cwd=cwd, capture_output=True, text=True, env=environ, timeout=300)


def test_m1_cli_lists_and_calls_mcp_tools_and_reports_a_failed_server_in_one_line(tmp_path: Path) -> None:
    config = tmp_path / "mcp.json"
    servers = {"t": stdio_server(tmp_path), "ghost": {"command": str(tmp_path / "missing")}}
    config.write_text(json.dumps({"mcpServers": servers}))
    listed = run(["tools", "--mcp-config", str(config)], tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "mcp__t__add" in listed.stdout and "Add two integers." in listed.stdout
    warning = [line for line in listed.stderr.splitlines() if "ghost" in line]
    assert len(warning) == 1 and warning[0].startswith("warning: MCP server 'ghost'")
    called = run(["tool", "mcp__t__add", '{"a": 4, "b": 5}', "--json"], tmp_path, A3S_MCP_CONFIG=str(config))
    assert called.returncode == 0, called.stderr
    assert json.loads(called.stdout)["output"] == "9"
    bad = run(["tool", "mcp__t__add", '{"a": "x", "b": 5}', "--mcp-config", str(config)], tmp_path)
    assert bad.returncode == 1 and "/a" in bad.stderr


def test_m1_cli_config_errors_are_one_line_and_the_workspace_file_needs_the_flag(tmp_path: Path) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    out = run(["tools", "--mcp-config", str(broken)], tmp_path)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "not valid JSON" in out.stderr
    (tmp_path / ".mcp.json").write_text(
        json.dumps({"mcpServers": {"ws": {"command": str(tmp_path / "nope")}}})
    )
    quiet = run(["tools"], tmp_path)
    assert quiet.returncode == 0 and "ws" not in quiet.stderr  # never read without the opt-in
    opted = run(["tools", "--mcp-workspace-config"], tmp_path)
    assert opted.returncode == 0 and "warning: MCP server 'ws'" in opted.stderr
