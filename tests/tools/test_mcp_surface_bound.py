"""One MCP server cannot make every model request huge (SPEC M-1).

Every registered tool's definition (name, description, ``inputSchema``) goes out with each model
request. A server may list 1,024 tools with schemas of up to 256 KiB each: 256 MiB per request.
The tools of one server now take at most ``MAX_SERVER_SURFACE_BYTES`` (4 MiB) of definitions; the
rest are skipped with a warning naming each, as for any tool that cannot be registered.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from kernel.options import SessionOptions
from orchestrator import Agent
from tools.mcp.runtime import MAX_SERVER_SURFACE_BYTES

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "wide_mcp.py"


def test_m1_a_servers_tools_take_at_most_4_mib_of_every_model_request(tmp_path: Path) -> None:
    """40 tools of ~200 KiB schemas (8 MiB): the first ones up to 4 MiB are registered, the others
    are skipped with a warning naming each."""
    config = {"w": {"command": sys.executable, "args": [str(FIXTURE)]}}
    with Agent() as agent, agent.session(tmp_path, SessionOptions(mcp_servers=config)) as s:
        status = s.mcp_status()
        names = [n for n in s.tool_names() if n.startswith("mcp__w__")]
        definitions = [d for d in s.kernel.registry.definitions() if d["name"].startswith("mcp__w__")]
    assert status["servers"][0]["state"] == "running", status
    size = sum(len(json.dumps(d).encode()) for d in definitions)
    assert 0 < size <= MAX_SERVER_SURFACE_BYTES
    assert 10 <= len(names) < 40, names
    skipped = [w for w in status["warnings"] if "bytes of every model request" in w]
    assert len(skipped) == 40 - len(names), status["warnings"][:3]
    assert "tool 't39' skipped" in skipped[-1]
