"""A model server that echoes the API key it was sent never gets it into results or events (SPEC A-1).

A proxy or gateway may answer a bad key with ``invalid key <the key>``: that text used to become the
run's ``message`` and its ``run_end`` event (which a fleet carries through Redis). The provider now
blots its own key out of any error detail it quotes (``flows.providers.errors.body_detail``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator import Agent
from tests.model_servers import ScriptedAnthropicServer, ScriptedOpenAIServer

KEY = "proxy-key-0123456789abcdef"
WIRES = [
    ("openai:m", ScriptedOpenAIServer, "OPENAI_API_KEY"),
    ("anthropic:m", ScriptedAnthropicServer, "ANTHROPIC_API_KEY"),
]
ECHO = f"invalid key {KEY} for this gateway"


@pytest.fixture()
def agent() -> Iterator[Agent]:
    a = Agent()
    yield a
    a.close()


def _run(agent: Agent, workspace: Path, model: str, streaming: bool) -> tuple[Any, str]:
    s = agent.session(workspace, model=model)
    if streaming:
        stream = s.stream("hi")
        list(stream)
        result = stream.result
    else:
        result = s.send("hi")
    seen = json.dumps([e.data for e in s.events()], default=str) + json.dumps(s.snapshot(), default=str)
    return result, seen


@pytest.mark.parametrize("model, server_cls, key_var", WIRES)
@pytest.mark.parametrize("how", ["status_401", "stream_error_event"])
def test_a1_an_api_key_echoed_by_the_server_reaches_neither_the_result_nor_events(
    agent: Agent,
    workspace: Path,
    monkeypatch: pytest.MonkeyPatch,
    model: str,
    server_cls: Any,
    key_var: str,
    how: str,
) -> None:
    if how == "status_401":
        turn: dict[str, Any] = {
            "status": 401,
            "body": {"error": {"type": "authentication_error", "message": ECHO}},
        }
    else:
        turn = {"stream_error": {"type": "invalid_request_error", "message": ECHO}}
    with server_cls([turn] * 3) as srv:
        for k, v in srv.env().items():
            monkeypatch.setenv(k, v)
        monkeypatch.setenv(key_var, KEY)
        result, seen = _run(agent, workspace, model, streaming=how == "stream_error_event")
    assert not result.success and result.error["type"] == "provider_error", result.error
    assert "invalid key [REDACTED] for this gateway" in result.message
    assert KEY not in result.message and KEY not in json.dumps(result.to_json())
    assert KEY not in seen
