"""Fleet benchmark (issue 5): a3s fan-out jobs vs bare Celery tasks, on the same Redis, same pool.

    python -m bench.fleet [--redis redis://127.0.0.1:6379/8] [--pool prefork] [--concurrency 2]
                          [--rounds 30] [--jobs 512]

1. Round trip of a 32-branch fan-out of no-op *tool* jobs (``session.fan_out``: snapshot in every
   envelope, delivery counter, step-store claim/complete, kernel pipeline with projection and
   evidence, result list) vs a bare Celery ``group`` of 32 no-op tasks (``.get()``). Target <= 1.5x.
2. Sustained throughput: ``--jobs`` no-op tool jobs as concurrent 32-branch fan-outs vs the same
   number of bare tasks in one group. Target >= 0.8x.

Each side gets its own freshly started worker (same ``--pool`` and ``--concurrency``, task events on,
no mingle/gossip) on its own queue; the a3s side is also measured with the result-backend polling
fan-in (``wait="poll"``) for comparison. Medians over ``--rounds`` after a warm-up.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
READY_S = 60.0
WARMUP = 5


@contextmanager
def worker(args: list[str], env: dict[str, str], log: Path) -> Iterator[None]:
    with open(log, "wb") as out:
        proc = subprocess.Popen(args, env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + READY_S
        while " ready." not in log.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"worker did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.05)
        yield
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)


def _env(redis_url: str, queue: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("A3S_")}
    env.update(
        A3S_BROKER_URL=redis_url,
        A3S_QUEUE=queue,
        A3S_EXTRA_TOOLS="bench.fleet_support",
        A3S_LOG_LEVEL="WARNING",
        PYTHONPATH=str(ROOT),
    )
    return env


def bench_a3s(opts: argparse.Namespace, log_dir: Path) -> dict[str, float]:
    from config.settings import Settings
    from orchestrator import Agent
    from orchestrator.dispatch import CeleryRunner
    from orchestrator.fanout import Branch, FanOutPolicy, fan_out

    queue = f"bench.a3s.{uuid.uuid4().hex[:6]}"
    env = _env(opts.redis, queue)
    args = [str(BIN / "a3s-fleet"), "worker", "--pool", opts.pool, "--concurrency", str(opts.concurrency), "--loglevel", "INFO"]
    args += ["--hostname", f"bench-a3s-{uuid.uuid4().hex[:4]}@%h"]
    out: dict[str, float] = {}
    settings = Settings(broker_url=opts.redis, queue=queue, extra_tools="bench.fleet_support")
    with worker(args, {**env, "CELERY_LOG_LEVEL": "WARNING"}, log_dir / "a3s.log"), tempfile.TemporaryDirectory() as ws:
        with Agent(settings) as agent:
            session = agent.session(ws)
            branches = [Branch("noop", {}, f"noop {i}") for i in range(32)]
            for mode in ("list", "poll"):
                if mode == "poll":
                    session.runner = CeleryRunner(agent.fleet_app(), session.snapshot, settings, session_id=session.id, wait="poll")
                times = []
                for i in range(WARMUP + opts.rounds):
                    t0 = time.perf_counter()
                    result = session.fan_out(branches)
                    if result.status != "complete":
                        raise SystemExit(f"a3s fan-out failed: {result.to_json()}")
                    if i >= WARMUP:
                        times.append(time.perf_counter() - t0)
                out[f"rtt_{mode}"] = statistics.median(times)
                if mode == "poll":
                    agent.loop.run(session.runner.aclose())  # type: ignore[attr-defined]
            session.runner = CeleryRunner(agent.fleet_app(), session.snapshot, settings, session_id=session.id)
            runs = max(1, opts.jobs // 32)

            async def many() -> list[Any]:
                policy = FanOutPolicy()
                return await asyncio.gather(*(fan_out(session.runner, f"tp-{uuid.uuid4().hex[:8]}", branches, policy) for _ in range(runs)))

            agent.loop.run(many())  # warm-up
            t0 = time.perf_counter()
            results = agent.loop.run(many())
            elapsed = time.perf_counter() - t0
            if any(r.status != "complete" for r in results):
                raise SystemExit("a3s throughput run failed")
            out["throughput"] = runs * 32 / elapsed
            agent.loop.run(session.runner.aclose())  # type: ignore[attr-defined]
    return out


def bench_bare(opts: argparse.Namespace, log_dir: Path) -> dict[str, float]:
    from celery import group

    from bench.fleet_support import BARE_TASK

    queue = f"bench.bare.{uuid.uuid4().hex[:6]}"
    env = _env(opts.redis, queue)
    pool = opts.pool
    args = [sys.executable, "-m", "celery", "-A", "bench.fleet_support:app", "worker", "--pool", pool]
    args += ["--concurrency", str(opts.concurrency), "--queues", queue, "--task-events", "--without-mingle", "--without-gossip"]
    args += ["--loglevel", "INFO", "--hostname", f"bench-bare-{uuid.uuid4().hex[:4]}@%h"]
    os.environ.update(A3S_BROKER_URL=opts.redis, A3S_QUEUE=queue)
    from bench.fleet_support import make_bare_app

    app = make_bare_app()
    noop = app.tasks[BARE_TASK]
    out: dict[str, float] = {}
    try:
        with worker(args, env, log_dir / "bare.log"):
            times = []
            for i in range(WARMUP + opts.rounds):
                t0 = time.perf_counter()
                group(noop.s() for _ in range(32)).apply_async().get(timeout=60, interval=0.005)
                if i >= WARMUP:
                    times.append(time.perf_counter() - t0)
            out["rtt"] = statistics.median(times)
            n = max(32, opts.jobs // 32 * 32)
            group(noop.s() for _ in range(n)).apply_async().get(timeout=120, interval=0.005)  # warm-up
            t0 = time.perf_counter()
            group(noop.s() for _ in range(n)).apply_async().get(timeout=120, interval=0.005)
            out["throughput"] = n / (time.perf_counter() - t0)
    finally:
        app.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/8")
    parser.add_argument("--pool", default="prefork", choices=("prefork", "threads", "solo"))
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--jobs", type=int, default=512)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as logs:
        a3s = bench_a3s(opts, Path(logs))
        bare = bench_bare(opts, Path(logs))
    rtt_ratio = a3s["rtt_list"] / bare["rtt"]
    tp_ratio = a3s["throughput"] / bare["throughput"]
    print(f"fleet benchmark — redis {opts.redis}, pool {opts.pool} x{opts.concurrency}, {opts.rounds} rounds, {opts.jobs} jobs")
    print(f"  32-branch round trip   a3s fan-out {a3s['rtt_list'] * 1000:7.1f} ms   bare group {bare['rtt'] * 1000:7.1f} ms   "
          f"ratio {rtt_ratio:.2f}x  (target <= 1.5x) {'OK' if rtt_ratio <= 1.5 else 'MISSED'}")  # fmt: skip
    print(f"    (result-backend polling fan-in instead of the result list: {a3s['rtt_poll'] * 1000:.1f} ms)")
    print(f"  sustained throughput   a3s {a3s['throughput']:7.0f} jobs/s   bare {bare['throughput']:7.0f} tasks/s   "
          f"ratio {tp_ratio:.2f}x  (target >= 0.8x) {'OK' if tp_ratio >= 0.8 else 'MISSED'}")  # fmt: skip


if __name__ == "__main__":
    main()
