"""Job functions without a Celery worker (SPEC K-1, K-8, F-3): ``run_job`` on the tests' own real Redis.

The envelope decides nothing it may not decide: only ``host_direct``/``agent`` origins, plain JSON;
errors come back as typed data and still reach the run's result list; the poison guard and the
cancel flag stop a job before it runs; an idempotency key makes a second delivery recover the first
one's result instead of running the tool again.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from config.settings import Settings
from kernel.options import SessionOptions
from kernel.policy import PermissionPolicy
from orchestrator import Agent
from workers.jobs import Delivery, return_value, run_job
from workers.protocol import FleetKeys, snapshot_digest, snapshot_json
from workers.runtime import WorkerRuntime

pytestmark = pytest.mark.fleet

TOOLS = "tests.fleet.fixture_tools"


@pytest.fixture(scope="module")
def rt(redis_urls: Callable[[int], str]) -> Iterator[WorkerRuntime]:
    runtime = WorkerRuntime(Settings(broker_url=redis_urls(9), extra_tools=TOOLS, max_deliveries=2))
    yield runtime
    runtime.close()


@pytest.fixture()
def run_id(rt: WorkerRuntime) -> Iterator[str]:
    rid = f"jobtest-{uuid.uuid4().hex[:8]}"
    rt.client.hset(FleetKeys().run(rid), mapping={"run_id": rid, "done": 0})
    yield rid
    rt.client.delete(FleetKeys().run(rid), FleetKeys().results(rid))


def _snapshot(workspace: Path, options: SessionOptions | None = None) -> dict:
    with Agent(Settings(extra_tools=TOOLS)) as agent:
        return agent.session(workspace, options).snapshot()


def _envelope(workspace: Path, run_id: str, **over: object) -> dict:
    env = {
        "snapshot": _snapshot(workspace),
        "tool": "read",
        "args": {"file_path": "README.md"},
        "run_id": run_id,
        "branch_index": 0,
    }
    env.update(over)
    return env


def _published(rt: WorkerRuntime, run_id: str) -> list[dict]:
    return [json.loads(x) for x in rt.client.lrange(FleetKeys().results(run_id), 0, -1)]


def test_f1_job_restores_the_session_and_returns_the_projected_result_as_json(
    rt: WorkerRuntime, run_id: str, workspace: Path
) -> None:
    data = run_job(_envelope(workspace, run_id), Delivery(str(uuid.uuid4())), rt)
    assert data["exit_code"] == 0 and "hello world" in data["output"]
    assert "a3s_tool_result_evidence" in data["metadata"]
    json.dumps(data)  # plain JSON all the way
    [item] = _published(rt, run_id)
    assert item["index"] == 0 and item["result"] == data


@pytest.mark.parametrize("origin", ["trusted_host_nested", "governed_nested", "root"])
def test_k1_a_message_cannot_choose_a_nested_or_unknown_origin(
    rt: WorkerRuntime, run_id: str, workspace: Path, origin: str
) -> None:
    data = run_job(_envelope(workspace, run_id, origin=origin), Delivery(str(uuid.uuid4())), rt)
    assert data["exit_code"] == 1 and data["error_kind"]["type"] == "invalid_argument"
    assert data["error_kind"]["path"] == "origin" and "host_direct" in data["output"]
    assert _published(rt, run_id)[0]["result"] == data  # the run is answered, not left waiting


def test_k1_agent_origin_from_a_message_still_meets_the_snapshot_permission_policy(
    rt: WorkerRuntime, run_id: str, workspace: Path
) -> None:
    snapshot = _snapshot(workspace, SessionOptions(permission_policy=PermissionPolicy(deny=("read",))))
    env = _envelope(workspace, run_id, origin="agent", snapshot=snapshot)
    denied = run_job(env, Delivery(str(uuid.uuid4())), rt)
    assert denied["error_kind"]["type"] == "permission_denied"
    trusted = run_job({**env, "origin": "host_direct", "branch_index": 1}, Delivery(str(uuid.uuid4())), rt)
    assert trusted["exit_code"] == 0


def test_k8_unknown_envelope_fields_and_broken_snapshots_are_typed_failures(
    rt: WorkerRuntime, run_id: str, workspace: Path
) -> None:
    extra = run_job({**_envelope(workspace, run_id), "pickle": "x"}, Delivery(str(uuid.uuid4())), rt)
    assert extra["error_kind"]["type"] == "invalid_argument" and extra["error_kind"]["path"] == "pickle"
    broken = run_job(
        _envelope(workspace, run_id, snapshot={"schema": "nope"}, branch_index=1),
        Delivery(str(uuid.uuid4())),
        rt,
    )
    assert broken["error_kind"]["type"] == "invalid_argument" and "snapshot" in broken["output"]
    assert len(_published(rt, run_id)) == 2


def test_k8_delivery_beyond_max_deliveries_returns_poison_failure_without_running(
    rt: WorkerRuntime, run_id: str, workspace: Path
) -> None:
    task_id = str(uuid.uuid4())
    rt.client.set(FleetKeys().deliveries(task_id), 2)  # two earlier deliveries died with their worker
    env = _envelope(workspace, run_id, tool="append_once", args={"path": "side.txt", "key": "k"})
    data = run_job(env, Delivery(task_id, redelivered=True), rt)
    assert data["error_kind"] == {
        "type": "cancelled",
        "op": "a3s.tool",
        "reason": "poison_job",
        "deliveries": 2,
        "max_deliveries": 2,
    }
    assert not (workspace / "side.txt").exists()


def test_x3_cancelled_branch_does_not_start(rt: WorkerRuntime, run_id: str, workspace: Path) -> None:
    task_id = str(uuid.uuid4())
    rt.client.set(FleetKeys().cancel(task_id), 1, ex=60)
    env = _envelope(workspace, run_id, tool="append_once", args={"path": "side.txt", "key": "k"})
    data = run_job(env, Delivery(task_id), rt)
    assert data["error_kind"]["type"] == "cancelled"
    assert not (workspace / "side.txt").exists()


def test_f3_second_delivery_with_the_same_idempotency_key_recovers_instead_of_rerunning(
    rt: WorkerRuntime, run_id: str, workspace: Path
) -> None:
    env = _envelope(
        workspace,
        run_id,
        tool="append_once",
        args={"path": "side.txt", "key": "k"},
        idempotency_key=f"{run_id}:0",
    )
    task_id = str(uuid.uuid4())
    first = run_job(env, Delivery(task_id), rt)
    (workspace / "side.txt").write_text("")  # were the tool to run again, it would append again
    second = run_job(env, Delivery(task_id, redelivered=True), rt)
    assert first["output"] == second["output"] == "k appended"
    assert second["metadata"]["a3s_fleet"]["recovered_attempt"] == 1
    assert (workspace / "side.txt").read_text() == ""
    # Same key, other arguments: never a cross-query recovery (F-3).
    other = run_job({**env, "args": {"path": "side.txt", "key": "j"}}, Delivery(str(uuid.uuid4())), rt)
    assert other["output"] == "j appended"


def test_f3_first_delivery_of_a_read_only_call_skips_the_counter_but_redeliveries_count(
    rt: WorkerRuntime, run_id: str, workspace: Path
) -> None:
    """A read-only, idempotent call saves the delivery round trip only on its first delivery."""
    first = str(uuid.uuid4())
    data = run_job(_envelope(workspace, run_id), Delivery(first), rt)
    assert data["exit_code"] == 0 and data["metadata"]["a3s_fleet"]["delivery"] == 1
    assert rt.client.get(FleetKeys().deliveries(first)) is None
    again = run_job(_envelope(workspace, run_id), Delivery(first, redelivered=True), rt)
    assert again["metadata"]["a3s_fleet"]["delivery"] == 2  # the uncounted first one + this one


def test_k8_poison_guard_still_stops_a_read_only_job_that_keeps_killing_workers(
    rt: WorkerRuntime, run_id: str, workspace: Path
) -> None:
    task_id = str(uuid.uuid4())
    rt.client.set(FleetKeys().deliveries(task_id), 1)  # one counted redelivery died too
    data = run_job(_envelope(workspace, run_id), Delivery(task_id, redelivered=True), rt)
    assert data["error_kind"]["reason"] == "poison_job" and data["error_kind"]["deliveries"] == 2


def test_f1_envelope_names_its_snapshot_by_digest_and_a_worker_reads_it_once(
    rt: WorkerRuntime, run_id: str, workspace: Path
) -> None:
    """The snapshot crosses once per run: stored under its content-addressed key, named by digest in
    every envelope; the worker restores it on a miss and serves later jobs from its cache."""
    body = snapshot_json(_snapshot(workspace))
    digest = snapshot_digest(body)
    key = FleetKeys().snapshot(digest)
    rt.client.set(key, body, px=60_000)
    env = {"snapshot_digest": digest, "tool": "read", "args": {"file_path": "README.md"}, "run_id": run_id}
    first = run_job({**env, "branch_index": 0}, Delivery(str(uuid.uuid4())), rt)
    assert first["exit_code"] == 0 and "hello world" in first["output"]
    rt.client.delete(key)
    cached = run_job({**env, "branch_index": 1}, Delivery(str(uuid.uuid4())), rt)
    assert cached["exit_code"] == 0 and "hello world" in cached["output"]
    assert [item["index"] for item in _published(rt, run_id)] == [0, 1]


def test_k8_a_snapshot_that_is_gone_or_does_not_match_its_digest_is_a_typed_failure(
    rt: WorkerRuntime, run_id: str, workspace: Path
) -> None:
    snapshot = _snapshot(workspace)
    unknown = "0" * 64
    gone = run_job(
        {"snapshot_digest": unknown, "tool": "read", "args": {}, "run_id": run_id, "branch_index": 0},
        Delivery(str(uuid.uuid4())),
        rt,
    )
    assert gone["error_kind"]["type"] == "transport" and gone["error_kind"]["op"] == "redis"
    # Inline snapshot and digest disagree: the worker never caches a session under a wrong digest.
    forged = run_job(
        _envelope(workspace, run_id, snapshot=snapshot, snapshot_digest="1" * 64, branch_index=1),
        Delivery(str(uuid.uuid4())),
        rt,
    )
    assert forged["error_kind"]["type"] == "invalid_argument"
    assert forged["error_kind"]["path"] == "snapshot_digest"
    # A stored body that is not what its key names.
    rt.client.set(FleetKeys().snapshot("2" * 64), snapshot_json(snapshot), px=60_000)
    tampered = run_job(
        {"snapshot_digest": "2" * 64, "tool": "read", "args": {}, "run_id": run_id, "branch_index": 2},
        Delivery(str(uuid.uuid4())),
        rt,
    )
    rt.client.delete(FleetKeys().snapshot("2" * 64))
    assert tampered["error_kind"]["type"] == "invalid_argument" and "digest" in tampered["output"]
    neither = run_job(
        {"tool": "read", "args": {}, "run_id": run_id, "branch_index": 3}, Delivery(str(uuid.uuid4())), rt
    )
    assert neither["error_kind"]["type"] == "invalid_argument"
    assert sorted(item["index"] for item in _published(rt, run_id)) == [0, 1, 2, 3]


def test_f1_a_job_whose_caller_ignores_celerys_result_returns_only_a_summary() -> None:
    """The full result travels on the run's result list; Celery's return value is a short summary."""
    data = {"name": "read", "output": "x" * 10_000, "exit_code": 1, "error_kind": {"type": "timeout"}}
    assert return_value(data) == {"name": "read", "exit_code": 1, "error_kind": "timeout"}


def test_f3_a_cancelled_step_is_stored_unfinished_and_its_next_delivery_runs_it(
    rt: WorkerRuntime, run_id: str, workspace: Path
) -> None:
    """A workflow whose driver was cancelled (Ctrl-C, a closed session) cancels its steps' jobs; resumed,
    it sends the same step again under the same idempotency key. Before, the cancelled job was stored
    as the step's *completed* result: the resumed run recovered the cancellation and never ran the
    step. Now the store has it as failed, and the next delivery claims and runs it."""
    env = _envelope(
        workspace,
        run_id,
        tool="append_once",
        args={"path": "side.txt", "key": "k", "delay_ms": 2000},
        idempotency_key=f"wf:{run_id}:step",
    )
    task_id = str(uuid.uuid4())
    flag = threading.Timer(0.3, lambda: rt.client.set(FleetKeys().cancel(task_id), 1, ex=60))
    flag.start()
    try:
        first = run_job(env, Delivery(task_id), rt)
    finally:
        flag.cancel()
    assert first["error_kind"]["type"] == "cancelled", first
    assert not (workspace / "side.txt").exists()  # stopped before its effect
    again = run_job(env, Delivery(str(uuid.uuid4())), rt)  # the resumed run's job for the same step
    assert again["exit_code"] == 0 and again["output"] == "k appended", again
    assert "recovered_attempt" not in again["metadata"]["a3s_fleet"]
    assert (workspace / "side.txt").read_text() == "k\n"
