"""``generate_object`` steps of a dynamic workflow are bounded by ``limits.maxConcurrentGenerations``
(SPEC F-2, G-1; REFERENCE 4.15).

Real QuickJS driver, real ``generate_object`` tool, a real OpenAI-compatible loopback server that
counts the requests it holds at once. Concurrency is proven with the server's barrier
(``await_peak``: a request is held until that many have been in flight together), never with timings.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator import Agent
from tests.model_servers import ScriptedOpenAIServer

STEPS = 6
ITEM = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "n": {"type": "integer"}},
    "required": ["name", "n"],
    "additionalProperties": False,
}
SIX_GENERATIONS = f"""
async function run(wf) {{
  const ids = [{", ".join(str(i) for i in range(STEPS))}];
  const steps = await Promise.all(ids.map(i =>
    wf.step('gen-' + i, 'generate_object', {{schema: {json.dumps(ITEM)}, prompt: 'item number ' + i}})));
  return steps.map(s => JSON.parse(s.output).object);
}}
"""


def _prompt_number(body: dict[str, Any]) -> int:
    for message in body.get("messages", []):
        content = message.get("content")
        text = content if isinstance(content, str) else json.dumps(content)
        found = re.search(r"item number (\d+)", text or "")
        if found:
            return int(found.group(1))
    raise AssertionError(f"no item number in the request: {body}")


def _answer(hold_until: int) -> Any:
    """Each request names its item; the answer is that item's object, held at the barrier."""

    def route(body: dict[str, Any]) -> dict[str, Any]:
        n = _prompt_number(body)
        call = {"id": f"g{n}", "name": "result", "arguments": {"name": f"item-{n}", "n": n}}
        # The short hold after the barrier keeps a pair in flight long enough for a broken bound
        # (a third request admitted) to show in the peak.
        return {"tool_calls": [call], "await_peak": hold_until, "delay_s": 0.1}

    return route


@pytest.fixture()
def model_agent() -> Iterator[Agent]:
    a = Agent(model="openai:gen-model")
    yield a
    a.close()


def _run(agent: Agent, workspace: Path, monkeypatch: pytest.MonkeyPatch, limit: int, hold: int) -> Any:
    with ScriptedOpenAIServer(route=_answer(hold)) as srv:
        for k, v in srv.env().items():
            monkeypatch.setenv(k, v)
        result = agent.session(workspace).workflow(
            source=SIX_GENERATIONS,
            run_id=f"gen-{limit}",
            limits={"maxConcurrentSteps": 8, "maxConcurrentGenerations": limit},
        )
        assert len(srv.requests) == STEPS  # one generation each, no repair round
        return result, srv.peak_in_flight


def test_f2_generate_object_steps_are_bounded_by_max_concurrent_generations(
    model_agent: Agent, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    result, peak = _run(model_agent, workspace, monkeypatch, limit=2, hold=2)
    assert result.exit_code == 0, result.output
    assert peak == 2  # pairs overlapped (the barrier), and never a third while 8 step slots were free
    assert result.metadata["output"] == [{"name": f"item-{i}", "n": i} for i in range(STEPS)]
    steps = result.metadata["workflow"]["steps"]
    assert sorted(st["step_id"] for st in steps) == [f"gen-{i}" for i in range(STEPS)]
    assert {st["status"] for st in steps} == {"completed"}


def test_f2_a_higher_generation_limit_fans_out_further(
    model_agent: Agent, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    result, peak = _run(model_agent, workspace, monkeypatch, limit=4, hold=3)
    assert result.exit_code == 0, result.output
    assert 2 < peak <= 4
    assert result.metadata["output"] == [{"name": f"item-{i}", "n": i} for i in range(STEPS)]


def test_f2_generations_run_single_lane_by_default(
    model_agent: Agent, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with ScriptedOpenAIServer(route=_answer(1)) as srv:
        for k, v in srv.env().items():
            monkeypatch.setenv(k, v)
        result = model_agent.session(workspace).workflow(source=SIX_GENERATIONS, run_id="gen-default")
        assert result.exit_code == 0, result.output
        assert srv.peak_in_flight == 1
    assert result.metadata["output"] == [{"name": f"item-{i}", "n": i} for i in range(STEPS)]
