"""Concurrent ``task`` calls reserve their children's shares (SPEC K-3, X-3, K-8, F-2).

Two ``task`` steps of one workflow under ``Promise.all`` used to compute their shares from the same
remainder before either was charged, so together they handed out twice what the parent had left.
Each call now reserves its share when it starts and settles (charges what its children spent,
releases the rest) when it ends. Scripted loopback model server (OpenAI wire format), real tools.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kernel import Budget
from kernel.options import SessionOptions
from kernel.policy import PermissionPolicy
from orchestrator import Agent
from tests.model_servers import ScriptedOpenAIServer
from tests.task_support import by_prompt, first_user_text, item, tool_messages


@pytest.fixture()
def ws(tmp_path: Path) -> Path:
    (tmp_path / "a.txt").write_text("alpha\n")
    return tmp_path


class Model:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.scripts: dict[str, list[dict[str, Any]]] = {}
        self.server = ScriptedOpenAIServer(route=by_prompt(self.scripts))
        for k, v in self.server.env().items():
            monkeypatch.setenv(k, v)

    def bodies(self, key: str) -> list[dict[str, Any]]:
        return [r.body for r in self.server.requests if key in first_user_text(r.body)]

    def reads_done(self, key: str) -> int:
        """How many of ``key``'s reads ran (each 'alpha' tool message is one executed read)."""
        bodies = self.bodies(key)
        return sum("alpha" in m for m in tool_messages(bodies[-1])) if bodies else 0


@pytest.fixture()
def model(monkeypatch: pytest.MonkeyPatch) -> Iterator[Model]:
    m = Model(monkeypatch)
    with m.server:
        yield m


@pytest.fixture()
def agent() -> Iterator[Agent]:
    with Agent(model="openai:test-model") as a:
        yield a


def budgeted(calls: int) -> SessionOptions:
    return SessionOptions(
        permission_policy=PermissionPolicy(allow=["*"]), budget=Budget(max_tool_calls=calls)
    )


def greedy(key: str, reads: int = 8, delay_s: float = 0.0) -> list[dict[str, Any]]:
    """A child that asks for ``reads`` reads at once (after ``delay_s``), then answers."""
    calls = [{"id": f"r{i}", "name": "read", "arguments": {"file_path": "a.txt"}} for i in range(reads)]
    first: dict[str, Any] = {"tool_calls": calls}
    if delay_s:
        first["delay_s"] = delay_s
    return [first, {"text": f"{key} done"}]


CONCURRENT = """
async function run(wf) {
  const kind = p => p.then(r => 'ok', e => (e.errorKind || {}).type + ':' + (e.errorKind || {}).resource);
  return await Promise.all([
    kind(wf.step('one', 'task', {tasks: [{agent: 'explore', description: 'one', prompt: 'greedy one'}]})),
    kind(wf.step('two', 'task', {tasks: [{agent: 'explore', description: 'two', prompt: 'greedy two'}]})),
  ]);
}"""


def test_k3_x3_f2_concurrent_task_calls_never_spend_more_than_the_parent_has_left(model, agent, ws) -> None:
    """K-3/X-3/F-2: two ``task`` steps under ``Promise.all`` (a hostile script's way to double its
    budget). Before, both took the whole remainder as their child's share and the children ran
    ~2x the parent's tool calls. Now the first reserves it, the second is refused
    ``budget_exhausted{resource: tool_calls}`` and nothing the children ran exceeds the budget."""
    for key in ("greedy one", "greedy two"):
        model.scripts[key] = greedy(key, delay_s=0.5)
    session = agent.session(str(ws), budgeted(10))
    result = session.workflow(source=CONCURRENT, input={})
    used = session.snapshot()["budget_used"]["tool_calls"]
    children = model.reads_done("greedy one") + model.reads_done("greedy two")
    assert used <= 10, (used, children, result.output)
    # The parent's own admitted calls (the workflow, step one, and step two when it was refused
    # after its own check) and exactly what the child ran: charged once, within the budget
    # (before: 15 child reads on a 10-call budget).
    assert children <= 8 and used - children in (2, 3), (used, children)
    assert result.exit_code == 0, result.output
    assert sorted(result.metadata["output"]) == ["budget_exhausted:tool_calls", "ok"], result.output


CUT_MS = 5000  # long enough for two reads on a loaded machine; the hang outlasts it


def two_reads_then_hang(key: str) -> list[dict[str, Any]]:
    reads = [{"id": f"h{i}", "name": "read", "arguments": {"file_path": "a.txt"}} for i in range(2)]
    return [{"tool_calls": reads}, {"delay_s": 15.0, "text": f"{key} too late"}]


@pytest.mark.parametrize("how", ["timeout_ms", "cancelled"])
def test_k3_x3_a_cut_off_call_charges_what_its_child_spent_and_releases_the_rest(model, ws, how) -> None:
    """K-3/X-3: a ``task`` call whose child is cut off after two reads — by the call's own
    ``timeout_ms`` (the child ends ``timed_out``) or by the call being cancelled (the tool's
    timeout) — is charged exactly those two reads and releases the rest of its reservation, so the
    next call's child gets the whole remainder. Before, an aborted child's spend was never charged
    (its result carries none, and a cancelled call charged nothing): the next call's child got 8
    reads where 6 were left."""
    model.scripts["cut off"] = two_reads_then_hang("cut off")
    model.scripts["next one"] = greedy("next one")
    with Agent(model="openai:test-model") as agent:
        options = budgeted(10)
        if how == "cancelled":
            options = SessionOptions(
                permission_policy=options.permission_policy,
                budget=options.budget,
                tool_timeouts_ms={"task": CUT_MS},
            )
        session = agent.session(str(ws), options)
        first = session.tasks([item("cut off")], **({"timeout_ms": CUT_MS} if how == "timeout_ms" else {}))
        assert first.exit_code == 1, first.output
        # Its own timeout: the child ends timed_out (partial_failure); the tool's: the call is cancelled.
        expected = {"timeout_ms": "partial_failure", "cancelled": "timeout"}[how]
        assert first.error_kind["type"] == expected, first.error_kind
        assert model.reads_done("cut off") == 2
        assert session.snapshot()["budget_used"]["tool_calls"] == 3  # its own call and the 2 reads
        second = session.tasks([item("next one")])
        assert second.exit_code == 0, second.output
        assert model.reads_done("next one") == 6  # 10 - 3 spent - its own call: nothing still held
        assert session.snapshot()["budget_used"]["tool_calls"] == 10
