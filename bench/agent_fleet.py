"""Sub-agents at fleet scale (issue 9): a3s agent jobs vs bare Celery tasks making the same HTTP call.

    python -m bench.agent_fleet [--redis redis://127.0.0.1:6379/8] [--pool prefork] [--concurrency 2]
                                [--rounds 15] [--jobs 200]

1. A 32-child ``task`` fan-out (``session.tasks`` on a fleet: each child an ``a3s.agent`` job that
   builds its own session on the parent's workspace, runs the agent loop — one model request to a
   local zero-latency OpenAI-compatible endpoint — and reports its bounded ``TaskResult``) vs a bare
   Celery ``group`` of 32 tasks each making the same HTTP call (the request body a child sent, through
   the same ``openai`` SDK) to the same endpoint. Target <= 1.5x.
2. Batch throughput: ``--jobs`` one-turn agent jobs (``a3s-fleet batch``'s code: each job an
   ``a3s.agent`` run on its own session, its result appended to a results file) vs ``--jobs`` bare
   tasks in one group, in jobs/s both ways.

Both sides get a freshly started worker (same pool and concurrency, same Celery settings, own queue)
on one Redis; rounds alternate so other load on the machine falls on both alike. Medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from bench.fleet import worker

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
WARMUP = 3
BATCH_REPEATS = 3
MODEL = "openai:bench"


def _env(redis_url: str, queue: str, base_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("A3S_")}
    env.update(
        A3S_BROKER_URL=redis_url,
        A3S_QUEUE=queue,
        OPENAI_BASE_URL=base_url,
        OPENAI_API_KEY="sk-bench-local",
        PYTHONPATH=str(ROOT),
    )
    return env


def run_bench(opts: argparse.Namespace, log_dir: Path) -> dict[str, float]:
    from celery import group

    from bench.agent_fleet_support import BARE_TASK, ZeroLatencyServer, make_bare_app
    from config.settings import Settings
    from kernel.options import SessionOptions
    from kernel.policy import PermissionPolicy
    from orchestrator import Agent
    from orchestrator.batch import BatchRequest, run_batch

    tag = uuid.uuid4().hex[:6]
    a3s_queue, bare_queue = f"bench.agents.{tag}", f"bench.chat.{tag}"
    common = ["--pool", opts.pool, "--concurrency", str(opts.concurrency), "--loglevel", "INFO"]
    a3s_args = [str(BIN / "a3s-fleet"), "worker", *common, "--hostname", f"bench-agents-{tag}@%h"]
    bare_args = [sys.executable, "-m", "celery", "-A", "bench.agent_fleet_support:app", "worker", *common]
    bare_args += ["--queues", bare_queue, "--task-events", "--without-mingle", "--without-gossip"]
    bare_args += ["--hostname", f"bench-chat-{tag}@%h"]
    times: dict[str, list[float]] = {"a3s": [], "bare": []}
    rates: dict[str, list[float]] = {"a3s": [], "bare": []}
    with ZeroLatencyServer() as endpoint, tempfile.TemporaryDirectory() as tmp:
        os.environ.update(A3S_BROKER_URL=opts.redis, A3S_QUEUE=bare_queue)
        bare_app = make_bare_app()
        chat = bare_app.tasks[BARE_TASK]
        settings = Settings(broker_url=opts.redis, queue=a3s_queue)
        ws = Path(tmp) / "ws"
        ws.mkdir()
        (ws / "README.md").write_text("bench\n")
        try:
            with (
                worker(a3s_args, _env(opts.redis, a3s_queue, endpoint.base_url), log_dir / "a3s.log"),
                worker(bare_args, _env(opts.redis, bare_queue, endpoint.base_url), log_dir / "bare.log"),
                Agent(settings, model=MODEL) as agent,
            ):
                session = agent.session(
                    str(ws), SessionOptions(permission_policy=PermissionPolicy(allow=["*"]))
                )
                items = [
                    {"agent": "general", "description": f"child {i}", "prompt": f"question {i}"}
                    for i in range(32)
                ]

                def a3s_round() -> float:
                    t0 = time.perf_counter()
                    result = session.tasks(items)
                    took = time.perf_counter() - t0
                    if result.exit_code != 0:
                        raise SystemExit(f"a3s fan-out failed: {result.output[:2000]}")
                    return took

                def bare_round(n: int) -> float:
                    t0 = time.perf_counter()
                    group(chat.s(f"question {i}") for i in range(n)).apply_async().get(
                        timeout=300, interval=0.005
                    )
                    return time.perf_counter() - t0

                a3s_round()  # warm up, and record the request a child sends: the bare tasks send the same
                import redis

                from bench.agent_fleet_support import BODY_KEY

                body = dict(endpoint.last_body)
                body.pop("stream", None)
                redis.Redis.from_url(opts.redis).set(BODY_KEY, json.dumps(body))
                for i in range(WARMUP + opts.rounds):
                    a, b = a3s_round(), bare_round(32)
                    if i >= WARMUP:
                        times["a3s"].append(a)
                        times["bare"].append(b)
                jobs = Path(tmp) / "jobs.jsonl"
                jobs.write_text(
                    "".join(
                        json.dumps({"id": f"j{i}", "prompt": f"question {i}"}) + "\n"
                        for i in range(opts.jobs)
                    )
                )
                for i in range(1 + BATCH_REPEATS):
                    out = Path(tmp) / f"results-{i}.jsonl"
                    t0 = time.perf_counter()
                    state = run_batch(
                        BatchRequest(str(jobs), str(out), model=MODEL, workspace=str(ws), settings=settings)
                    )
                    a3s_rate = opts.jobs / (time.perf_counter() - t0)
                    if state.failed or state.done != opts.jobs:
                        raise SystemExit(f"a3s batch failed: {state}")
                    bare_rate = opts.jobs / bare_round(opts.jobs)
                    if i:  # the first pair warms up
                        rates["a3s"].append(a3s_rate)
                        rates["bare"].append(bare_rate)
        finally:
            bare_app.close()
    return {
        "fan_a3s": statistics.median(times["a3s"]),
        "fan_bare": statistics.median(times["bare"]),
        "tp_a3s": statistics.median(rates["a3s"]),
        "tp_bare": statistics.median(rates["bare"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/8")
    parser.add_argument("--pool", default="prefork", choices=("prefork", "threads", "solo"))
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--keep-logs", default=None, help="Directory to keep the workers' logs in.")
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(opts.keep_logs or tmp)
        logs.mkdir(parents=True, exist_ok=True)
        r = run_bench(opts, logs)
    ratio = r["fan_a3s"] / r["fan_bare"]
    load = os.getloadavg()[0]
    print(
        f"agent fleet benchmark — redis {opts.redis}, pool {opts.pool} x{opts.concurrency}, "
        f"{opts.rounds} rounds, {opts.jobs} batch jobs, load {load:.1f}"
    )
    print(f"  32-child task fan-out   a3s {r['fan_a3s'] * 1000:7.1f} ms   bare group of 32 HTTP calls "
          f"{r['fan_bare'] * 1000:7.1f} ms   ratio {ratio:.2f}x  (target <= 1.5x) {'OK' if ratio <= 1.5 else 'MISSED'}")  # fmt: skip
    print(f"  batch of {opts.jobs} one-turn jobs   a3s {r['tp_a3s']:6.1f} jobs/s   bare {r['tp_bare']:6.1f} tasks/s   "
          f"ratio {r['tp_a3s'] / r['tp_bare']:.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
