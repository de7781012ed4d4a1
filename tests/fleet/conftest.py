"""Fleet fixtures: the test session's own ``redis-server`` (``tests/redis_server.py``), a unique queue per
test session, and real ``a3s-fleet worker`` subprocesses, each in its own process group so teardown (and
the kill test) can SIGKILL a worker with all its pool children — no orphan processes survive a test.

Workers load ``tests.fleet.fixture_tools`` through ``A3S_EXTRA_TOOLS``; so does every ``Agent`` built
from ``FleetEnv.settings()``. ``FleetEnv.env`` is the environment workers, Flower and the CLI get.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from config.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
EXTRA_TOOLS = "tests.fleet.fixture_tools"
WORKER_READY_S = 90.0  # a bound, not a timing assertion: a loaded machine starts workers slowly
STOP_GRACE_S = 5.0


@dataclass
class FleetEnv:
    url: str
    queue: str
    overrides: dict[str, str] = field(default_factory=dict)

    @property
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("A3S_")}
        env.update(
            {
                "A3S_BROKER_URL": self.url,
                "A3S_QUEUE": self.queue,
                "A3S_EXTRA_TOOLS": EXTRA_TOOLS,
                "PYTHONPATH": os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
                "PYTHONUNBUFFERED": "1",
            }
        )
        env.update(self.overrides)
        return env

    def settings(self, **update: Any) -> Settings:
        values: dict[str, Any] = {"broker_url": self.url, "queue": self.queue, "extra_tools": EXTRA_TOOLS}
        for key, value in self.overrides.items():
            values[key.removeprefix("A3S_").lower()] = value
        values.update(update)
        return Settings(**values)

    def with_overrides(self, **overrides: str) -> FleetEnv:
        return FleetEnv(self.url, self.queue, {**self.overrides, **overrides})


@pytest.fixture(scope="session")
def fleet_redis(redis_urls: Callable[[int], str]) -> str:
    return redis_urls(9)


@pytest.fixture(scope="session")
def fleet(fleet_redis: str) -> FleetEnv:
    return FleetEnv(fleet_redis, f"a3s.test.{uuid.uuid4().hex[:8]}")


class WorkerProcess:
    """One ``a3s-fleet worker`` in its own session (process group)."""

    def __init__(self, env: FleetEnv, name: str, log: Path, *, pool: str, concurrency: int) -> None:
        self.name = f"{name}-{uuid.uuid4().hex[:6]}@{socket.gethostname()}"
        self.log = log
        args = [str(BIN / "a3s-fleet"), "worker", "--pool", pool, "--concurrency", str(concurrency)]
        args += ["--hostname", self.name, "--loglevel", "INFO"]
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(
                args, env=env.env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def wait_ready(self, timeout_s: float = WORKER_READY_S) -> WorkerProcess:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"worker {self.name} exited {self.proc.returncode}:\n{self.tail()}")
            if f"{self.name} ready." in self.log.read_text(errors="replace"):
                return self
            time.sleep(0.05)
        raise AssertionError(f"worker {self.name} not ready after {timeout_s}s:\n{self.tail()}")

    def tail(self, n: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])

    def kill(self, sig: int = signal.SIGKILL) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                pass
        # Whatever is left in the group (pool children included) goes, whether the parent exited or not.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)


class WorkerFactory:
    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.started: list[WorkerProcess] = []

    def __call__(
        self,
        env: FleetEnv,
        name: str = "w",
        *,
        pool: str = "threads",
        concurrency: int = 2,
        wait: bool = True,
    ) -> WorkerProcess:
        worker = WorkerProcess(
            env, name, self.log_dir / f"{name}-{len(self.started)}.log", pool=pool, concurrency=concurrency
        )
        self.started.append(worker)
        return worker.wait_ready() if wait else worker

    def stop_all(self) -> None:
        for worker in self.started:
            worker.stop()


@pytest.fixture()
def spawn_worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerFactory]:
    factory = WorkerFactory(tmp_path_factory.mktemp("worker-logs"))
    yield factory
    factory.stop_all()


@pytest.fixture(scope="module")
def shared_workers(
    fleet: FleetEnv, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[WorkerProcess]]:
    """Two workers (threads ×4 and prefork ×2) on the session queue, shared by a test module."""
    factory = WorkerFactory(tmp_path_factory.mktemp("shared-worker-logs"))
    try:
        a = factory(fleet, "threads", pool="threads", concurrency=4, wait=False)
        b = factory(fleet, "prefork", pool="prefork", concurrency=2, wait=False)
        yield [a.wait_ready(), b.wait_ready()]
    finally:
        factory.stop_all()
