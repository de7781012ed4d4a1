"""MCP servers over streamable HTTP on loopback, through the kernel (SPEC M-1, K-4, S-5).

The same ``MCPServer`` as the stdio tests, served by its own streamable-HTTP app on a free
loopback port (the only network these tests touch).
"""

from __future__ import annotations

import time
from pathlib import Path

from kernel.options import SessionOptions
from orchestrator import Agent
from tests.tools.mcp_support import calls, free_port, http_server, start_http_server, stop_http_server


def test_m1_http_server_tools_are_listed_called_and_validated_before_the_server(
    agent: Agent, tmp_path: Path
) -> None:
    with (
        http_server(tmp_path) as (url, _proc),
        agent.session(tmp_path, SessionOptions(mcp_servers={"web": {"type": "http", "url": url}})) as s,
    ):
        assert {"mcp__web__add", "mcp__web__gated"} <= set(s.tool_names())
        status = s.mcp_status()["servers"][0]
        assert (status["transport"], status["state"]) == ("http", "running")
        assert s.tool("mcp__web__add", {"a": 20, "b": 22}).output == "42"
        before = len(calls(tmp_path))
        bad = s.model_tool_call("mcp__web__add", {"a": 1, "b": [2]})
        assert bad.error_kind["type"] == "invalid_argument" and "/b" in bad.output
        assert len(calls(tmp_path)) == before  # K-4: the server never saw it


def test_s5_http_progress_events_arrive_while_the_call_runs(agent: Agent, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    with (
        http_server(tmp_path) as (url, _proc),
        agent.session(tmp_path, SessionOptions(mcp_servers={"web": {"url": url}})) as s,
    ):
        future = s.tool_async("mcp__web__gated", {"gate": str(gate)})
        deadline = time.monotonic() + 60
        seen = None
        while seen is None and time.monotonic() < deadline:
            seen = next((e for e in s.events() if e.type == "tool_output_delta"), None)
            time.sleep(0.02)
        assert seen is not None and not future.done()
        assert seen.data["delta"]["message"] == "waiting for the gate"
        gate.write_text("open")
        assert future.result(timeout=60).output == "passed the gate"


def test_m1_http_server_down_is_a_typed_transport_error_and_the_next_call_reconnects(
    agent: Agent, tmp_path: Path
) -> None:
    port = free_port()
    proc = start_http_server(tmp_path, port)
    url = f"http://127.0.0.1:{port}/mcp"
    s = agent.session(tmp_path, SessionOptions(mcp_servers={"web": {"url": url}}))
    try:
        assert s.tool("mcp__web__add", {"a": 1, "b": 1}).output == "2"
        stop_http_server(proc)
        down = s.tool("mcp__web__add", {"a": 1, "b": 2})
        assert down.error_kind["type"] == "transport", down.output
        assert "MCP server 'web'" in down.output
        proc = start_http_server(tmp_path, port)
        assert s.tool("mcp__web__add", {"a": 1, "b": 3}).output == "4"
        assert s.mcp_status()["servers"][0]["starts"] == 2
    finally:
        s.close()
        stop_http_server(proc)


def test_m1_an_unreachable_http_server_is_one_clear_error_naming_it(agent: Agent, tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}/mcp"  # nothing listens there
    with agent.session(tmp_path, SessionOptions(mcp_servers={"gone": {"url": url}})) as s:
        status = s.mcp_status()["servers"][0]
        assert status["state"] == "failed"
        assert status["error"].startswith(f"MCP server 'gone' (http: {url}) could not start")
        assert "\n" not in status["error"]


def test_m1_a_hostile_http_servers_compressed_reply_is_bounded_like_a_stdio_line(
    agent: Agent, tmp_path: Path
) -> None:
    """M-1: a reply of a few kilobytes that inflates (gzip on gzip) to 256 MiB is cut at the stdio
    transport's 32 MiB while it is decoded: the call fails ``transport``, memory stays bounded
    (tracemalloc's peak, which httpx2's own decoding took to 2 GiB for 400 MiB), and the server's
    well-behaved gzipped replies (its tool list, ``echo``) still work."""
    import subprocess
    import sys
    import tracemalloc

    from tests.tools.mcp_support import SERVER

    port = free_port()
    hostile = SERVER.parent / "hostile_http_mcp.py"
    proc = subprocess.Popen([sys.executable, str(hostile), str(port)])
    try:
        config = {"h": {"type": "http", "url": f"http://127.0.0.1:{port}/mcp", "startup_timeout_ms": 30000}}
        deadline = time.monotonic() + 30
        while True:
            s = agent.session(tmp_path, SessionOptions(mcp_servers=config))
            if "mcp__h__echo" in s.tool_names() or time.monotonic() > deadline:
                break
            s.close()
            time.sleep(0.2)
        assert {"mcp__h__bomb", "mcp__h__echo"} <= set(s.tool_names())
        assert s.tool("mcp__h__echo", {"text": "fine"}).output == "fine"
        tracemalloc.start()
        try:
            res = s.tool("mcp__h__bomb", {"mib": 256})
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert res.error_kind is not None and res.error_kind["type"] == "transport", res.output
        assert peak < 160 << 20, f"peaked at {peak >> 20} MiB"
        assert s.tool("mcp__h__echo", {"text": "again"}).output == "again"  # reconnected
        s.close()
    finally:
        proc.kill()
        proc.wait()
