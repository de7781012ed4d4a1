"""Bench: our process's peak memory while a bash command prints 200 MB (SPEC B-2; ARCHITECTURE "bound output where it is produced").

``bench_bash_memory()`` runs the real ``bash`` tool host-direct (unsandboxed, so only our reading
side is measured) on ``yes | head -c N`` and reports the RSS of *this* process: the baseline before
the call, the peak during it (the kernel's ``VmHWM`` after resetting it through
``/proc/self/clear_refs``, cross-checked by sampling ``VmRSS`` every ``SAMPLE_INTERVAL_S``), and
the growth. The capture keeps at most 100 KiB, so the growth must stay a few MiB at most however
large N is. ``bench_bash_latency()`` times a trivial call (host-direct and sandboxed) against bare
``subprocess.run`` / ``bwrap`` peers, interleaved. Run standalone: ``python -m bench.workspace_bash
[bytes]``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from kernel.origin import Origin
from kernel.testing import make_context
from kernel.workspace import LocalWorkspace
from tools.bash import TOOL

DEFAULT_OUTPUT_BYTES = 200_000_000
SAMPLE_INTERVAL_S = 0.01
TIMEOUT_MS = 120_000


def _status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _reset_peak() -> bool:
    """Reset VmHWM to the current RSS (Linux ≥ 4.0); False when not permitted."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
            fh.write("5")
    except OSError:
        return False
    return True


async def _measure(total_bytes: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="a3s-bench-bash-") as tmp:
        ctx = make_context(
            LocalWorkspace(tmp), tool_name="bash", origin=Origin.HOST_DIRECT, timeout_s=TIMEOUT_MS / 1000
        )
        params = TOOL.validate({"command": f"yes | head -c {total_bytes}", "timeout": TIMEOUT_MS})
        # Warm up imports, the snapshot thread pool and the first subprocess.
        await TOOL.run(ctx, TOOL.validate({"command": "true"}))
        baseline_kib = _status_kib("VmRSS") or 0
        hwm_reset = _reset_peak()
        sampled_peak_kib = baseline_kib

        async def sample() -> None:
            nonlocal sampled_peak_kib
            while True:
                sampled_peak_kib = max(sampled_peak_kib, _status_kib("VmRSS") or 0)
                await asyncio.sleep(SAMPLE_INTERVAL_S)

        sampler = asyncio.create_task(sample())
        started = time.perf_counter()
        try:
            result = await TOOL.run(ctx, params)
        finally:
            sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sampler
        seconds = time.perf_counter() - started
        hwm_kib = _status_kib("VmHWM") if hwm_reset else None
    peak_kib = max(sampled_peak_kib, hwm_kib or 0)
    output = result.metadata["output"]
    return {
        "command_output_bytes": output["total_bytes"],
        "captured_bytes": output["captured_bytes"],
        "exit_code": result.metadata["exit_code"],
        "baseline_rss_bytes": baseline_kib * 1024,
        "peak_rss_bytes": peak_kib * 1024,
        "rss_growth_bytes": (peak_kib - baseline_kib) * 1024,
        "peak_source": "VmHWM" if hwm_kib is not None else "sampled VmRSS",
        "seconds": round(seconds, 3),
        "throughput_mb_s": round(output["total_bytes"] / 1e6 / seconds, 1) if seconds else None,
    }


def bench_bash_memory(total_bytes: int = DEFAULT_OUTPUT_BYTES) -> dict[str, Any]:
    """Peak RSS of this process while ``bash`` reads ``total_bytes`` of output (see module doc)."""
    return asyncio.run(_measure(total_bytes))


LATENCY_ROUNDS = 25
PEER_BWRAP = [
    "bwrap", "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "--dev", "/dev",
    "--proc", "/proc", "--tmpfs", "/tmp",
]  # fmt: skip


async def _latency(rounds: int) -> dict[str, Any]:
    """Per-call wall time of a trivial command: the tool (host-direct, and sandboxed when bubblewrap
    works) against a bare ``subprocess.run`` of the same shell (and a bare ``bwrap`` with a
    minimal policy), interleaved round by round; medians in ms and our/peer ratios."""
    from tools.bash.sandbox import default_sandbox

    sandboxed = await asyncio.to_thread(default_sandbox().probe)
    with tempfile.TemporaryDirectory(prefix="a3s-bench-bash-") as tmp:
        host = make_context(LocalWorkspace(tmp), tool_name="bash", origin=Origin.HOST_DIRECT)
        boxed = make_context(LocalWorkspace(tmp), tool_name="bash", origin=Origin.AGENT)
        params = TOOL.validate({"command": "true"})
        times: dict[str, list[float]] = {
            "ours_host": [],
            "peer_host": [],
            "ours_sandbox": [],
            "peer_bwrap": [],
        }

        async def timed(key: str, call: Any) -> None:
            started = time.perf_counter()
            await call()
            times[key].append(time.perf_counter() - started)

        def peer(argv: list[str]) -> Any:
            return lambda: asyncio.to_thread(subprocess.run, argv, capture_output=True, check=True, cwd=tmp)

        for _warm in range(2):  # first calls start the spawn helper and probe the sandbox
            await TOOL.run(host, params)
            if sandboxed:
                await TOOL.run(boxed, params)
        for _ in range(rounds):
            await timed("ours_host", lambda: TOOL.run(host, params))
            await timed("peer_host", peer(["bash", "-c", "true"]))
            if sandboxed:
                await timed("ours_sandbox", lambda: TOOL.run(boxed, params))
                await timed("peer_bwrap", peer([*PEER_BWRAP, "bash", "-c", "true"]))
    medians = {k: round(statistics.median(v) * 1000, 2) for k, v in times.items() if v}
    out: dict[str, Any] = {"rounds": rounds, "median_ms": medians}
    out["ratio_host"] = round(medians["ours_host"] / medians["peer_host"], 2)
    if sandboxed:
        out["ratio_sandbox"] = round(medians["ours_sandbox"] / medians["peer_bwrap"], 2)
    return out


def bench_bash_latency(rounds: int = LATENCY_ROUNDS) -> dict[str, Any]:
    """Per-call latency of ``bash`` against bare subprocess peers (see ``_latency``)."""
    return asyncio.run(_latency(rounds))


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    total = int(args[0]) if args else DEFAULT_OUTPUT_BYTES
    report = bench_bash_memory(total)
    print(json.dumps(report, indent=2))
    mib = 1024 * 1024
    print(
        f"bash printed {report['command_output_bytes'] / 1e6:.0f} MB in {report['seconds']} s; "
        f"our peak RSS {report['peak_rss_bytes'] / mib:.1f} MiB "
        f"(+{report['rss_growth_bytes'] / mib:.2f} MiB over the {report['baseline_rss_bytes'] / mib:.1f} MiB baseline)"
    )
    latency = bench_bash_latency()
    print(json.dumps(latency, indent=2))
    med = latency["median_ms"]
    line = f"`true` per call: host {med['ours_host']} ms vs bare subprocess {med['peer_host']} ms ({latency['ratio_host']}x)"
    if "ratio_sandbox" in latency:
        line += f"; sandboxed {med['ours_sandbox']} ms vs bare bwrap {med['peer_bwrap']} ms ({latency['ratio_sandbox']}x)"
    print(line)


if __name__ == "__main__":
    main()
