"""With a broker, direct host calls become fleet jobs too (SPEC F-1, K-6, X-1)."""

from __future__ import annotations

import gc
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from kernel import ToolResult
from orchestrator import Agent
from orchestrator.dispatch import CeleryRunner
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


def test_f1_a_publish_handing_back_late_leaves_no_run_state_and_no_open_client(
    fleet: FleetEnv, shared_workers: list[WorkerProcess], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a loaded machine the thread that published a call's job can hand back after the result
    arrived. Its bookkeeping must not recreate the run's hash once the run is closed (a key with no
    TTL, left forever), and closing the agent leaves no Redis client open: a connection found open at
    GC is a ResourceWarning, an error in this suite, raised by whichever test happens to collect it."""
    publish = CeleryRunner._publish
    handed_back = threading.Event()

    def late(self: CeleryRunner, messages: list[dict[str, Any]]) -> None:
        publish(self, messages)
        time.sleep(0.5)  # sent, then descheduled: the worker's result can arrive first
        handed_back.set()

    monkeypatch.setattr(CeleryRunner, "_publish", late)
    state = redis.Redis.from_url(fleet.url, decode_responses=True)
    try:
        before = set(state.scan_iter("a3s:fleet:run:*"))
        with Agent(fleet.settings()) as agent:
            session = agent.session(tmp_path)
            result = session.tool("nap", {"ms": 1})
            assert result.exit_code == 0, result.output
            assert handed_back.wait(10)
            runner = session.runner.remote
            deadline = time.monotonic() + 10
            while runner._background and time.monotonic() < deadline:  # the publish task has ended
                time.sleep(0.01)
            assert not runner._background
            assert set(state.scan_iter("a3s:fleet:run:*")) - before == set()
        gc.collect()  # an unclosed connection would warn here, in this test
    finally:
        state.close()
