"""The fleet's workflow history (a Redis stream per run): the same size cap as the file log, any
step output is storable, and a run belongs to one workspace (SPEC F-3, F-7, K-8). A real Redis (the
test session's own); no workers.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from flows.workflow import log
from flows.workflow.events import envelope
from kernel.errors import BudgetExhausted, PermissionDenied
from orchestrator import Agent
from orchestrator.dispatch_workflow import RedisEventLogs

from .conftest import FleetEnv


def _step(run_id: str, seq: int, output: str) -> dict[str, object]:
    event = {"type": "step_completed", "step_id": f"s{seq}", "output": {"name": "ls", "output": output}}
    return envelope(run_id, seq, event, 0)


def test_f3_the_fleet_history_is_capped_like_the_file_log(
    redis_urls: Callable[[int], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, the stream took every event (and every resume XRANGEd it whole)."""
    monkeypatch.setattr(log, "MAX_LOG_BYTES", 16 * 1024)
    logs = RedisEventLogs(redis_urls(7))
    run_id = f"cap-{uuid.uuid4().hex[:8]}"

    async def scenario() -> tuple[int, str]:
        run = await logs.open_for_run(run_id)
        try:
            await run.load()
            for seq in range(1, 4):
                await run.submit(_step(run_id, seq, "x" * 4000))
            try:
                await run.submit(_step(run_id, 4, "x" * 8000))
            except BudgetExhausted as err:
                refused = err.to_kind()["resource"]
            else:
                refused = ""
        finally:
            await run.close()
        again = await logs.open_for_run(run_id)  # a new driver counts what is there
        try:
            await again.load()
            with pytest.raises(BudgetExhausted):
                await again.submit(_step(run_id, 5, "x" * 8000))
        finally:
            await again.close()
        return len(await logs.read(run_id)), refused

    count, refused = asyncio.run(scenario())
    assert (count, refused) == (3, "workflow_history")


def test_k8_a_step_output_with_a_lone_surrogate_is_stored_and_read_back(
    redis_urls: Callable[[int], str],
) -> None:
    """A step listing a file whose name is not UTF-8 (Python holds the byte as a surrogate escape).
    Before, redis-py's strict encoding raised UnicodeEncodeError out of the history write — not a
    typed error, and not caught by the driver's step handling."""
    logs = RedisEventLogs(redis_urls(7))
    run_id = f"sur-{uuid.uuid4().hex[:8]}"

    async def scenario() -> list[dict[str, object]]:
        run = await logs.open_for_run(run_id)
        try:
            await run.load()
            await run.submit(_step(run_id, 1, "bad\udcff.txt"))
        finally:
            await run.close()
        return await logs.read(run_id)

    (stored,) = asyncio.run(scenario())
    assert stored["event"]["output"]["output"] == "bad\udcff.txt"  # type: ignore[index]


def test_f3_a_run_id_never_resumes_another_workspaces_run(fleet: FleetEnv, tmp_path: Path) -> None:
    """The stream is keyed by run id alone and shared by every session of the fleet. Before, a session
    on workspace B naming workspace A's run id replayed A's history: A's completed steps came back as
    B's results (and B's events were appended to A's run). Now the run belongs to the workspace that
    first drove it. No workers needed: neither script runs a step."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    run_id = f"owned-{uuid.uuid4().hex[:8]}"
    src = "async function run(wf, input) { return input.query; }"
    with Agent(fleet.settings()) as agent:
        first = agent.session(tmp_path / "a").workflow(source=src, input={"query": "a"}, run_id=run_id)
        assert first.exit_code == 0, first.output
        other = agent.session(tmp_path / "b").workflow(source=src, input={"query": "b"}, run_id=run_id)
        assert other.exit_code != 0
        assert other.error_kind is not None
        assert other.error_kind["type"] == "permission_denied"
        assert other.error_kind["reason"] == "workflow_run_of_another_workspace"
        again = agent.session(tmp_path / "a").workflow(source=src, input={"query": "a"}, run_id=run_id)
        assert again.exit_code == 0, again.output  # its own workspace resumes it
    envelopes = asyncio.run(RedisEventLogs(fleet.url).read(run_id))
    assert all(e["event"].get("input", {}).get("query") != "b" for e in envelopes)


def test_f3_the_owner_check_releases_the_run_lock(redis_urls: Callable[[int], str]) -> None:
    run_id = f"owned-{uuid.uuid4().hex[:8]}"

    async def scenario() -> str:
        mine = await RedisEventLogs(redis_urls(7), "/ws/a").open_for_run(run_id)
        await mine.close()
        with pytest.raises(PermissionDenied) as refused:
            await RedisEventLogs(redis_urls(7), "/ws/b").open_for_run(run_id)
        assert not await RedisEventLogs(redis_urls(7)).running(run_id)  # the refusal held no lease
        again = await RedisEventLogs(redis_urls(7), "/ws/a").open_for_run(run_id)
        await again.close()
        return str(refused.value.to_kind()["reason"])

    assert asyncio.run(scenario()) == "workflow_run_of_another_workspace"
