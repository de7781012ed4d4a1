"""Usage counters a model server reports are clamped where they enter (SPEC A-2, K-8).

``flows.providers.types.token_count``: a negative counter is 0 (it used to be subtracted from the
session budget, handing back tokens charged before), a number past ``MAX_TOKEN_COUNT`` (Infinity
included) is ``MAX_TOKEN_COUNT``, and anything else that is not a number is 0, as when no usage
comes — the answer is kept (a string, a list or Infinity raised ``ValueError``/``TypeError``/
``OverflowError`` out of the provider and the whole answer was lost).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flows.providers.types import MAX_TOKEN_COUNT
from kernel.budget import Budget
from kernel.options import SessionOptions
from orchestrator import Agent
from tests.flows.fixtures.hostile_model_server import ask
from tests.model_servers import ScriptedOpenAIServer

# (what the server sends as the prompt counter, what the run is charged)
CASES = [(-1_000_000, 0), ("abc", 0), ([1], 0), (float("inf"), MAX_TOKEN_COUNT), (1e300, MAX_TOKEN_COUNT)]


@pytest.mark.parametrize("sent, charged", CASES, ids=["negative", "string", "list", "infinity", "1e300"])
@pytest.mark.parametrize("wire", ["openai", "anthropic"])
def test_a2_k8_usage_counters_from_the_wire_are_clamped_and_the_answer_kept(
    monkeypatch: pytest.MonkeyPatch, wire: str, sent: Any, charged: int
) -> None:
    key, out_key = (
        ("prompt_tokens", "completion_tokens") if wire == "openai" else ("input_tokens", "output_tokens")
    )
    monkeypatch.setenv("USAGE", json.dumps({key: sent, out_key: -5}))  # json writes inf as Infinity
    result = asyncio.run(ask("usage", wire, False, 30.0))
    assert result.get("text") == "hello", result
    assert result["usage"]["prompt_tokens"] == charged and result["usage"]["completion_tokens"] == 0


@pytest.fixture()
def agent() -> Iterator[Agent]:
    a = Agent(model="openai:test-model")
    yield a
    a.close()


def test_a2_a_negative_usage_cannot_hand_back_the_session_budget(
    agent: Agent, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server reporting -1,000,000 prompt tokens used to leave the budget 999,900 tokens below
    zero after the next real answer, so a 100-token budget admitted a third request (and more)."""
    turns = [
        {"text": "a", "usage": {"prompt_tokens": -1_000_000, "completion_tokens": 0}},
        {"text": "b", "usage": {"prompt_tokens": 100, "completion_tokens": 0}},
        {"text": "c", "usage": {"prompt_tokens": 100, "completion_tokens": 0}},
    ]
    with ScriptedOpenAIServer(turns) as server:
        for k, v in server.env().items():
            monkeypatch.setenv(k, v)
        s = agent.session(workspace, SessionOptions(budget=Budget(max_model_tokens=100)))
        first, second, third = s.send("one"), s.send("two"), s.send("three")
        used = s.snapshot()["budget_used"]
    assert first.success and second.success and used["prompt_tokens"] == 100
    assert first.usage.prompt_tokens == 0
    assert not third.success and third.error is not None
    assert third.error["type"] == "budget_exhausted" and third.error["resource"] == "model_tokens"
