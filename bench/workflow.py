"""Workflow benchmark (issue 11): a 32-step fan-out workflow on the fleet vs a bare Celery group.

    python -m bench.workflow [--redis redis://127.0.0.1:6379/8] [--pool prefork] [--concurrency 2]
                             [--rounds 20]

One a3s worker and one bare-Celery worker (same pool, same concurrency, the fleet's Celery settings,
own queues — ``bench.fleet``'s set-up) run side by side; rounds alternate:

- a3s: ``session.workflow(...)`` of ``async function run(wf) { await Promise.all(32 × wf.step(i,
  'noop', {})) }`` with ``maxConcurrentSteps: 32`` and a fresh run id per round — the whole public
  path: the QuickJS VM (warm pool), the replay driver, the run's history in its Redis Stream (99
  events: created/started/completed per step plus the run's), the lease, 32 labelled ``a3s.tool``
  jobs and their fan-in;
- bare: a Celery ``group`` of 32 no-op tasks, ``.get()``.

Target: a3s / bare ≤ 1.5× (medians after a warm-up). Also printed: the same fan-out as
``session.fan_out`` (no VM, no history), to show what the workflow layer itself costs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from bench.fleet import BIN, _env, worker

WARMUP = 3
STEPS = 32
FLOW = (
    "async function run(wf) {\n"
    f"  const steps = Array.from({{length: {STEPS}}}, (_, i) => wf.step('s' + i, 'noop', {{}}));\n"
    "  return (await Promise.all(steps)).length;\n"
    "}\n"
)


def run_bench(opts: argparse.Namespace, log_dir: Path) -> dict[str, float]:
    from celery import group

    from bench.fleet_support import BARE_TASK, make_bare_app
    from config.settings import Settings
    from orchestrator import Agent
    from orchestrator.fanout import Branch

    tag = uuid.uuid4().hex[:6]
    a3s_queue, bare_queue = f"bench.wf.{tag}", f"bench.wfbare.{tag}"
    common = ["--pool", opts.pool, "--concurrency", str(opts.concurrency), "--loglevel", "INFO"]
    a3s_args = [str(BIN / "a3s-fleet"), "worker", *common, "--hostname", f"bench-wf-{tag}@%h"]
    bare_args = [sys.executable, "-m", "celery", "-A", "bench.fleet_support:app", "worker", *common]
    bare_args += ["--queues", bare_queue, "--task-events", "--without-mingle", "--without-gossip"]
    bare_args += ["--hostname", f"bench-wfbare-{tag}@%h"]
    settings = Settings(broker_url=opts.redis, queue=a3s_queue, extra_tools="bench.fleet_support")
    os.environ.update(A3S_BROKER_URL=opts.redis, A3S_QUEUE=bare_queue)
    bare_app = make_bare_app()
    noop = bare_app.tasks[BARE_TASK]
    times: dict[str, list[float]] = {"workflow": [], "fan_out": [], "bare": []}
    try:
        with (
            worker(a3s_args, _env(opts.redis, a3s_queue), log_dir / "a3s.log"),
            worker(bare_args, _env(opts.redis, bare_queue), log_dir / "bare.log"),
            tempfile.TemporaryDirectory() as ws,
            Agent(settings) as agent,
        ):
            session = agent.session(ws)
            branches = [Branch("noop", {}, f"noop {i}") for i in range(STEPS)]

            def workflow_round() -> float:
                t0 = time.perf_counter()
                result = session.workflow(
                    source=FLOW,
                    input={},
                    run_id=f"bench-{uuid.uuid4().hex[:10]}",
                    limits={"maxConcurrentSteps": 32},
                )
                took = time.perf_counter() - t0
                if result.exit_code != 0 or result.metadata.get("output") != STEPS:
                    raise SystemExit(f"workflow failed: {result.output}")
                return took

            def fan_out_round() -> float:
                t0 = time.perf_counter()
                if session.fan_out(branches).status != "complete":
                    raise SystemExit("fan-out failed")
                return time.perf_counter() - t0

            def bare_round() -> float:
                t0 = time.perf_counter()
                group(noop.s() for _ in range(STEPS)).apply_async().get(timeout=120, interval=0.005)
                return time.perf_counter() - t0

            for i in range(WARMUP + opts.rounds):
                for key, fn in (
                    ("workflow", workflow_round),
                    ("bare", bare_round),
                    ("fan_out", fan_out_round),
                ):
                    took = fn()
                    if i >= WARMUP:
                        times[key].append(took)
    finally:
        bare_app.close()
    return {key: statistics.median(values) for key, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/8")
    parser.add_argument("--pool", default="prefork", choices=("prefork", "threads", "solo"))
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=20)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as logs:
        r = run_bench(opts, Path(logs))
    ratio = r["workflow"] / r["bare"]
    print(
        f"workflow benchmark — redis {opts.redis}, pool {opts.pool} x{opts.concurrency}, {opts.rounds} rounds"
    )
    print(
        f"  32-step fan-out workflow {r['workflow'] * 1000:7.1f} ms   bare Celery group {r['bare'] * 1000:7.1f} ms   "
        f"ratio {ratio:.2f}x  (target <= 1.5x) {'OK' if ratio <= 1.5 else 'MISSED'}"
    )
    print(f"    (the same 32 jobs as session.fan_out, no VM and no history: {r['fan_out'] * 1000:.1f} ms)")


if __name__ == "__main__":
    main()
