"""A session's budget bounds its workflow steps on a fleet as it does embedded (SPEC K-3, F-1, F-2).

Real Redis and a real ``a3s-fleet worker``. Embedded, every workflow step is a nested call on the
session's own kernel: it is admitted by the session's budget and its output is charged to it. On a
fleet each step is a job whose worker restores the session from the snapshot taken when the run
started (cached per worker process): each process counted only its own steps, and nothing came
back to the session — after six steps its count still said 1, so two processes admitted a step
each where one call was left, and the next run or direct call saw the budget unspent.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernel import Budget
from kernel.options import SessionOptions
from kernel.policy import PermissionPolicy
from orchestrator import Agent

from .conftest import FleetEnv, WorkerFactory

pytestmark = pytest.mark.fleet

STEPS = 6
SEQUENTIAL = f"""
async function run(wf) {{
  const out = [];
  for (let i = 0; i < {STEPS}; i++) {{
    try {{
      await wf.step('s' + i, 'ls', {{path: '.'}});
      out.push('ok');
    }} catch (e) {{
      out.push((e.errorKind || {{}}).type || 'error');
    }}
  }}
  return out;
}}"""
# Two steps that each wait (a while) for the other to start: on two worker processes both run.
WAIT = "touch {me}.started; for i in $(seq 60); do [ -f {other}.started ] && exit 0; sleep 0.05; done; exit 0"
PARALLEL = f"""
async function run(wf) {{
  const kind = p => p.then(r => 'ok', e => (e.errorKind || {{}}).type || 'error');
  return await Promise.all([
    kind(wf.step('a', 'bash', {{command: {json.dumps(WAIT.format(me="a", other="b"))}}})),
    kind(wf.step('b', 'bash', {{command: {json.dumps(WAIT.format(me="b", other="a"))}}})),
  ]);
}}"""


def _options(calls: int) -> SessionOptions:
    return SessionOptions(
        permission_policy=PermissionPolicy(allow=["*"]), budget=Budget(max_tool_calls=calls)
    )


def test_k3_f1_a_fleet_workflows_steps_are_admitted_and_counted_by_the_sessions_budget(
    fleet: FleetEnv, spawn_worker: WorkerFactory, tmp_path: Path
) -> None:
    """K-3/F-1: six ``ls`` steps on a 4-call budget (the workflow call is one of them): the fourth
    and later steps are refused ``budget_exhausted`` and the session has spent 4, on the fleet as
    embedded; and two concurrent steps with one call left run one, not one per worker process."""
    (tmp_path / "a.txt").write_text("alpha\n")
    spawn_worker(fleet, "wfbudget", pool="prefork", concurrency=2)
    with Agent() as agent:
        session = agent.session(str(tmp_path), _options(4))
        embedded = session.workflow(source=SEQUENTIAL, input={})
        embedded_used = session.snapshot()["budget_used"]["tool_calls"]
    with Agent(fleet.settings()) as agent:
        session = agent.session(str(tmp_path), _options(4))
        remote = session.workflow(source=SEQUENTIAL, input={})
        remote_used = session.snapshot()["budget_used"]["tool_calls"]
        assert remote.metadata["workflow"]["log"].startswith("redis stream"), remote.metadata
        narrow = agent.session(str(tmp_path), _options(2))
        both = narrow.workflow(source=PARALLEL, input={})
        narrow_used = narrow.snapshot()["budget_used"]["tool_calls"]
    assert embedded.metadata["output"] == ["ok"] * 3 + ["budget_exhausted"] * 3, embedded.output
    assert embedded_used == 4
    assert remote.metadata["output"] == embedded.metadata["output"], remote.output
    assert remote_used == 4, remote_used
    assert sorted(both.metadata["output"]) == ["budget_exhausted", "ok"], both.output
    assert narrow_used == 2, narrow_used
