"""The poison-job guard (DEPENDENCIES §1, SPEC K-8): a job that kills its worker every time is stopped
after ``max_deliveries`` with a typed failure, instead of being requeued forever; the worker lives on."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from orchestrator import Agent
from orchestrator.fanout import Branch

from .conftest import FleetEnv, WorkerFactory

pytestmark = pytest.mark.fleet


def test_k8_job_that_kills_its_worker_stops_after_max_deliveries_with_a_typed_failure(
    fleet: FleetEnv, spawn_worker: WorkerFactory, tmp_path: Path
) -> None:
    env = fleet.with_overrides(A3S_MAX_DELIVERIES="2", A3S_QUEUE=f"{fleet.queue}.poison")
    worker = spawn_worker(env, "poisoned", pool="prefork", concurrency=1)
    with Agent(env.settings()) as agent:
        session = agent.session(tmp_path)
        t0 = time.monotonic()
        result = session.fan_out(
            [Branch("crash", {}, "kills its pool child"), Branch("nap", {"ms": 1}, "healthy")],
            allow_partial_failure=True,
            timeout_ms=60_000,
        )
        elapsed = time.monotonic() - t0
    crash, healthy = result.outcomes
    assert healthy.status == "succeeded"
    assert crash.status == "failed" and crash.result is not None
    kind = crash.result.error_kind or {}
    assert kind["type"] == "cancelled" and kind["reason"] == "poison_job"
    assert kind["deliveries"] == 2 and kind["max_deliveries"] == 2
    assert crash.result.metadata["a3s_fleet"]["delivery"] == 3
    assert elapsed < 30
    assert worker.proc.poll() is None  # the pool replaced its dead children; the worker itself lives
    assert worker.tail(400).count("WorkerLostError") >= 2
