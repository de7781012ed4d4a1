"""A session's budget bounds its fan-out branches and direct calls on a fleet as it does embedded
(SPEC K-3, F-1).

Real Redis and a real prefork ``a3s-fleet worker``. Embedded, every ``session.fan_out`` branch and
every direct call (``batch`` included, with its children) is a call on the session's own kernel:
admitted by the session's budget, its output charged to it. On a fleet each is a job whose worker
restores the session from a snapshot and counted only in that worker's copy: the session's count
never moved, so a 4-call budget let any number of branches run.
"""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from config.settings import Settings
from kernel import Budget
from kernel.options import SessionOptions
from kernel.policy import PermissionPolicy
from orchestrator import Agent
from orchestrator.fanout import Branch

from .conftest import BIN, EXTRA_TOOLS, ROOT, FleetEnv, WorkerFactory

pytestmark = pytest.mark.fleet

BRANCHES = 6


def _options(calls: int) -> SessionOptions:
    return SessionOptions(
        permission_policy=PermissionPolicy(allow=["*"]), budget=Budget(max_tool_calls=calls)
    )


def _kinds(run: Any) -> list[str]:
    out = []
    for outcome in run.outcomes:
        result = outcome.result
        out.append(
            "ok" if result is not None and result.exit_code == 0 else (result.error_kind or {}).get("type")
        )
    return out


def _scenario(session: Any) -> dict[str, Any]:
    """Six ``ls`` branches on a 4-call budget, then one more fan-out and a direct call (nothing left)."""
    branches = [Branch("ls", {"path": "."}, f"ls {i}") for i in range(BRANCHES)]
    first = session.fan_out(branches, allow_partial_failure=True, timeout_ms=60_000)
    used = dict(session.snapshot()["budget_used"])
    second = session.fan_out(branches[:2], allow_partial_failure=True, timeout_ms=60_000)
    direct = session.tool("ls", {"path": "."})
    refused = next(o.result for o in first.outcomes if o.result is not None and o.result.exit_code != 0)
    return {
        "first": sorted(_kinds(first)),
        "used": {k: used[k] for k in ("tool_calls", "output_bytes")},
        "second": _kinds(second),
        "direct": (direct.error_kind or {}).get("type"),
        "after": {k: session.snapshot()["budget_used"][k] for k in ("tool_calls", "output_bytes")},
        "refused_output": refused.output,
        "refused_kind": sorted((refused.error_kind or {}).keys()),
        "refused_type": refused.error_kind["type"],
    }


def _batch(session: Any) -> dict[str, Any]:
    """``batch`` of five ``ls`` on a 4-call budget: the batch is one call, three children run."""
    result = session.batch([{"tool": "ls", "args": {"path": "."}} for _ in range(5)])
    used = session.snapshot()["budget_used"]
    return {"exit": result.exit_code, "used": {k: used[k] for k in ("tool_calls", "output_bytes")}}


def test_k3_f1_fleet_fanout_branches_are_admitted_and_counted_by_the_sessions_budget(
    fleet: FleetEnv, spawn_worker: WorkerFactory, tmp_path: Path
) -> None:
    """K-3/F-1: six branches on a 4-call budget: four run, two are refused ``budget_exhausted`` (same
    error shape), the session has spent what embedded spends (calls and output bytes), and a later
    fan-out or direct call is refused without a job — on the fleet as embedded; a ``batch``'s
    children are charged to the session too."""
    (tmp_path / "a.txt").write_text("alpha\n")
    spawn_worker(fleet, "fobudget", pool="prefork", concurrency=2)
    with Agent() as agent:
        embedded = _scenario(agent.session(str(tmp_path), _options(4)))
        embedded_batch = _batch(agent.session(str(tmp_path), _options(4)))
    with Agent(fleet.settings()) as agent:
        remote = _scenario(agent.session(str(tmp_path), _options(4)))
        remote_batch = _batch(agent.session(str(tmp_path), _options(4)))
    assert embedded["first"] == ["budget_exhausted"] * 2 + ["ok"] * 4, embedded
    assert embedded["used"]["tool_calls"] == 4 and embedded["after"]["tool_calls"] == 4, embedded
    assert embedded["second"] == ["budget_exhausted"] * 2 and embedded["direct"] == "budget_exhausted"
    assert remote == embedded
    assert embedded_batch["used"]["tool_calls"] == 4, embedded_batch
    assert remote_batch == embedded_batch


def _cancelled(session: Any) -> dict[str, Any]:
    """Two slow branches cut by the fan-out's deadline on a 3-call budget, then one more call."""
    naps = [Branch("nap", {"ms": 20_000}, f"nap {i}") for i in range(2)]
    run = session.fan_out(naps, allow_partial_failure=True, timeout_ms=1_500)
    budget = session.kernel.budget
    held = (budget.reserved["tool_calls"], budget.held_calls)
    after = session.tool("ls", {"path": "."})
    return {
        "ran": [o.result is not None and o.result.exit_code == 0 for o in run.outcomes],
        "held": held,
        "after": after.exit_code,
        "calls": session.snapshot()["budget_used"]["tool_calls"],
    }


def test_k3_f1_a_cancelled_fleet_branch_releases_its_hold_and_counts_as_one_call(
    fleet: FleetEnv, spawn_worker: WorkerFactory, tmp_path: Path
) -> None:
    """K-3/F-1: branches cancelled by the fan-out's deadline hold nothing afterwards and count one
    call each (the job may have run), as embedded: the one call left still runs."""
    spawn_worker(fleet, "focancel", pool="threads", concurrency=2)
    with Agent(Settings(extra_tools=EXTRA_TOOLS)) as agent:
        embedded = _cancelled(agent.session(str(tmp_path), _options(3)))
    with Agent(fleet.settings()) as agent:
        remote = _cancelled(agent.session(str(tmp_path), _options(3)))
    assert embedded == {"ran": [False, False], "held": (0, 0), "after": 0, "calls": 3}, embedded
    assert remote == embedded


def _two_batches(session: Any) -> dict[str, Any]:
    """Two ``batch`` branches in flight at once on a 6-call budget, each a 1 s nap then five ``ls``."""
    calls = [{"tool": "nap", "args": {"ms": 1_000}}] + [{"tool": "ls", "args": {"path": "."}}] * 5
    batch = Branch("batch", {"invocations": calls}, "batch")
    run = session.fan_out([batch, batch], allow_partial_failure=True, timeout_ms=60_000)
    ran = [o.result.metadata for o in run.outcomes if o.result is not None and o.result.exit_code == 0]
    return {
        "branches": sorted(_kinds(run)),
        "children_ran": sum(meta["success_count"] for meta in ran),
        "used": session.snapshot()["budget_used"]["tool_calls"],
        "held": (session.kernel.budget.reserved, session.kernel.budget.held_calls),
    }


def test_k3_f1_two_fleet_batches_in_flight_never_spend_the_same_remainder(
    fleet: FleetEnv, spawn_worker: WorkerFactory, tmp_path: Path
) -> None:
    """K-3/F-1: a worker's copy of the budget knows nothing of the session's other calls in flight, so
    each of two ``batch`` branches on two worker processes let its children spend the whole
    remainder: a 6-call budget ran 12 calls. Now the first holds what is left (its allotment, all its
    worker may spend), the second is refused ``budget_exhausted`` as a second concurrent ``task`` is
    embedded, and the session has spent exactly its limit; nothing stays held."""
    spawn_worker(fleet, "fobatches", pool="prefork", concurrency=2)
    with Agent(fleet.settings()) as agent:
        remote = _two_batches(agent.session(str(tmp_path), _options(6)))
    assert remote["used"] == 6, remote
    assert remote["branches"] == ["budget_exhausted", "ok"], remote
    assert remote["children_ran"] == 5, remote  # the nap and four ls: 1 + 5 = 6 calls
    assert remote["held"] == ({"tool_calls": 0, "output_bytes": 0, "model_tokens": 0}, 0), remote


def _budget_events(events: list[dict[str, Any]]) -> Counter[tuple[str, Any, Any]]:
    """What a watcher of the session's events sees of its calls and budget: (type, kind, state)."""
    return Counter(
        (e["type"], e["data"].get("kind"), e["data"].get("state"))
        for e in events
        if e["type"] in ("tool_start", "tool_end", "tool_error", "budget_threshold")
    )


def test_k3_s5_a_refused_fleet_branch_and_the_thresholds_reach_the_sessions_events_as_embedded(
    fleet: FleetEnv, spawn_worker: WorkerFactory, tmp_path: Path
) -> None:
    """K-3/S-5: three ``ls`` branches on a 2-call budget. Embedded, the session's events show three
    starts, the soft threshold at the second call, and the third call's hard threshold, error and
    ``rejected`` end. On a fleet the refused branch left no event at all (nothing was sent) and the
    soft threshold came, if ever, from a worker's copy of the budget; now the session's stream shows
    exactly what embedded shows."""
    spawn_worker(fleet, "foevents", pool="prefork", concurrency=2)
    branches = [Branch("ls", {"path": "."}, f"ls {i}") for i in range(3)]
    with Agent() as agent:
        session = agent.session(str(tmp_path), _options(2))
        session.fan_out(branches, allow_partial_failure=True, timeout_ms=60_000)
        embedded = _budget_events([e.to_json() for e in session.events()])
    with Agent(fleet.settings()) as agent:
        session = agent.session(str(tmp_path), _options(2))
        session.fan_out(branches, allow_partial_failure=True, timeout_ms=60_000)
        sid = session.id
    out = subprocess.run(
        [str(BIN / "a3s-fleet"), "events", sid],
        env=fleet.env, cwd=ROOT, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    remote = _budget_events([json.loads(line) for line in out.stdout.splitlines()])
    assert embedded == Counter(
        {
            ("tool_start", None, None): 3,
            ("budget_threshold", "soft", None): 1,
            ("budget_threshold", "hard", None): 1,
            ("tool_error", None, None): 1,
            ("tool_end", None, "rejected"): 1,
            ("tool_end", None, "completed"): 2,
        }
    ), embedded
    assert remote == embedded
