"""Command-line start-up (issue 13 item 7): wall time of ``a3s-fleet`` commands next to ``python -c
"import click"``, the floor of any click program on this interpreter.

    python -m bench.cli [--rounds N]      # targets: --version <= 2x the click import; tool read close behind

Every round runs each command once, in the same order, so load on a shared machine hits all of them
alike (interleaved); the table gives the median and the best round per command and the ratio of
medians to the click baseline. The commands run through the console script installed next to this
interpreter (``.venv/bin/a3s-fleet``), exactly as a user types them; ``tool read`` reads a small file
in a temporary workspace (a fresh one-tool session each time: kernel, projection, one call); the
``full session`` row is the same call with an ``A3S_*`` setting present, which builds every tool.
The floor row is what any tool call here needs before its first line of our code: click and asyncio
(the kernel is asyncio code). pydantic is not part of it: ``read``/``ls`` validate ordinary arguments
without it (``kernel.spec.DeferredParams``); the "pydantic model" row shows what it would add.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROUNDS = 15
TARGET_VERSION_RATIO = 2.0
TARGET_READ_RATIO = 2.5


def _script() -> list[str]:
    script = Path(sys.executable).with_name("a3s-fleet")
    return [str(script)] if script.exists() else [sys.executable, "-m", "orchestrator.cli"]


FULL_SESSION = "tool read, full session"
FLOOR = "click + asyncio"
FLOOR_SOURCE = "import click, asyncio"
PYDANTIC = "click + asyncio + 1 pydantic model"
PYDANTIC_SOURCE = FLOOR_SOURCE + "\nfrom pydantic import BaseModel\nclass A(BaseModel):\n    x: int\nA(x=1)"


def _commands(workspace: str) -> dict[str, list[str]]:
    cli = _script()
    read = ["tool", "read", '{"file_path": "README.md", "limit": 5}', "-w", workspace]
    return {
        "python -c pass": [sys.executable, "-c", "pass"],
        'python -c "import click"': [sys.executable, "-c", "import click"],
        # The floor of any tool call from this CLI: click, and asyncio (the kernel is asyncio code).
        FLOOR: [sys.executable, "-c", FLOOR_SOURCE],
        # What a pydantic model would add: read/ls validate without one unless the model must decide.
        PYDANTIC: [sys.executable, "-c", PYDANTIC_SOURCE],
        "a3s-fleet --version": [*cli, "--version"],
        "a3s-fleet --help": [*cli, "--help"],
        "a3s-fleet tool read": [*cli, *read],
        # Any A3S_* setting (an empty one here) builds the whole session (orchestrator.cli_direct).
        FULL_SESSION: [*cli, *read],
    }


def _run_once(name: str, argv: list[str], env: dict[str, str]) -> float:
    if name == FULL_SESSION:
        env = {**env, "A3S_EXTRA_TOOLS": ""}
    t0 = time.perf_counter()
    proc = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{argv} failed ({proc.returncode}): {proc.stderr.decode(errors='replace')[-500:]}")
    return elapsed


def bench_cli(rounds: int = ROUNDS, verbose: bool = True) -> dict[str, dict[str, float]]:
    with tempfile.TemporaryDirectory() as workspace:
        Path(workspace, "README.md").write_text("# demo\n\nhello\n")
        commands = _commands(workspace)
        # Embedded, no broker; and bytecode caches written, as an installed package has them (an
        # inherited PYTHONDONTWRITEBYTECODE would recompile every project module on every run).
        env = {
            k: v for k, v in os.environ.items() if not k.startswith("A3S_") and k != "PYTHONDONTWRITEBYTECODE"
        }
        for name, argv in commands.items():  # warm: bytecode caches, page cache
            _run_once(name, argv, env)
        times: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(rounds):
            for name, argv in commands.items():
                times[name].append(_run_once(name, argv, env))
    base = statistics.median(times['python -c "import click"'])
    rows = {
        name: {
            "median_ms": statistics.median(ts) * 1000,
            "best_ms": min(ts) * 1000,
            "ratio": statistics.median(ts) / base,
        }
        for name, ts in times.items()
    }
    if verbose:
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        print(f"CLI start-up, {rounds} interleaved rounds (load average {load:.1f}, {os.cpu_count()} cores)")
        print(f"{'command':<36} {'median ms':>9} {'best ms':>8} {'x click':>8}")
        for name, row in rows.items():
            print(f"{name:<36} {row['median_ms']:>9.1f} {row['best_ms']:>8.1f} {row['ratio']:>8.2f}")
        ratio = rows["a3s-fleet --version"]["ratio"]
        verdict = "met" if ratio <= TARGET_VERSION_RATIO else "MISSED"
        print(f"--version: {ratio:.2f}x the click import (target <= {TARGET_VERSION_RATIO}x): {verdict}")
        ratio = rows["a3s-fleet tool read"]["ratio"]
        verdict = "met" if ratio <= TARGET_READ_RATIO else "MISSED"
        print(
            f"tool read: {ratio:.2f}x the click import (aim <= {TARGET_READ_RATIO}x, 'close behind'): {verdict}"
        )
        floor = rows["a3s-fleet tool read"]["median_ms"] / rows[FLOOR]["median_ms"]
        print(f"tool read: {floor:.2f}x its dependency floor ({FLOOR}: {rows[FLOOR]['ratio']:.2f}x click)")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    bench_cli(parser.parse_args().rounds)


if __name__ == "__main__":
    main()
