"""MCP servers over stdio through the kernel, with a real server written with ``MCPServer`` (SPEC M-1).

The server (``fixtures/mcp_server.py``) records every call that reaches it, so "rejected before
the server sees it" is checked on the server's side. Proves M-1, K-4, K-5, K-6, S-5, R-6, X-2.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernel.options import SessionOptions
from kernel.policy import PermissionPolicy
from orchestrator import Agent
from orchestrator.session import Session
from tests.tools.fixtures.mcp_server import PNG
from tests.tools.mcp_support import SERVER, alive, calls, stdio_server, wait_gone

ALLOW = PermissionPolicy(allow=["mcp__t__add", "mcp__t__gated", "mcp__t__delete_everything", "batch"])


@pytest.fixture(scope="module")
def server_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mcp-stdio")


@pytest.fixture(scope="module")
def session(agent: Agent, server_dir: Path) -> Iterator[Session]:
    """One session (one server process) shared by the read-mostly tests of this module."""
    os.environ["A3S_TEST_PARENT_ONLY_SECRET"] = "must-not-leak"
    try:
        config = {"t": stdio_server(server_dir, env={"MCP_TEST_SECRET": "given-by-config"})}
        s = agent.session(server_dir, SessionOptions(mcp_servers=config, permission_policy=ALLOW))
    finally:
        del os.environ["A3S_TEST_PARENT_ONLY_SECRET"]
    yield s
    s.close()


def _new_session(agent: Agent, tmp_path: Path, **options: object) -> Session:
    return agent.session(tmp_path, SessionOptions(mcp_servers={"t": stdio_server(tmp_path)}, **options))  # type: ignore[arg-type]


def test_m1_server_tools_join_the_surface_as_mcp_server_tool(session: Session) -> None:
    names = session.tool_names()
    assert {"mcp__t__add", "mcp__t__slow", "mcp__t__picture", "mcp__t__dotted_name-tool"} <= set(names)
    definition = next(d for d in session.tool_definitions() if d["name"] == "mcp__t__add")
    assert definition["description"] == "Add two integers."
    assert definition["parameters"]["required"] == ["a", "b"]
    assert not session.kernel.registry.get("mcp__t__add").builtin  # dynamic tools: never built-in trust (K-2)
    result = session.tool("mcp__t__add", {"a": 2, "b": 40})
    assert (result.exit_code, result.output) == (0, "42")
    assert result.metadata["mcp"]["structured_content"] == {"result": 42}
    assert result.trust == "external"
    assert result.metadata["a3s_tool_result_evidence"]["loss_mode"] == "none"  # projected with evidence
    assert session.tool("mcp__t__dotted_name-tool", {}).output == "dotted ok"  # wire name kept
    status = session.mcp_status()["servers"][0]
    assert (status["name"], status["state"], status["transport"]) == ("t", "running", "stdio")


def test_k4_bad_arguments_are_rejected_before_the_server_sees_them(
    session: Session, server_dir: Path
) -> None:
    before = len(calls(server_dir))
    for call in (session.model_tool_call, session.tool):
        result = call("mcp__t__add", {"a": "two", "b": 2})
        assert result.error_kind["type"] == "invalid_argument"
        assert "/a" in result.output
        missing = call("mcp__t__add", {"a": 1})
        assert (
            missing.error_kind["type"] == "invalid_argument"
            and "'b' is a required property" in missing.output
        )
    assert len(calls(server_dir)) == before  # nothing reached the server
    assert session.model_tool_call("mcp__t__add", {"a": 1, "b": 1}).output == "2"
    assert calls(server_dir)[-1] == {
        "tool": "add",
        "args": {"a": 1, "b": 1},
        "pid": calls(server_dir)[-1]["pid"],
    }


def test_k4_m1_a_servers_catastrophic_pattern_is_matched_in_linear_time(
    session: Session, server_dir: Path
) -> None:
    """The server's schema says ``pattern: ^(a+)+$``; Python's ``re`` needs hours for 40 ``a`` and a
    ``!`` (holding the GIL: the whole process would stop). The kernel matches it with RE2."""
    started = time.monotonic()
    res = session.tool("mcp__t__shaped", {"code": "a" * 40 + "!"})
    assert time.monotonic() - started < 5.0
    assert res.error_kind is not None and res.error_kind["type"] == "invalid_argument", res.output
    assert not [c for c in calls(server_dir) if c["tool"] == "shaped"]
    assert session.tool("mcp__t__shaped", {"code": "aaaa"}).output == "shaped aaaa"


def test_s5_progress_notifications_arrive_as_events_while_the_call_runs(
    session: Session, server_dir: Path
) -> None:
    """The server waits at a gate the test opens only after it saw the first progress event."""
    gate = server_dir / "gate-open"
    after = max((e.seq for e in session.events()), default=0)
    future = session.tool_async("mcp__t__gated", {"gate": str(gate)})
    deadline = time.monotonic() + 60
    first = None
    while first is None and time.monotonic() < deadline:
        first = next((e for e in session.events(after) if e.type == "tool_output_delta"), None)
        time.sleep(0.02)
    assert first is not None, "no progress event arrived"
    assert not future.done()  # the call is still running: the event came during it
    assert first.tool == "mcp__t__gated"
    assert first.data["delta"] == {"progress": 1.0, "total": 2.0, "message": "waiting for the gate"}
    gate.write_text("open")
    result = future.result(timeout=60)
    assert result.output == "passed the gate"
    deltas = [e.data["delta"]["progress"] for e in session.events(after) if e.type == "tool_output_delta"]
    assert deltas == [1.0, 2.0]
    end = next(e for e in session.events(after) if e.type == "tool_end")
    assert end.seq > first.seq


def test_m1_images_and_large_text_become_artifacts_with_evidence(session: Session) -> None:
    picture = session.tool("mcp__t__picture", {})
    image = next(b for b in picture.metadata["mcp"]["content"] if b["type"] == "image")
    assert image["mime_type"] == "image/png" and image["bytes"] == len(PNG)
    assert image["uri"] in picture.output and picture.output.startswith("a red pixel")
    assert session.read_artifact(image["uri"]) == PNG
    big = session.tool("mcp__t__big_text", {"kib": 300})
    evidence = big.metadata["a3s_tool_result_evidence"]
    assert evidence["loss_mode"] == "bounded_preview" and evidence["original_bytes"] == 300 * 1024
    assert evidence["projected_bytes"] == len(big.output.encode()) < 110 * 1024  # 100 KiB head + markers
    full = session.read_artifact(evidence["content_ref"])
    assert len(full) == 300 * 1024 and full.startswith(b"00000000")


def test_m1_a_tool_error_reported_by_the_server_is_a_failed_result(session: Session) -> None:
    result = session.tool("mcp__t__fail_softly", {})
    assert result.exit_code == 1 and result.metadata["mcp"]["is_error"] is True
    assert "fail_softly" in result.output


def test_m1_destructive_hint_asks_for_confirmation_even_when_allowed(
    session: Session, server_dir: Path
) -> None:
    before = len(calls(server_dir))
    denied = session.model_tool_call("mcp__t__delete_everything", {"confirm": "yes"})
    assert denied.error_kind == {"type": "permission_denied", "reason": "missing_confirmation_manager"}
    unlisted = session.model_tool_call("mcp__t__whoami", {})  # no allow rule: asks, so denied here
    assert unlisted.error_kind["type"] == "permission_denied"
    assert len(calls(server_dir)) == before
    assert (
        session.tool("mcp__t__delete_everything", {"confirm": "host"}).exit_code == 0
    )  # host-direct: trusted


def test_x2_batch_sees_mcp_tools_and_fans_out_read_only_ones(session: Session) -> None:
    caps = session.kernel.capabilities_of(session.kernel.registry.scoped(), "mcp__t__add", {"a": 1, "b": 2})
    assert caps is not None and caps.allows_parallel_batch
    result = session.batch([{"tool": "mcp__t__add", "args": {"a": i, "b": 1}} for i in range(4)])
    assert result.exit_code == 0, result.output
    assert result.metadata["execution_mode"] == "parallel"
    assert [r["metadata"]["mcp"]["structured_content"]["result"] for r in result.metadata["results"]] == [
        1,
        2,
        3,
        4,
    ]
    nested = session.model_tool_call(
        "batch", {"invocations": [{"tool": "mcp__t__add", "args": {"a": "x", "b": 1}}]}
    )
    assert (
        nested.metadata["results"][0]["error_kind"]["type"] == "invalid_argument"
    )  # the kernel, inside batch


def test_m1_the_server_gets_only_safe_variables_and_its_own_env(session: Session) -> None:
    who = json.loads(session.tool("mcp__t__whoami", {}).output)
    assert who["secret"] == "given-by-config"
    assert "A3S_TEST_PARENT_ONLY_SECRET" not in who["env_names"]
    assert "PATH" in who["env_names"]


def test_m1_a_crashed_server_gives_a_typed_transport_error_and_recovers(agent: Agent, tmp_path: Path) -> None:
    with _new_session(agent, tmp_path) as s:
        first_pid = s.mcp_status()["servers"][0]["pid"]
        crashed = s.tool("mcp__t__crash", {"code": 7})
        assert crashed.error_kind["type"] == "transport" and crashed.error_kind["op"] == "mcp.call"
        assert "MCP server 't'" in crashed.output and "exit code 7" in crashed.output
        assert s.mcp_status()["servers"][0]["state"] == "stopped"
        assert wait_gone(first_pid)
        again = s.tool("mcp__t__add", {"a": 1, "b": 2})
        assert again.output == "3"
        status = s.mcp_status()["servers"][0]
        assert status["starts"] == 2 and status["pid"] != first_pid


def test_m1_a_stuck_server_times_out_typed_and_is_restarted_on_the_next_call(
    agent: Agent, tmp_path: Path
) -> None:
    with _new_session(agent, tmp_path, tool_timeouts_ms={"mcp__t__hang": 1000}) as s:
        first_pid = s.mcp_status()["servers"][0]["pid"]
        timed_out = s.tool("mcp__t__hang", {"seconds": 120})
        assert timed_out.error_kind["type"] == "timeout" and timed_out.error_kind["op"] == "mcp__t__hang"
        again = s.tool("mcp__t__add", {"a": 2, "b": 2})  # the ping goes unanswered: restarted
        assert again.output == "4"
        assert s.mcp_status()["servers"][0]["starts"] == 2
        assert wait_gone(first_pid)


def test_k6_closing_the_session_stops_its_servers_and_their_children(agent: Agent, tmp_path: Path) -> None:
    s = _new_session(agent, tmp_path)
    server_pid = s.mcp_status()["servers"][0]["pid"]
    child_pid = s.tool("mcp__t__spawn_child", {}).metadata["mcp"]["structured_content"]["result"]
    assert alive(server_pid) and alive(child_pid)
    s.close()
    assert wait_gone(server_pid) and wait_gone(child_pid)
    assert s.mcp_status()["servers"][0]["state"] != "running"


def test_k6_close_cancels_a_running_mcp_call(agent: Agent, tmp_path: Path) -> None:
    s = _new_session(agent, tmp_path)
    server_pid = s.mcp_status()["servers"][0]["pid"]
    box: dict[str, object] = {}
    thread = threading.Thread(
        target=lambda: box.setdefault("r", s.tool("mcp__t__gated", {"gate": str(tmp_path / "never")}))
    )
    thread.start()
    deadline = time.monotonic() + 60
    while not any(e.type == "tool_output_delta" for e in s.events()) and time.monotonic() < deadline:
        time.sleep(0.02)
    s.close()
    thread.join(30)
    result = box["r"]
    assert result.error_kind["type"] == "cancelled"  # type: ignore[attr-defined]
    assert wait_gone(server_pid)


def test_m1_a_server_that_cannot_start_is_one_clear_error_naming_it(agent: Agent, tmp_path: Path) -> None:
    config = {
        "ghost": {"command": str(tmp_path / "no-such-program")},
        "quitter": {
            "command": "python3",
            "args": ["-c", "import sys; print('boom', file=sys.stderr); sys.exit(5)"],
        },
        "t": stdio_server(tmp_path),
    }
    with agent.session(tmp_path, SessionOptions(mcp_servers=config)) as s:
        status = {srv["name"]: srv for srv in s.mcp_status()["servers"]}
        assert status["t"]["state"] == "running"  # the others still start
        ghost, quitter = status["ghost"], status["quitter"]
        assert ghost["state"] == quitter["state"] == "failed"
        assert ghost["error"].startswith("MCP server 'ghost'") and "not found" in ghost["error"]
        assert quitter["error"].startswith("MCP server 'quitter'")
        assert "exit code 5" in quitter["error"] and "boom" in quitter["error"]
        assert "\n" not in ghost["error"] + quitter["error"]
        assert not any(n.startswith(("mcp__ghost__", "mcp__quitter__")) for n in s.tool_names())


def test_m1_the_fixture_is_a_real_mcpserver() -> None:
    assert "MCPServer(" in SERVER.read_text()


def test_m1_a_snapshot_names_the_servers_never_their_commands_or_env(session: Session) -> None:
    snapshot = session.snapshot()
    assert snapshot["session_state"]["mcp_servers"] == ["t"]
    text = json.dumps(snapshot)
    assert "given-by-config" not in text and str(SERVER) not in text


KILLED_HOST = """
import json, os, signal, sys
sys.path.insert(0, {root!r})
from orchestrator import Agent
from kernel.options import SessionOptions
agent = Agent()
session = agent.session({ws!r}, SessionOptions(mcp_servers={{"t": {server!r}}}))
child = session.tool("mcp__t__spawn_child", {{}}).metadata["mcp"]["structured_content"]["result"]
print(json.dumps({{"server": session.mcp_status()["servers"][0]["pid"], "child": child}}), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_k6_a_host_killed_by_sigkill_leaves_no_server_or_grandchild(tmp_path: Path) -> None:
    """The server is tied to its host process (tools._proc): a SIGKILLed host takes it down."""
    import subprocess
    import sys

    root = str(Path(__file__).resolve().parents[2])
    script = KILLED_HOST.format(root=root, ws=str(tmp_path), server=stdio_server(tmp_path))
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == -9, out.stderr[-2000:]
    pids = json.loads(out.stdout.strip().splitlines()[-1])
    assert wait_gone(pids["server"]) and wait_gone(pids["child"])


def test_p3_program_sees_mcp_tools_through_the_scoped_registry(session: Session) -> None:
    source = """async function run(ctx) {
      const sum = await ctx.tool('mcp__t__add', {a: 20, b: 22});
      const bad = await ctx.tool('mcp__t__add', {a: 'x', b: 1});
      return {sum: sum.output, bad: bad.errorKind ? bad.errorKind.type : bad.exitCode};
    }"""
    result = session.program({"source": source, "allowedTools": ["mcp__t__add"]})
    assert result.exit_code == 0, result.output
    assert result.metadata["script_result"]["bad"] == 1  # the kernel refused it: exit code 1
    assert str(result.metadata["script_result"]["sum"]) == "42"
    calls_made = result.metadata["program"]["tool_calls"]
    assert [(c["tool_name"], c["exit_code"]) for c in calls_made] == [("mcp__t__add", 0), ("mcp__t__add", 1)]
