"""Special files in the workspace never block a call (issue 15 items 4 and 7, B-6).

A FIFO (and a socket) planted next to ordinary files: ``read`` refuses it with a typed error,
``grep`` (both engines), ``glob``, ``bm25`` and ``ls`` answer at once, and nothing waits for the
deadline. Every call runs with a 20 s deadline; a blocked open would hit it, so each call must
also come back well before it (a generous bound: this is a hang check, not a speed test).
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from kernel import SessionOptions
from orchestrator import Agent

HANG_BOUND_S = 15.0


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / "src" / "a.py").write_text("needle = 1\n")
    (root / "src" / "b.txt").write_text("another needle\n")
    os.mkfifo(root / "src" / "pipe.py")
    os.mkfifo(root / "pipe")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(root / "src" / "sock.py"))
    sock.close()
    return root


@pytest.mark.parametrize("engine", ["python", "rg"])
def test_fifo_never_blocks_search_and_read(ws: Path, engine: str) -> None:
    if engine == "rg":
        from tools.search.grep import rg_binary

        if rg_binary() is None:
            pytest.skip("rg is not installed")
    options = SessionOptions(artifact_store="memory", services={"search_engine": engine})
    calls: list[tuple[str, dict[str, Any]]] = [
        ("search", {"mode": "grep", "query": "needle"}),
        ("search", {"mode": "grep", "query": "needle", "path": "src"}),
        ("search", {"mode": "grep", "query": "needle", "path": "pipe"}),
        ("search", {"mode": "grep", "query": "needle", "path": "src/pipe.py"}),
        ("search", {"mode": "grep", "query": "needle", "output_mode": "count"}),
        ("search", {"mode": "glob", "query": "*.py"}),
        ("search", {"mode": "bm25", "query": "needle"}),
        ("search", {"mode": "bm25", "query": "needle", "path": "src/pipe.py"}),
        ("ls", {"path": "src"}),
        ("read", {"file_path": "pipe"}),
        ("read", {"file_path": "src/sock.py"}),
        ("read", {"files": [{"path": "src/pipe.py"}, {"path": "src/a.py"}]}),
    ]
    with Agent() as agent:
        session = agent.session(ws, options)
        for name, args in calls:
            t0 = time.monotonic()
            res = session.tool(name, args)
            elapsed = time.monotonic() - t0
            assert elapsed < HANG_BOUND_S, (name, args, elapsed)
            assert not (res.error_kind or {}).get("type") == "timeout", (name, args, res.output)
            if name == "read" and "files" not in args:
                assert res.error_kind is not None and res.error_kind["type"] == "invalid_argument"
                assert "not a regular file" in res.output
            if name == "search" and args.get("mode") == "grep" and "path" not in args:
                assert "src/a.py" in res.output and "pipe" not in res.output
        batch = session.tool("read", {"files": [{"path": "src/pipe.py"}, {"path": "src/a.py"}]})
        assert "needle = 1" in batch.output and "not a regular file" in batch.output


def test_fifo_is_refused_by_write_and_edit_without_blocking(ws: Path) -> None:
    with Agent() as agent:
        session = agent.session(ws, SessionOptions(artifact_store="memory"))
        for name, args in [
            ("write", {"file_path": "pipe", "content": "x"}),
            ("edit", {"file_path": "pipe", "old_string": "a", "new_string": "b"}),
            ("patch", {"diff": "--- a/pipe\n+++ b/pipe\n@@ -1 +1 @@\n-a\n+b\n"}),
        ]:
            t0 = time.monotonic()
            res = session.tool(name, args)
            assert time.monotonic() - t0 < HANG_BOUND_S
            assert res.error_kind is not None and res.error_kind["type"] == "invalid_argument", res.output
    assert (ws / "pipe").exists() and not (ws / "pipe").is_file()
