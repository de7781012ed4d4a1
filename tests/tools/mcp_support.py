"""Helpers for tests that run the real MCP server of ``fixtures/mcp_server.py`` (stdio or HTTP)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

SERVER = Path(__file__).parent / "fixtures" / "mcp_server.py"
READY_TIMEOUT_S = 90.0


def stdio_server(tmp: Path, **extra: Any) -> dict[str, Any]:
    """A ``.mcp.json`` server entry for the fixture server, logging its calls under ``tmp``."""
    env = {"MCP_TEST_CALL_LOG": str(tmp / "calls.jsonl"), "MCP_TEST_PID_FILE": str(tmp / "server.pid")}
    env.update(extra.pop("env", {}))
    return {"command": sys.executable, "args": [str(SERVER)], "env": env, **extra}


def calls(tmp: Path) -> list[dict[str, Any]]:
    """The calls that reached the server (in order)."""
    log = tmp / "calls.jsonl"
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie counts as gone
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def wait_gone(pid: int, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return not alive(pid)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def http_server(tmp: Path, port: int | None = None) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """The fixture server on streamable HTTP at ``127.0.0.1:<free port>/mcp``; killed at the end."""
    port = port or free_port()
    proc = start_http_server(tmp, port)
    try:
        yield f"http://127.0.0.1:{port}/mcp", proc
    finally:
        stop_http_server(proc)


def start_http_server(tmp: Path, port: int) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "MCP_TEST_CALL_LOG": str(tmp / "calls.jsonl"),
        "MCP_TEST_PID_FILE": str(tmp / "http.pid"),
    }
    proc = subprocess.Popen(
        [sys.executable, str(SERVER), "http", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the HTTP MCP server exited with {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return proc
        time.sleep(0.1)
    stop_http_server(proc)
    raise RuntimeError("the HTTP MCP server did not start")


def stop_http_server(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
