"""An MCP server that answers with garbage fails the call at once, typed, instead of hanging it (SPEC M-1, K-8).

The server (``fixtures/garbage_mcp.py``) speaks raw JSON-RPC over stdio or streamable HTTP on
loopback: it starts and lists its tool correctly, then answers ``reply {"kind": …}`` with what
``kind`` says. Before ``tools.mcp.guard``, every garbage answer over stdio (and an answer under an
unknown id over HTTP) left the call waiting for its deadline — 600 s by default — while the SDK
dropped the message. Each call here runs with a 60 s deadline and must fail in a few seconds.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kernel.options import SessionOptions
from orchestrator import Agent
from orchestrator.session import Session
from tests.tools.fixtures.garbage_mcp import MARK, SLOW_S
from tests.tools.mcp_support import free_port, wait_gone

FIXTURE = Path(__file__).parent / "fixtures" / "garbage_mcp.py"
DEADLINE_MS = 60_000
PROMPT_S = 10.0  # "at once": far below the deadline, with room for a loaded CI machine
GARBAGE = ["not_json", "huge_not_json", "not_jsonrpc", "unknown_id", "bad_error"]


def _stdio(*extra: str, **options: Any) -> dict[str, Any]:
    return {
        "command": sys.executable,
        "args": [str(FIXTURE), "stdio", *extra],
        "timeout_ms": DEADLINE_MS,
        **options,
    }


def _status(s: Session) -> dict[str, Any]:
    status: dict[str, Any] = s.mcp_status()["servers"][0]
    return status


def _timed(s: Session, kind: str) -> tuple[Any, float]:
    t0 = time.monotonic()
    result = s.tool("mcp__g__reply", {"kind": kind})
    return result, time.monotonic() - t0


def _assert_garbage_failure(result: Any, elapsed: float) -> None:
    assert elapsed < PROMPT_S, f"took {elapsed:.1f} s"
    assert result.exit_code == 1
    assert result.error_kind == {"type": "transport", "op": "mcp.call", "server": "g"}, result.output
    assert result.output.startswith("MCP server 'g' broke the protocol during the call: it")
    assert len(result.output) < 1000  # a bounded excerpt, never the whole message
    assert "\n" not in result.output


@pytest.fixture()
def stdio_session(agent: Agent, tmp_path: Path) -> Iterator[Session]:
    with agent.session(tmp_path, SessionOptions(mcp_servers={"g": _stdio()})) as s:
        assert _status(s)["state"] == "running", _status(s)
        yield s


@pytest.fixture(scope="module")
def http_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(FIXTURE), "http", str(port)])
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                time.sleep(0.1)
        yield url
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture()
def http_session(agent: Agent, tmp_path: Path, http_url: str) -> Iterator[Session]:
    config = {"g": {"type": "http", "url": http_url, "timeout_ms": DEADLINE_MS}}
    with agent.session(tmp_path, SessionOptions(mcp_servers=config)) as s:
        assert _status(s)["state"] == "running", _status(s)
        yield s


@pytest.mark.parametrize("kind", GARBAGE)
def test_m1_k8_a_stdio_server_answering_garbage_fails_the_call_at_once_and_is_replaced(
    stdio_session: Session, kind: str
) -> None:
    s = stdio_session
    first_pid = _status(s)["pid"]
    result, elapsed = _timed(s, kind)
    _assert_garbage_failure(result, elapsed)
    assert result.output.endswith("; it restarts on the next call")
    if kind == "unknown_id":
        assert "it answered a request it was never sent (id '987654')" in result.output
    else:
        assert "it sent a message that is not JSON-RPC: " in result.output and MARK in result.output
    assert wait_gone(first_pid, 3.0), "the faulty server is left running"
    assert _status(s)["state"] == "stopped"
    again, _ = _timed(s, "ok")
    assert again.output == "ok"
    assert _status(s)["starts"] == 2 and _status(s)["pid"] != first_pid


def test_m1_k8_garbage_fails_every_call_in_flight_on_that_server(stdio_session: Session) -> None:
    s = stdio_session
    box: dict[str, Any] = {}
    held = threading.Thread(target=lambda: box.setdefault("held", _timed(s, "hold")))
    held.start()
    time.sleep(0.5)  # the held call is in flight (the tool is read-only: calls run side by side)
    result, elapsed = _timed(s, "not_json")
    held.join(PROMPT_S)
    assert not held.is_alive(), "the call in flight still waits for its deadline"
    _assert_garbage_failure(result, elapsed)
    _assert_garbage_failure(*box["held"])
    assert MARK in box["held"][0].output


def test_m1_a_late_answer_to_a_timed_out_call_is_ignored_not_a_fault(agent: Agent, tmp_path: Path) -> None:
    """An id this connection did issue is no garbage: the answer to a call the kernel already timed
    out arrives late and is dropped; the server is kept (a fault would have restarted it)."""
    config = {"g": _stdio(timeout_ms=500)}
    with agent.session(tmp_path, SessionOptions(mcp_servers=config)) as s:
        pid = _status(s)["pid"]
        late, _ = _timed(s, "slow")
        assert late.error_kind is not None and late.error_kind["type"] == "timeout", late.output
        time.sleep(SLOW_S + 0.5)  # the late answer arrives while no call is in flight
        again, _ = _timed(s, "ok")
        assert again.output == "ok"
        assert _status(s)["starts"] == 1 and _status(s)["pid"] == pid


def test_m1_garbage_while_no_call_is_in_flight_stops_the_server_and_the_next_call_restarts_it(
    stdio_session: Session,
) -> None:
    s = stdio_session
    first_pid = _status(s)["pid"]
    assert _timed(s, "ok_then_garbage")[0].output == "ok"
    assert wait_gone(first_pid, SLOW_S + PROMPT_S), "the faulty server is left running"
    status = _status(s)
    assert status["state"] == "stopped"
    assert status["error"] == f"MCP server 'g' sent a message that is not JSON-RPC: '{MARK} idle noise'"
    again, _ = _timed(s, "ok")  # no error for the user: restarted, as after a crash while idle
    assert again.output == "ok" and _status(s)["starts"] == 2


def test_m1_notifications_and_stderr_lines_do_not_break_calls(stdio_session: Session) -> None:
    s = stdio_session
    pid = _status(s)["pid"]
    result, _ = _timed(s, "noisy")
    assert result.exit_code == 0 and result.output == "still ok"
    assert _status(s)["state"] == "running" and _status(s)["pid"] == pid and _status(s)["starts"] == 1


def test_m1_k8_a_result_that_is_no_tool_result_is_internal_error_naming_the_server(
    stdio_session: Session,
) -> None:
    """Well-framed JSON-RPC whose ``result`` breaks ``CallToolResult``: typed (it was
    ``invalid_argument`` blaming the model's arguments, with pydantic's report), the server kept."""
    s = stdio_session
    pid = _status(s)["pid"]
    result, elapsed = _timed(s, "bad_result")
    assert elapsed < PROMPT_S
    assert result.error_kind == {
        "type": "internal_error",
        "exception": "ValidationError",
        "errno": None,
        "server": "g",
    }, result.output
    assert (
        result.output
        == "MCP server 'g' returned an invalid result for 'reply': content: Input should be a valid list"
    )
    assert _timed(s, "ok")[0].output == "ok"
    assert _status(s)["starts"] == 1 and _status(s)["pid"] == pid


def test_m1_k8_a_server_that_prints_garbage_on_stdout_at_start_fails_to_start_at_once(
    agent: Agent, tmp_path: Path
) -> None:
    """stdout is the protocol channel: a banner printed there fails the start (one line quoting it),
    instead of being skipped — a garbage reply to the handshake would otherwise hang the start."""
    config = {"g": _stdio("--banner", startup_timeout_ms=DEADLINE_MS)}
    t0 = time.monotonic()
    with agent.session(tmp_path, SessionOptions(mcp_servers=config)) as s:
        elapsed = time.monotonic() - t0
        status = _status(s)
        assert status["state"] == "failed"
        assert status["error"].startswith("MCP server 'g' (stdio: ")
        assert (
            f"could not start: it sent a message that is not JSON-RPC: '{MARK} server starting'"
            in status["error"]
        )
        assert "mcp__g__reply" not in s.tool_names()
    assert elapsed < PROMPT_S + 5


@pytest.mark.parametrize("kind", [*GARBAGE, "sse_garbage"])
def test_m1_k8_an_http_server_answering_garbage_fails_the_call_at_once(
    http_session: Session, kind: str
) -> None:
    s = http_session
    result, elapsed = _timed(s, kind)
    _assert_garbage_failure(result, elapsed)
    if kind == "unknown_id":  # no call to tie it to: the session is over, the next call reconnects
        assert "it answered a request it was never sent (id '987654')" in result.output
        assert result.output.endswith("; it restarts on the next call")
    else:  # the SDK ties an unreadable reply to its call: that call fails, the session is kept
        assert "its reply to 'reply' is not JSON-RPC: " in result.output
        assert MARK[-4:] in result.output  # pydantic's excerpt of the reply may cut the middle
        assert result.output.endswith("; its connection is kept")
    again, _ = _timed(s, "ok")
    assert again.output == "ok"
    assert _status(s)["starts"] == (2 if kind == "unknown_id" else 1)


@pytest.mark.parametrize("kind", ["notification", "request"])
def test_m1_k8_an_http_reply_that_is_no_response_fails_the_call_at_once(
    http_session: Session, kind: str
) -> None:
    """The SDK hands an ``application/json`` reply's message to the session whatever it is: a
    notification or a request in place of the response left the call pending to its deadline."""
    s = http_session
    result, elapsed = _timed(s, kind)
    _assert_garbage_failure(result, elapsed)
    assert (
        f"its reply to 'reply' is no answer: the server answered with a {kind} instead of a response: "
        in (result.output)
    ), result.output
    assert MARK in result.output and result.output.endswith("; its connection is kept")
    assert _status(s)["starts"] == 1
    again, _ = _timed(s, "ok")
    assert again.output == "ok"


def test_m1_http_notifications_in_the_reply_stream_do_not_break_calls(http_session: Session) -> None:
    s = http_session
    result, _ = _timed(s, "noisy")
    assert result.exit_code == 0 and result.output == "still ok"
    assert _status(s)["state"] == "running" and _status(s)["starts"] == 1


def test_m1_k8_an_http_result_that_is_no_tool_result_is_internal_error(http_session: Session) -> None:
    s = http_session
    result, _ = _timed(s, "bad_result")
    assert result.error_kind is not None and result.error_kind["type"] == "internal_error", result.output
    assert result.output.startswith("MCP server 'g' returned an invalid result for 'reply': content:")
    assert _timed(s, "ok")[0].output == "ok"
    assert _status(s)["starts"] == 1


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_m1_k8_a_json_rpc_error_message_reaches_the_model_bounded_and_printable(
    stdio_session: Session, http_session: Session, transport: str
) -> None:
    """K-8/M-1: a server's JSON-RPC error (code -32000) is the server's text, not ours: a 1 MiB message
    full of terminal escapes (clear screen, window title, bell, CR/LF, NUL) went to the model and the
    events whole but for projection's cap — 100 KiB of it, control characters included. Now the
    call fails typed (``internal_error`` with the code, server kept) quoting a bounded, one-line,
    escaped excerpt, as for garbage."""
    s = stdio_session if transport == "stdio" else http_session
    result, elapsed = _timed(s, "huge_error")
    assert elapsed < PROMPT_S
    assert result.exit_code == 1
    assert result.error_kind is not None and result.error_kind["type"] == "internal_error", result.error_kind
    assert result.error_kind.get("code") == -32000, result.error_kind
    assert result.output.startswith("MCP server 'g' refused 'reply': "), result.output[:200]
    assert MARK in result.output
    assert len(result.output) < 1000, len(result.output)
    assert not any(ord(c) < 32 or ord(c) == 127 for c in result.output), repr(result.output[:300])
    # -32000 opens JSON-RPC's server-error range (servers use it for their own failures); the SDK
    # uses the same code for a closed connection, and the server was torn down and restarted as
    # "its output ended", its message lost. The connection is kept.
    assert _timed(s, "ok")[0].output == "ok"
    assert _status(s)["starts"] == 1, _status(s)
