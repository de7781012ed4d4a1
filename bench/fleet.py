"""Fleet benchmark (issue 5): a3s fan-out jobs vs bare Celery tasks, on the same Redis, same pool.

    python -m bench.fleet [--redis redis://127.0.0.1:6379/8] [--pool prefork] [--concurrency 2]
                          [--rounds 30] [--jobs 512]

1. Round trip of a 32-branch fan-out of no-op *tool* jobs (``session.fan_out``: envelopes naming
   the run's stored snapshot by digest, kernel pipeline with projection and evidence, the session's
   event stream, result list; the no-op is read-only and idempotent, so no step-store claim) vs a bare Celery ``group`` of 32 no-op tasks (``.get()``). Target <= 1.5x.
2. Sustained throughput: ``--jobs`` no-op tool jobs as concurrent 32-branch fan-outs vs the same
   number of bare tasks in one group. Target >= 0.8x.

Each side gets its own freshly started worker (same ``--pool`` and ``--concurrency``, task events on,
no mingle/gossip) on its own queue; both run side by side and the rounds alternate (a3s, bare, a3s
with the result-backend polling fan-in ``wait="poll"`` for comparison), so other load on the machine
falls on both alike. Medians over ``--rounds`` after a warm-up; throughput: median of 3 pairs.
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
THROUGHPUT_REPEATS = 3


@contextmanager
def worker(args: list[str], env: dict[str, str], log: Path) -> Iterator[None]:
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            args, env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
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


def run_bench(opts: argparse.Namespace, log_dir: Path) -> dict[str, float]:
    """Both workers run side by side; a3s and bare rounds alternate, so load from anything else on
    the machine falls on both sides alike."""
    from celery import group

    from bench.fleet_support import BARE_TASK, make_bare_app
    from config.settings import Settings
    from orchestrator import Agent
    from orchestrator.dispatch import CeleryRunner
    from orchestrator.fanout import Branch, FanOutPolicy, fan_out

    tag = uuid.uuid4().hex[:6]
    a3s_queue, bare_queue = f"bench.a3s.{tag}", f"bench.bare.{tag}"
    common = ["--pool", opts.pool, "--concurrency", str(opts.concurrency), "--loglevel", "INFO"]
    a3s_args = [str(BIN / "a3s-fleet"), "worker", *common, "--hostname", f"bench-a3s-{tag}@%h"]
    bare_args = [sys.executable, "-m", "celery", "-A", "bench.fleet_support:app", "worker", *common]
    bare_args += [
        "--queues",
        bare_queue,
        "--task-events",
        "--without-mingle",
        "--without-gossip",
        "--hostname",
        f"bench-bare-{tag}@%h",
    ]
    settings = Settings(broker_url=opts.redis, queue=a3s_queue, extra_tools="bench.fleet_support")
    os.environ.update(A3S_BROKER_URL=opts.redis, A3S_QUEUE=bare_queue)
    bare_app = make_bare_app()
    noop = bare_app.tasks[BARE_TASK]
    branches = [Branch("noop", {}, f"noop {i}") for i in range(32)]
    n_jobs = max(32, opts.jobs // 32 * 32)
    times: dict[str, list[float]] = {"list": [], "poll": [], "bare": []}
    rates: dict[str, list[float]] = {"a3s": [], "bare": []}
    cpu: dict[str, list[float]] = {"a3s": [], "bare": []}  # the client's own CPU per job
    try:
        with (
            worker(a3s_args, _env(opts.redis, a3s_queue), log_dir / "a3s.log"),
            worker(bare_args, _env(opts.redis, bare_queue), log_dir / "bare.log"),
            tempfile.TemporaryDirectory() as ws,
            Agent(settings) as agent,
        ):
            session = agent.session(ws)
            runners = {
                "list": session.runner,
                "poll": CeleryRunner(
                    agent.fleet_app(), session.snapshot, settings, session_id=session.id, wait="poll"
                ),
            }

            def a3s_round(mode: str) -> float:
                session.runner = runners[mode]
                t0 = time.perf_counter()
                result = session.fan_out(branches)
                if result.status != "complete":
                    raise SystemExit(f"a3s fan-out failed: {result.to_json()}")
                return time.perf_counter() - t0

            def bare_round(n: int) -> float:
                t0 = time.perf_counter()
                group(noop.s() for _ in range(n)).apply_async().get(timeout=120, interval=0.005)
                return time.perf_counter() - t0

            async def a3s_many() -> list[Any]:
                runs = [
                    fan_out(runners["list"], f"tp-{uuid.uuid4().hex[:8]}", branches, FanOutPolicy())
                    for _ in range(n_jobs // 32)
                ]
                return await asyncio.gather(*runs)

            for i in range(WARMUP + opts.rounds):
                for key, took in (
                    ("list", a3s_round("list")),
                    ("bare", bare_round(32)),
                    ("poll", a3s_round("poll")),
                ):
                    if i >= WARMUP:
                        times[key].append(took)
            for i in range(1 + THROUGHPUT_REPEATS):
                t0, c0 = time.perf_counter(), time.process_time()
                results = agent.loop.run(a3s_many())
                a3s_rate = n_jobs / (time.perf_counter() - t0)
                cpu["a3s"].append((time.process_time() - c0) / n_jobs)
                if any(r.status != "complete" for r in results):
                    raise SystemExit("a3s throughput run failed")
                c0 = time.process_time()
                bare_rate = n_jobs / bare_round(n_jobs)
                cpu["bare"].append((time.process_time() - c0) / n_jobs)
                if i:  # the first pair is a warm-up
                    rates["a3s"].append(a3s_rate)
                    rates["bare"].append(bare_rate)
            agent.loop.run(runners["poll"].aclose())  # type: ignore[attr-defined]
    finally:
        bare_app.close()
    return {
        "rtt_list": statistics.median(times["list"]),
        "rtt_poll": statistics.median(times["poll"]),
        "rtt_bare": statistics.median(times["bare"]),
        "tp_a3s": statistics.median(rates["a3s"]),
        "tp_bare": statistics.median(rates["bare"]),
        "cpu_a3s": statistics.median(cpu["a3s"]),
        "cpu_bare": statistics.median(cpu["bare"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/8")
    parser.add_argument("--pool", default="prefork", choices=("prefork", "threads", "solo"))
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--jobs", type=int, default=512)
    parser.add_argument("--keep-logs", default=None, help="Directory to keep the workers' logs in.")
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(opts.keep_logs or tmp)
        logs.mkdir(parents=True, exist_ok=True)
        r = run_bench(opts, logs)
    rtt_ratio = r["rtt_list"] / r["rtt_bare"]
    tp_ratio = r["tp_a3s"] / r["tp_bare"]
    print(
        f"fleet benchmark — redis {opts.redis}, pool {opts.pool} x{opts.concurrency}, {opts.rounds} rounds, {opts.jobs} jobs"
    )
    print(f"  32-branch round trip   a3s fan-out {r['rtt_list'] * 1000:7.1f} ms   bare group {r['rtt_bare'] * 1000:7.1f} ms   "
          f"ratio {rtt_ratio:.2f}x  (target <= 1.5x) {'OK' if rtt_ratio <= 1.5 else 'MISSED'}")  # fmt: skip
    print(f"    (result-backend polling fan-in instead of the result list: {r['rtt_poll'] * 1000:.1f} ms)")
    print(f"  sustained throughput   a3s {r['tp_a3s']:7.0f} jobs/s   bare {r['tp_bare']:7.0f} tasks/s   "
          f"ratio {tp_ratio:.2f}x  (target >= 0.8x) {'OK' if tp_ratio >= 0.8 else 'MISSED'}")  # fmt: skip
    print(f"    (client CPU per job: a3s {r['cpu_a3s'] * 1e3:.2f} ms, bare {r['cpu_bare'] * 1e3:.2f} ms — "
          "the client shares the machine's cores with the workers)")  # fmt: skip


if __name__ == "__main__":
    main()
