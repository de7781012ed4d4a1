"""An agent turn calls an MCP tool (issue 10's last item; SPEC M-1, K-3): the model, over the OpenAI
wire format of a scripted loopback server, asks for a tool of a real MCP server (stdio, the SDK's
``MCPServer``), and ``--allow`` is what lets the call through — without it, with no terminal to
confirm, the call never reaches the server.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.model_servers import ScriptedOpenAIServer
from tests.orchestrator.test_cli_run import MODEL, call, run, tool_messages
from tests.tools.mcp_support import calls, stdio_server


def turns() -> list[dict[str, object]]:
    return [
        {"text": "Setting the flag.", "tool_calls": [call("mcp__t__set_flag", value=True)]},
        {"text": "The flag is set."},
    ]


def test_m1_agent_turn_calls_an_mcp_tool_allowed_by_allow(workspace: Path, tmp_path: Path) -> None:
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"t": stdio_server(tmp_path)}}))
    base = ["run", "set the flag", "--model", MODEL, "--json", "--mcp-config", str(config)]

    with ScriptedOpenAIServer(turns()) as srv:
        denied = run(base, workspace, srv.env())
        assert denied.returncode == 0, denied.stderr
        record = json.loads(denied.stdout)["tool_calls"][0]
        assert (record["tool"], record["exit_code"]) == ("mcp__t__set_flag", 1)
        assert record["error_kind"]["type"] == "permission_denied"
    assert calls(tmp_path) == []  # never reached the server

    with ScriptedOpenAIServer(turns()) as srv:
        allowed = run([*base, "--allow", "mcp__t__set_flag"], workspace, srv.env())
        assert allowed.returncode == 0, allowed.stderr
        data = json.loads(allowed.stdout)
        assert data["success"] and data["text"] == "The flag is set."
        assert [(c["tool"], c["exit_code"]) for c in data["tool_calls"]] == [("mcp__t__set_flag", 0)]
        # The model saw the MCP tool in its tool list and got the server's answer back.
        offered = [t["function"]["name"] for t in srv.requests[0].body["tools"]]
        assert "mcp__t__set_flag" in offered
        assert "flag=True" in tool_messages(srv.requests[1].body)[0]["content"]
    assert [(c["tool"], c["args"]) for c in calls(tmp_path)] == [("set_flag", {"value": True})]
