"""The fleet's workflow history (a Redis stream per run): the same size cap as the file log, and any
step output is storable (SPEC F-3, F-7, K-8). A real Redis (the test session's own); no workers.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable

import pytest

from flows.workflow import log
from flows.workflow.events import envelope
from kernel.errors import BudgetExhausted
from orchestrator.dispatch_workflow import RedisEventLogs


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
