"""Loosely typed answers of OpenAI-compatible servers become the conversation's types (SPEC A-2, A-3).

The SDK does not validate what a server sends (``flows/providers/wire_values.py``). A ``content``
sent as a list of parts used to end the run ``success`` with its text lost; ``arguments`` sent as a
JSON object instead of its text ended the run ``internal_error``. Both wire shapes are read now, and
a name or id of the wrong type is never handed on as it came.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kernel.options import SessionOptions
from kernel.policy import PermissionPolicy
from orchestrator import Agent
from tests.flows.fixtures.hostile_model_server import HostileModelServer, ask

STREAM = pytest.mark.parametrize("stream", [False, True], ids=["blocking", "streamed"])


def _turn(monkeypatch: pytest.MonkeyPatch, message: dict[str, Any], stream: bool) -> dict[str, Any]:
    monkeypatch.setenv("MESSAGE", json.dumps(message))
    return asyncio.run(ask("message", "openai", stream, 30.0))


@STREAM
def test_a3_content_sent_as_a_list_of_parts_is_read_as_its_text(
    monkeypatch: pytest.MonkeyPatch, stream: bool
) -> None:
    parts = [
        {"type": "text", "text": "hello "},
        {"type": "image_url", "image_url": {}},
        {"type": "text", "text": "there"},
    ]
    result = _turn(monkeypatch, {"content": parts}, stream)
    assert result.get("text") == "hello there", result


@STREAM
def test_a3_arguments_sent_as_a_json_object_are_read_as_their_text(
    monkeypatch: pytest.MonkeyPatch, stream: bool
) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": {"path": "."}}}
    result = _turn(monkeypatch, {"content": None, "tool_calls": [call]}, stream)
    assert result["tool_calls"] == [{"id": "c1", "name": "ls", "arguments": '{"path": "."}'}], result


def test_a3_a_name_or_id_of_the_wrong_type_is_never_handed_on(monkeypatch: pytest.MonkeyPatch) -> None:
    call = {"id": {"x": 1}, "type": "function", "function": {"name": 5, "arguments": "{}"}}
    result = _turn(monkeypatch, {"content": None, "tool_calls": [call]}, False)
    assert result["tool_calls"] == [{"id": "call_0", "name": "5", "arguments": "{}"}], result


@pytest.fixture()
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[HostileModelServer]:
    """The fixture server on its own loop thread, for a whole session run."""
    call = {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": {"path": "."}}}
    monkeypatch.setenv("MESSAGE", json.dumps({"content": None, "tool_calls": [call]}))
    loop = asyncio.new_event_loop()
    srv = HostileModelServer("message", "openai")
    loop.run_until_complete(srv.__aenter__())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    for k, v in srv.env.items():
        monkeypatch.setenv(k, v)
    yield srv
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.run_until_complete(srv.__aexit__(None, None, None))
    loop.close()


def test_a2_a_run_whose_server_sends_object_arguments_runs_the_call(
    server: HostileModelServer, workspace: Path
) -> None:
    with Agent(model="openai:m") as agent:
        options = SessionOptions(permission_policy=PermissionPolicy(allow=["ls"]))
        result = agent.session(workspace, options).send("list", max_steps=2)
    assert result.error is not None and result.error["type"] == "budget_exhausted", result.error
    assert result.tool_calls and result.tool_calls[0].tool == "ls", result.tool_calls
    assert result.tool_calls[0].exit_code == 0
