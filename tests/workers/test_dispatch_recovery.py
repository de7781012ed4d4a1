"""The fleet fan-in never waits forever for a result a worker reported (SPEC F-1, F-3).

A worker's ``PUBLISH_LUA`` pushes the result onto the run's list *and* keeps a copy in the run hash.
If the list item is lost on the way (popped on a connection that then dropped), the reader's idle
check takes the copy instead. Runs on fakeredis (Lua works there); the live path is covered by the
fleet tests with real workers.
"""

from __future__ import annotations

import asyncio

import fakeredis

from config.settings import Settings
from kernel.result import ToolResult
from orchestrator.dispatch import CeleryRunner, _Run
from workers.protocol import PUBLISH_LUA, RESULTS_TTL_MS, FleetKeys, result_item


async def test_f1_a_result_whose_list_item_was_lost_is_recovered_from_the_run_hash() -> None:
    client = fakeredis.FakeAsyncRedis(decode_responses=True)
    keys = FleetKeys()
    runner = CeleryRunner(app=None, snapshot=dict, settings=Settings(broker_url="redis://fake"), keys=keys)
    runner._client = lambda: client  # type: ignore[method-assign]
    run = _Run("run-1", {})
    loop = asyncio.get_running_loop()
    run.futures = {0: loop.create_future(), 1: loop.create_future()}
    run.task_ids = {0: "t0", 1: "t1"}
    await client.hset(keys.run("run-1"), mapping={"run_id": "run-1", "done": 0})
    publish = client.register_script(PUBLISH_LUA)
    item = result_item(0, "t0", 1, ToolResult.success("ls", "listed").to_json())
    pushed = await publish(keys=[keys.run("run-1"), keys.results("run-1")], args=[item, RESULTS_TTL_MS, 0])
    assert pushed == 1
    await client.delete(keys.results("run-1"))  # the list item is lost

    await runner._check_state(run)

    assert run.futures[0].done() and run.futures[0].result().output == "listed"
    assert not run.futures[1].done()  # nothing reported for branch 1: still waiting
    assert await client.hget(keys.run("run-1"), "done") == "1"


async def test_f1_a_stale_copy_from_another_delivery_is_ignored() -> None:
    client = fakeredis.FakeAsyncRedis(decode_responses=True)
    keys = FleetKeys()
    runner = CeleryRunner(app=None, snapshot=dict, settings=Settings(broker_url="redis://fake"), keys=keys)
    runner._client = lambda: client  # type: ignore[method-assign]
    run = _Run("run-2", {})
    run.futures = {0: asyncio.get_running_loop().create_future()}
    run.task_ids = {0: "t-current"}
    stale = result_item(0, "t-old", 1, ToolResult.success("ls", "old").to_json())
    await client.hset(keys.run("run-2"), mapping={"run_id": "run-2", "r:0": stale})
    await runner._check_state(run)
    assert not run.futures[0].done()
