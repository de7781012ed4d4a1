"""Dynamic workflows, embedded: durable replay, recovery rules, concurrency, failures (SPEC F-2, F-3, F-7, K-1).

Every test runs the real QuickJS VM and real tools; the history is the real file log under
``<workspace>/.a3s/workflow/``. Overlap is proven with barriers (each step waits for the other to
start), never with timings.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from flows.workflow import FileEventLogs, History
from kernel import PermissionPolicy, SessionOptions
from orchestrator import Agent

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

THREE_STEPS = """
async function run(wf, input) {
  const a = await wf.step('first', 'bash', {command: 'echo ' + input.query + ' >> runs.log; echo ' + input.query});
  const [b, c] = await Promise.all([
    wf.step('second', 'bash', {command: 'echo second >> runs.log; echo two'}),
    wf.step('third', 'search', {mode: 'glob', query: '*.log'}),
  ]);
  return {a: a.output.trim(), b: b.output.trim(), c: c.output, exit: [a.exitCode, b.exitCode, c.exitCode]};
}
"""


def _events(root: Path, run_id: str) -> list[dict[str, Any]]:
    return [
        json.loads(line) for line in (root / ".a3s" / "workflow" / f"{run_id}.jsonl").read_text().splitlines()
    ]


def _types(root: Path, run_id: str) -> list[str]:
    return [e["event"]["type"] for e in _events(root, run_id)]


def test_f7_a_workflow_runs_steps_and_records_the_reference_history(agent: Agent, workspace: Path) -> None:
    s = agent.session(workspace)
    result = s.workflow(source=THREE_STEPS, input={"query": "alpha"}, run_id="run-1")
    assert result.exit_code == 0, result.output
    assert result.metadata["output"] == {"a": "alpha", "b": "two", "c": "runs.log", "exit": [0, 0, 0]}
    info = result.metadata["workflow"]
    assert info["run_id"] == "run-1" and info["status"] == "completed"
    assert {st["step_id"]: st["status"] for st in info["steps"]} == {
        "first": "completed",
        "second": "completed",
        "third": "completed",
    }
    events = _events(workspace, "run-1")
    assert [e["sequence"] for e in events] == list(range(1, len(events) + 1))
    assert all(set(e) == {"run_id", "sequence", "event_id", "timestamp", "event"} for e in events)
    types = [e["event"]["type"] for e in events]
    assert types[:2] == ["run_created", "run_started"] and types[-1] == "run_completed"
    assert events[0]["event"]["input"] == {"query": "alpha"}
    assert types.count("step_created") == types.count("step_started") == types.count("step_completed") == 3
    created = next(e["event"] for e in events if e["event"]["type"] == "step_created")
    assert created["step_id"] == "first" and created["step_name"] == "bash"
    assert created["input"]["command"].startswith("echo alpha")


def test_f3_recovery_only_for_the_same_run_and_query(agent: Agent, workspace: Path) -> None:
    s = agent.session(workspace)
    first = s.workflow(source=THREE_STEPS, input={"query": "alpha"}, run_id="run-a")
    again = s.workflow(source=THREE_STEPS, input={"query": "alpha"}, run_id="run-a")
    assert again.metadata["output"] == first.metadata["output"]
    assert {st["status"] for st in again.metadata["workflow"]["steps"]} == {"recovered"}
    assert (workspace / "runs.log").read_text().split() == ["alpha", "second"]  # nothing ran twice
    other_query = s.workflow(source=THREE_STEPS, input={"query": "beta"}, run_id="run-a")
    assert {st["status"] for st in other_query.metadata["workflow"]["steps"]} == {"completed"}
    other_run = s.workflow(source=THREE_STEPS, input={"query": "alpha"}, run_id="run-b")
    assert {st["status"] for st in other_run.metadata["workflow"]["steps"]} == {"completed"}
    assert (workspace / "runs.log").read_text().split() == [
        "alpha",
        "second",
        "beta",
        "second",
        "alpha",
        "second",
    ]
    # Back to the first query on run-a: its own completed steps are recovered, not beta's.
    back = s.workflow(source=THREE_STEPS, input={"query": "alpha"}, run_id="run-a")
    assert back.metadata["output"]["a"] == "alpha"
    assert {st["status"] for st in back.metadata["workflow"]["steps"]} == {"recovered"}
    history = History.fold("run-a", asyncio.run(FileEventLogs(workspace).read("run-a")))
    assert history.recover("gamma", "first") is None and history.recover("alpha", "first") is not None


def test_f3_a_failed_step_runs_again_on_resume_and_fails_the_run_with_its_error(
    agent: Agent, workspace: Path
) -> None:
    src = """async function run(wf) {
      await wf.step('ok', 'bash', {command: 'echo ok >> ok.log'});
      const r = await wf.step('flaky', 'bash', {command: 'test -f fixed || { echo broken >&2; exit 3; }; echo fixed'});
      return r.output.trim();
    }"""
    s = agent.session(workspace)
    failed = s.workflow(source=src, input={}, run_id="flaky-run")
    assert failed.exit_code == 1
    assert "step 'flaky' (bash) failed" in failed.output and "broken" in failed.output
    info = failed.metadata["workflow"]
    assert info["status"] == "failed" and info["reason"] == "step"
    assert {st["step_id"]: st["status"] for st in info["steps"]} == {"ok": "completed", "flaky": "failed"}
    assert _types(workspace, "flaky-run")[-2:] == ["step_failed", "run_failed"]
    (workspace / "fixed").write_text("")
    resumed = s.workflow(source=src, input={}, run_id="flaky-run")
    assert resumed.exit_code == 0 and resumed.metadata["output"] == "fixed"
    assert {st["step_id"]: st["status"] for st in resumed.metadata["workflow"]["steps"]} == {
        "ok": "recovered",
        "flaky": "completed",
    }
    assert (workspace / "ok.log").read_text() == "ok\n"


def test_f7_a_caught_step_failure_does_not_fail_the_run(agent: Agent, workspace: Path) -> None:
    src = """async function run(wf) {
      try { await wf.step('bad', 'bash', {command: 'exit 4'}); }
      catch (e) { return {caught: e.stepId, exit: e.exitCode, kind: e.errorKind && e.errorKind.type}; }
    }"""
    result = agent.session(workspace).workflow(source=src, run_id="caught")
    assert result.exit_code == 0
    assert result.metadata["output"] == {"caught": "bad", "exit": 1, "kind": None}


def test_f7_a_step_id_reused_with_other_arguments_is_an_error(agent: Agent, workspace: Path) -> None:
    s = agent.session(workspace)
    src = """async function run(wf) {
      const a = await wf.step('same', 'bash', {command: 'echo 1 >> n.log'});
      const b = await wf.step('same', 'bash', {command: 'echo 1 >> n.log'});
      await wf.step('same', 'bash', {command: 'echo 2 >> n.log'});
    }"""
    result = s.workflow(source=src, run_id="reuse")
    assert result.exit_code == 1 and result.error_kind["type"] == "invalid_argument"
    assert "reused with different arguments" in result.output
    assert (workspace / "n.log").read_text() == "1\n"  # the identical repeat ran once, the other never


def test_f2_parallel_steps_overlap_and_the_limit_holds(agent: Agent, workspace: Path) -> None:
    s = agent.session(workspace)
    barrier = "touch {me}.started; for i in $(seq 600); do [ -f {other}.started ] && exit 0; sleep 0.05; done; exit 9"
    src = f"""async function run(wf) {{
      const steps = await Promise.all([
        wf.step('a', 'bash', {{command: {json.dumps(barrier.format(me="a", other="b"))}}}),
        wf.step('b', 'bash', {{command: {json.dumps(barrier.format(me="b", other="a"))}}}),
      ]);
      return steps.map(s => s.exitCode);
    }}"""
    overlap = s.workflow(source=src, run_id="overlap")
    assert overlap.exit_code == 0, overlap.output  # each step saw the other start: they overlapped
    in_flight = {"now": 0, "max": 0}

    async def gate(_args: dict[str, Any]) -> str:
        in_flight["now"] += 1
        in_flight["max"] = max(in_flight["max"], in_flight["now"])
        for _ in range(600):
            if in_flight["now"] >= 2:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.1)
        in_flight["now"] -= 1
        return "ok"

    s.register_tool("gate", gate, description="barrier", parameters={"type": "object"})
    four = (
        "async function run(wf) { await Promise.all([1, 2, 3, 4].map(i => wf.step('g' + i, 'gate', {i}))) }"
    )
    limited = s.workflow(source=four, run_id="limited", limits={"max_concurrent_steps": 2})
    assert limited.exit_code == 0, limited.output
    assert in_flight["max"] == 2


def test_f7_a_program_step_runs_inside_a_workflow(agent: Agent, workspace: Path) -> None:
    src = """async function run(wf) {
      const p = await wf.step('count', 'program', {type: 'script',
        source: 'async function run(ctx) { return (await ctx.glob("**/*.py")).length }'});
      return p.metadata.script_result;
    }"""
    result = agent.session(workspace).workflow(source=src, run_id="with-program")
    assert result.exit_code == 0 and result.metadata["output"] == 1


def test_f7_a_workflow_cannot_start_a_workflow_and_runaway_scripts_stop(
    agent: Agent, workspace: Path
) -> None:
    s = agent.session(workspace)
    nested = s.workflow(
        source="async function run(wf) { await wf.step('w', 'dynamic_workflow', {}) }", run_id="nest"
    )
    assert nested.exit_code == 1 and "cannot start a workflow" in nested.output
    spin = s.workflow(
        source="async function run(wf) { for (;;) {} }", run_id="spin", limits={"timeout_ms": 1500}
    )
    assert spin.exit_code == 1 and spin.error_kind["type"] == "timeout"
    assert _types(workspace, "spin")[-1] == "run_timed_out"


def test_k1_host_workflow_steps_are_trusted_and_model_workflow_steps_are_governed(
    agent: Agent, workspace: Path
) -> None:
    opts = SessionOptions(
        permission_policy=PermissionPolicy(allow=["dynamic_workflow", "read"], deny=["ls"]),
        offer_dynamic_workflow=True,
    )
    src = "async function run(wf) { await wf.step('r', 'read', {file_path: 'README.md'}); return (await wf.step('l', 'ls', {})).exitCode }"
    s = agent.session(workspace, opts)
    assert "dynamic_workflow" in {d["name"] for d in s.tool_definitions()}
    host = s.workflow(source=src, run_id="host")
    assert host.exit_code == 0 and host.metadata["output"] == 0
    origins = {(e.tool, e.origin) for e in s.events() if e.type == "tool_start" and e.tool in ("read", "ls")}
    assert origins == {("read", "trusted_host_nested"), ("ls", "trusted_host_nested")}
    s2 = agent.session(workspace, opts)
    model = s2.model_tool_call("dynamic_workflow", {"source": src, "run_id": "model"})
    assert model.exit_code == 1 and model.error_kind["type"] == "permission_denied"  # the ls step
    origins = {(e.tool, e.origin) for e in s2.events() if e.type == "tool_start" and e.tool in ("read", "ls")}
    assert origins == {("read", "governed_nested"), ("ls", "governed_nested")}


def test_s2_dynamic_workflow_is_hidden_unless_offered(agent: Agent, workspace: Path) -> None:
    s = agent.session(workspace)
    assert "dynamic_workflow" in s.tool_names()
    assert "dynamic_workflow" not in {d["name"] for d in s.tool_definitions()}


def test_f3_log_safety_checks_refuse_unsafe_ids_and_symlinks(
    agent: Agent, workspace: Path, tmp_path_factory: Any
) -> None:
    s = agent.session(workspace)
    for bad in ("../escape", "a/b", ".hidden", "", "x" * 129):
        result = s.workflow(source="async function run() {}", run_id=bad)
        assert result.exit_code == 1 and result.error_kind["type"] == "invalid_argument", bad
    outside = tmp_path_factory.mktemp("outside")
    (workspace / ".a3s").mkdir(exist_ok=True)
    (workspace / ".a3s" / "workflow").symlink_to(outside)
    linked = s.workflow(source="async function run() { return 1 }", run_id="linked")
    assert linked.exit_code == 1 and linked.error_kind["type"] == "permission_denied"
    assert not list(outside.iterdir())
    (workspace / ".a3s" / "workflow").unlink()
    (workspace / ".a3s" / "workflow").mkdir()
    (workspace / ".a3s" / "workflow" / "filelink.jsonl").symlink_to(outside / "target.jsonl")
    filelink = s.workflow(source="async function run() { return 1 }", run_id="filelink")
    assert filelink.exit_code == 1 and filelink.error_kind["type"] == "permission_denied"
    assert not (outside / "target.jsonl").exists()


def test_f3_a_torn_last_line_is_cut_and_the_run_resumes(agent: Agent, workspace: Path) -> None:
    s = agent.session(workspace)
    assert s.workflow(source=THREE_STEPS, input={"query": "q"}, run_id="torn").exit_code == 0
    log = workspace / ".a3s" / "workflow" / "torn.jsonl"
    with log.open("a") as fh:
        fh.write('{"run_id":"torn","sequence":99,"ev')  # a crash in the middle of a write
    again = s.workflow(source=THREE_STEPS, input={"query": "q"}, run_id="torn")
    assert again.exit_code == 0
    assert all(json.loads(line) for line in log.read_text().splitlines())


# ---- the CLI: --json, status/history, and a SIGKILLed run that resumes ---------------------------

KILL_FLOW = """
async function run(wf, input) {
  const one = await wf.step('one', 'bash', {command: 'echo one >> one.log; echo 1'});
  const two = await wf.step('two', 'bash', {command: 'echo two >> two.log; touch two.started; while [ ! -f go ]; do sleep 0.05; done; echo 2'});
  return [one.output.trim(), two.output.trim()];
}
"""


def _cli(*args: str, cwd: Path, **kw: Any) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("A3S_")}
    return subprocess.run(
        [str(BIN / "a3s-fleet"), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120, **kw
    )


def test_f3_a_sigkilled_run_resumes_without_repeating_finished_steps(workspace: Path) -> None:
    (workspace / "flow.js").write_text(KILL_FLOW)
    env = {k: v for k, v in os.environ.items() if not k.startswith("A3S_")}
    cmd = [
        str(BIN / "a3s-fleet"),
        "workflow",
        "run",
        "flow.js",
        "--run-id",
        "killed",
        "--input",
        '{"query": "k"}',
    ]
    proc = subprocess.Popen(cmd, cwd=workspace, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not (workspace / "two.started").exists():
            assert time.monotonic() < deadline and proc.poll() is None, "step two never started"
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        (workspace / "go").write_text("")  # lets an orphaned step shell (if any) end
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    status = _cli("workflow", "status", "killed", "--json", cwd=workspace)
    assert json.loads(status.stdout)["status"] == "interrupted"
    resumed = _cli(
        "workflow",
        "run",
        "flow.js",
        "--run-id",
        "killed",
        "--input",
        '{"query": "k"}',
        "--json",
        cwd=workspace,
    )
    assert resumed.returncode == 0, resumed.stderr
    data = json.loads(resumed.stdout)
    assert set(data) == {"run_id", "status", "output", "steps"}
    assert data["status"] == "completed" and data["output"] == ["1", "2"]
    assert {st["step_id"]: st["status"] for st in data["steps"]} == {"one": "recovered", "two": "completed"}
    assert (workspace / "one.log").read_text() == "one\n"  # the finished step did not run again
    assert (workspace / "two.log").read_text().count("two") == 2  # the unfinished one did (F-3)
    history = _cli("workflow", "history", "killed", cwd=workspace).stdout
    assert "run_completed" in history and history.count("run_started") == 2


def test_cli_workflow_failure_exits_non_zero_with_the_step_error(workspace: Path) -> None:
    (workspace / "bad.js").write_text(
        "async function run(wf) { await wf.step('boom', 'bash', {command: 'exit 7'}) }"
    )
    out = _cli("workflow", "run", "bad.js", "--run-id", "bad", "--json", cwd=workspace)
    assert out.returncode == 1
    data = json.loads(out.stdout)
    assert data["status"] == "failed" and "step 'boom' (bash) failed" in data["error"]
    assert json.loads(_cli("workflow", "status", "bad", "--json", cwd=workspace).stdout)["status"] == "failed"
    missing = _cli("workflow", "status", "nope", cwd=workspace)
    assert (
        missing.returncode == 2
        and missing.stderr.startswith("error: not_found")
        and "Traceback" not in missing.stderr
    )


def test_k6_closing_the_session_cancels_a_running_workflow_and_records_it(
    agent: Agent, workspace: Path
) -> None:
    import threading

    from tools.program.vm import active_pids

    s = agent.session(workspace)
    src = """async function run(wf) {
      await wf.step('slow', 'bash', {command: 'touch slow.started; sleep 60'});
    }"""
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(s.workflow(source=src, run_id="closing")))
    t.start()
    deadline = time.monotonic() + 60
    while not (workspace / "slow.started").exists():
        assert time.monotonic() < deadline, "the step never started"
        time.sleep(0.05)
    s.close()
    t.join(60)
    assert out and out[0].exit_code == 1 and out[0].error_kind["type"] == "cancelled"
    types = _types(workspace, "closing")
    assert types[-2:] == ["step_failed", "run_cancelled"]
    for _ in range(250):
        if not active_pids():
            break
        time.sleep(0.02)
    assert not active_pids()
