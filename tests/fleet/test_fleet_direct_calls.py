"""With a broker, direct host calls become fleet jobs too (SPEC F-1, K-6, X-1)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from kernel import ToolResult
from orchestrator import Agent
from tests.fleet.conftest import FleetEnv, WorkerProcess

pytestmark = pytest.mark.fleet


def test_f1_direct_calls_run_on_workers_and_keep_session_state(
    fleet: FleetEnv, shared_workers: list[WorkerProcess], tmp_path: Path
) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "here.txt").write_text("inside sub\n")
    with Agent(fleet.settings()) as agent:
        session = agent.session(tmp_path)
        assert session.remote
        first = session.tool("bash", {"command": "cd sub && pwd"})
        assert first.exit_code == 0, first.output
        assert first.metadata["a3s_fleet"]["worker"] in {w.name for w in shared_workers}
        # The worker's bash cwd came back with the result: the next call starts in sub/.
        assert session.bash("cat here.txt").startswith("inside sub")
        assert "inside sub" in session.read_file("sub/here.txt")
        missing = session.tool("read", {"file_path": "nope.txt"})
        assert missing.error_kind == {"type": "not_found", "path": "nope.txt"}


def test_k6_closing_the_session_cancels_a_remote_direct_call(
    fleet: FleetEnv, shared_workers: list[WorkerProcess], tmp_path: Path
) -> None:
    with Agent(fleet.settings()) as agent:
        session = agent.session(tmp_path)
        box: list[ToolResult] = []
        caller = threading.Thread(target=lambda: box.append(session.tool("nap", {"ms": 20_000, "tag": "x"})))
        caller.start()
        time.sleep(1.5)  # the job is running on a worker
        t0 = time.monotonic()
        session.close()
        caller.join(15)
        assert not caller.is_alive() and time.monotonic() - t0 < 10
        assert box and box[0].exit_code == 1 and box[0].error_kind is not None
        assert box[0].error_kind["type"] == "cancelled"
