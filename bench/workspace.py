"""Workspace benchmark (issue 3): ``read.files`` over 1,000 files vs ``cat`` of the same files, and
bash's peak memory while a command prints 200 MB (must stay bounded); (issue 15) the per-call cost
of race-free resolution against the implementation before it.

    python -m bench.workspace [--rounds N] [--baseline REV] [--only resolution]

Race-free resolution (issue 15 item 4; target: at most 1.3x the previous per-call cost): the
baseline is the commit before ``LocalWorkspace`` moved onto ``kernel.beneath`` (or ``--baseline
REV``), so other work merged since is in both trees; it is extracted
with ``git archive`` into a temporary directory. ``bench/workspace_calls.py`` runs in a fresh
process against each tree, alternating baseline/current for ``--rounds`` rounds (interleaved, same
machine, same inputs); each op's figure is the median over rounds of per-round medians, and the
ratio is current / baseline. Costs are CPU time of the whole process per call (wall time on a
shared machine varies by multiples with other processes' load). Ops: the public path (``session.tool`` read/ls/write/edit/search) and
the resolver alone (``LocalWorkspace.read_bytes``/``stat``/``list_dir``, with and without a symlink).

``read.files`` takes ≤ 32 files per call, so 1,000 files are 32 host-direct calls through the full
kernel (validation, budget, projection with evidence); ``cat`` reads the same files in one process.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CALLS_SCRIPT = REPO / "bench" / "workspace_calls.py"
RESOLUTION_TARGET = 1.3

N_FILES = 1000
LINES_PER_FILE = 40
FILES_PER_CALL = 32


def bench_read_files() -> tuple[float, float]:
    from kernel import SessionOptions
    from orchestrator import Agent

    with tempfile.TemporaryDirectory() as tmp, Agent() as agent:
        root = Path(tmp)
        names = []
        for i in range(N_FILES):
            name = f"d{i % 20:02d}/f{i:04d}.py"
            (root / name).parent.mkdir(exist_ok=True)
            (root / name).write_text(
                "".join(f"def f{i}_{k}(x):  # line {k}\n" for k in range(LINES_PER_FILE))
            )
            names.append(name)
        session = agent.session(root, SessionOptions(artifact_store="memory"))
        t0 = time.perf_counter()
        lines = 0
        for start in range(0, N_FILES, FILES_PER_CALL):
            chunk = [{"path": n} for n in names[start : start + FILES_PER_CALL]]
            res = session.tool("read", {"files": chunk, "max_output_bytes": 98_304})
            assert res.exit_code == 0 and not res.metadata["batch"]["truncated"], res.output[-300:]
            lines += res.metadata["batch"]["returned_lines"]
        ours = time.perf_counter() - t0
        assert lines == N_FILES * LINES_PER_FILE
        t0 = time.perf_counter()
        out = subprocess.run(["cat", *names], cwd=root, capture_output=True, check=True)
        cat = time.perf_counter() - t0
        assert out.stdout.count(b"\n") == N_FILES * LINES_PER_FILE
        return ours, cat


def _baseline_rev() -> str:
    """The commit before ``LocalWorkspace`` moved onto ``kernel.beneath`` (everything else equal)."""
    found = subprocess.run(
        ["git", "log", "--format=%H", "-S", "self._beneath = Beneath(", "--", "kernel/workspace.py"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    if not found:
        raise SystemExit("cannot find the commit that made resolution race-free; pass --baseline REV")
    return f"{found[-1]}^"


def _run_calls(tree: Path, rounds: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(
        [sys.executable, "-P", str(CALLS_SCRIPT), str(rounds)],
        cwd=tempfile.gettempdir(),
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return {k: float(v) for k, v in json.loads(out.strip().splitlines()[-1]).items()}


def bench_resolution(rounds: int, calls_per_round: int, baseline: str | None) -> bool:
    rev = baseline or _baseline_rev()
    with tempfile.TemporaryDirectory() as tmp:
        base_tree = Path(tmp) / "baseline"
        base_tree.mkdir()
        archive = subprocess.run(["git", "archive", rev], cwd=REPO, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(base_tree)], input=archive, check=True)
        runs: dict[str, list[dict[str, float]]] = {"baseline": [], "current": []}
        for i in range(rounds):
            order = [("baseline", base_tree), ("current", REPO)]
            if i % 2:
                order.reverse()
            for label, tree in order:
                runs[label].append(_run_calls(tree, calls_per_round))
    ops = list(runs["current"][0])
    print(
        f"race-free resolution, per call (median of {rounds} interleaved rounds x {calls_per_round} calls; "
        f"baseline {rev}):"
    )
    print(f"  {'op (CPU µs per call)':28} {'before':>10} {'after':>10} {'ratio':>6}")
    met = True
    for op in ops:
        before = statistics.median(r[op] for r in runs["baseline"])
        after = statistics.median(r[op] for r in runs["current"])
        ratio = after / before
        met = met and ratio <= RESOLUTION_TARGET
        print(f"  {op:28} {before:10.1f} {after:10.1f} {ratio:6.2f}")
    print(f"  target <= {RESOLUTION_TARGET}x on every op: {'met' if met else 'MISSED'}")
    return met


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=300, help="calls per op per round")
    parser.add_argument("--baseline", default=None, help="git revision of the previous implementation")
    parser.add_argument("--only", choices=["resolution"], default=None)
    args = parser.parse_args()
    bench_resolution(args.rounds, args.calls, args.baseline)
    if args.only == "resolution":
        return
    ours, cat = bench_read_files()
    print(
        f"read.files of {N_FILES} files: {ours * 1000:.1f} ms; cat: {cat * 1000:.1f} ms; ratio {ours / cat:.1f}x"
    )
    from bench.workspace_bash import bench_bash_memory

    mem = bench_bash_memory()
    print(f"bash printing 200 MB: {mem}")


if __name__ == "__main__":
    main()
