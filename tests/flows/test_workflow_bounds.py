"""A workflow script cannot make the host hold what it asks for many times over (SPEC F-7, P-3, K-8).

Each ``wf.step`` request the VM sends is a host task until it is answered, and each answer is the
step's whole result: a script that asks for one slow step ten thousand times without awaiting (or
forges the request line) used to grow the host without bound — 2.6 GB in 90 s before the host
aborted, in the attack run. Now at most ``MAX_PENDING_REQUESTS`` requests are outstanding, and
replies go out in bounded lines with the pipe's flow control.

Real QuickJS, real bash steps, the real file log. The memory probe runs the host in a separate
process with an address-space cap.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from flows.workflow import driver, log
from orchestrator import Agent
from tools.program import vm
from tools.program.vm import MAX_PENDING_REQUESTS

ROOT = Path(__file__).resolve().parents[2]


def _types(root: Path, run_id: str) -> list[str]:
    log = root / ".a3s" / "workflow" / f"{run_id}.jsonl"
    return [json.loads(line)["event"]["type"] for line in log.read_text().splitlines()]


def test_f7_k8_more_outstanding_requests_than_the_cap_end_the_run_typed(
    agent: Agent, workspace: Path
) -> None:
    """Before: 10 001 host tasks waited on the slow step until the run timed out."""
    s = agent.session(workspace)
    src = f"""async function run(wf) {{
      const all = [];
      for (let i = 0; i <= {MAX_PENDING_REQUESTS}; i++) all.push(wf.step('slow', 'bash', {{command: 'sleep 60'}}));
      await Promise.all(all);
    }}"""
    result = s.workflow(source=src, run_id="flood", limits={"timeout_ms": 20000})
    assert result.exit_code == 1, result.output
    assert result.error_kind == {
        "type": "budget_exhausted",
        "resource": "pending_requests",
        "reason": "max_pending_requests",
    }
    assert _types(workspace, "flood")[-1] == "run_failed"
    ok = s.workflow(
        source="async function run(wf) { return (await wf.step('a', 'ls', {})).exitCode }", run_id="ok"
    )
    assert ok.exit_code == 0 and ok.metadata["output"] == 0


HOST = """
import json, resource, sys
from orchestrator import Agent

s = Agent().session(sys.argv[1])
src = '''async function run(wf) {
  const all = [];
  for (let i = 0; i < 3000; i++) all.push(wf.step('big', 'bash', {command: 'sleep 2; head -c 90000 /dev/zero | tr "\\\\\\\\0" x'}));
  let n = 0;
  for (const p of all) n += (await p).output.length;
  return n;
}'''
r = s.workflow(source=src, run_id="dup", limits={"timeout_ms": 120000})
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
print(json.dumps({"exit": r.exit_code, "kind": r.error_kind, "peak_mb": peak}), flush=True)
"""


def test_f7_p3_one_large_step_awaited_thousands_of_times_keeps_host_memory_bounded(workspace: Path) -> None:
    """3000 requests of one step with a 90 kB output: the VM runs out of its 64 MiB taking the
    answers (typed), and the host never holds them serialised together. Before: 1.1-1.5 GB peak
    (the reply line was built whole: JSON text, its bytes, the line); now well under 400 MB."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cap = 3 * 1024**3

    def limit() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    out = subprocess.run(
        [sys.executable, "-c", HOST, str(workspace)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=240,
        preexec_fn=limit,
    )
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    assert lines, out.stderr[-2000:]
    report = json.loads(lines[-1])
    assert report["exit"] == 1
    assert report["kind"] == {"type": "budget_exhausted", "resource": "memory", "reason": "vm_memory"}
    assert report["peak_mb"] < 400, report


def test_f7_a_catastrophic_regex_is_a_runaway_not_a_run_to_the_deadline(
    agent: Agent, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """QuickJS's regex engine never checks the VM's interrupt, so the 30 s cap between steps did not
    apply: the child ran at full CPU to the run's deadline (default 1 h, up to 24 h). The child's
    CPU fence (a soft RLIMIT_CPU a slice ahead) ends it; a 1 s slice keeps the test short."""
    monkeypatch.setattr(driver, "SLICE_MS", 1000)
    s = agent.session(workspace)
    src = "async function run(wf) { return /(a+)+$/.test('a'.repeat(40) + 'b') }"
    result = s.workflow(source=src, run_id="regex", limits={"timeout_ms": 60000})
    assert result.exit_code == 1, result.output
    assert result.error_kind == {"type": "budget_exhausted", "resource": "cpu", "reason": "runaway_script"}
    assert _types(workspace, "regex")[-1] == "run_failed"


def test_f3_f7_a_run_history_is_capped_on_disk_and_never_read_whole_past_it(
    agent: Agent, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every step's output goes into the run's log, and every resume reads the log whole: before,
    nothing bounded it (10 000 `read` steps ≈ 1 GB per execution, more per re-run under a new query).
    The cap is patched down to 64 KiB here; the real one is 256 MiB."""
    monkeypatch.setattr(log, "MAX_LOG_BYTES", 64 * 1024)
    (workspace / "big.txt").write_text("".join(f"line {i} {'x' * 50}\n" for i in range(400)))
    s = agent.session(workspace)
    src = """async function run(wf) {
      for (let i = 0; i < 100; i++) await wf.step('s' + i, 'read', {file_path: 'big.txt'});
    }"""
    full = {"type": "budget_exhausted", "resource": "workflow_history", "reason": "max_history_bytes"}
    first = s.workflow(source=src, run_id="hist")
    assert first.exit_code == 1 and first.error_kind == full, first.output
    history = workspace / ".a3s" / "workflow" / "hist.jsonl"
    assert history.stat().st_size <= 64 * 1024
    again = s.workflow(source=src, run_id="hist")  # resumes what was recorded, then the same refusal
    assert again.error_kind == full and "s0: read recovered" in again.output
    monkeypatch.setattr(log, "MAX_LOG_BYTES", 16 * 1024)  # a log already past the cap is not read
    refused = s.workflow(source=src, run_id="hist")
    assert refused.exit_code == 1 and refused.error_kind == full


def test_f7_a_script_that_keeps_re_asking_the_host_ends_typed_not_at_the_deadline(
    agent: Agent, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rejected request caught in a loop, or a finished step asked for again and again: each a
    host round trip, ~40 % of a host core, until the deadline (up to 24 h) before. The real cap is
    100 000 requests per run; 500 here keeps the test short."""
    monkeypatch.setattr(vm, "MAX_REQUESTS", 500)
    s = agent.session(workspace)
    spins = {
        "rejected": "for (;;) { try { await wf.step('', 'ls', {}) } catch (e) {} }",
        "repeated": "for (;;) await wf.step('a', 'ls', {});",
    }
    for name, body in spins.items():
        result = s.workflow(
            source=f"async function run(wf) {{ {body} }}", run_id=f"spin-{name}", limits={"timeout_ms": 30000}
        )
        assert result.error_kind == {
            "type": "budget_exhausted",
            "resource": "requests",
            "reason": "max_requests",
        }
        assert _types(workspace, f"spin-{name}")[-1] == "run_failed"
    program = s.program(
        source="async function run(ctx) { for (;;) { try { await ctx.tool('', {}) } catch (e) {} } }",
        limits={"timeoutMs": 30000},
    )
    assert program.error_kind == {
        "type": "budget_exhausted",
        "resource": "requests",
        "reason": "max_requests",
    }
