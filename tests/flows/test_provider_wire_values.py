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


# A shape the reader cannot read (``flows/providers/openai_chunks.py``): before, each raised
# AttributeError/TypeError/ValueError/RecursionError out of the provider (the run: internal_error).
CHUNK = {"id": "x", "object": "chat.completion.chunk", "created": 1, "model": "m"}
MALFORMED_CHUNKS = {
    "choices_an_object": {**CHUNK, "choices": {"a": 1}},
    "choices_a_number": {**CHUNK, "choices": 5},
    "a_choice_a_list": {**CHUNK, "choices": [[1]]},
    "delta_a_list": {**CHUNK, "choices": [{"index": 0, "delta": [1]}]},
    "delta_a_string": {**CHUNK, "choices": [{"index": 0, "delta": "x"}]},
    "tool_calls_an_object": {**CHUNK, "choices": [{"index": 0, "delta": {"tool_calls": {"a": 1}}}]},
    "a_tool_call_a_number": {**CHUNK, "choices": [{"index": 0, "delta": {"tool_calls": [5]}}]},
    "function_a_list": {**CHUNK, "choices": [{"index": 0, "delta": {"tool_calls": [{"function": [1]}]}}]},
    "data_a_list": [1, 2],
    "data_not_json": '{"id": "x", "cho',
    "integer_over_the_int_string_limit": '{"choices": [{"index": ' + "9" * 5000 + "}]}",
    "nested_past_the_recursion_limit": "[" * 100_000 + "]" * 100_000,
}
MALFORMED_BODIES = {
    "a_list": "[1, 2]",
    "cut": '{"choices": [',
    "nested_past_the_recursion_limit": "[" * 100_000 + "]" * 100_000,
    "choices_an_object": json.dumps({"choices": {"a": 1}}),
    "a_choice_a_number": json.dumps({"choices": [5]}),
    "message_a_list": json.dumps({"choices": [{"index": 0, "message": [1]}]}),
    "tool_calls_an_object": json.dumps({"choices": [{"index": 0, "message": {"tool_calls": {"a": 1}}}]}),
    "a_tool_call_a_number": json.dumps({"choices": [{"index": 0, "message": {"tool_calls": [5]}}]}),
}


def _malformed(result: dict[str, Any]) -> bool:
    return result.get("error") == {"type": "provider_error", "status": 200, "reason": "malformed"}


@pytest.mark.parametrize("case", sorted(MALFORMED_CHUNKS))
def test_a3_k8_an_unreadable_chunk_is_a_typed_provider_error(
    monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    chunk = MALFORMED_CHUNKS[case]
    monkeypatch.setenv("EVENTS", json.dumps([["x", chunk if isinstance(chunk, str) else json.dumps(chunk)]]))
    result = asyncio.run(ask("events", "openai", True, 30.0))
    assert _malformed(result), result
    assert result["requests"] == 1 and result["retries"] == 0, result


@pytest.mark.parametrize("case", sorted(MALFORMED_BODIES))
def test_a3_k8_an_unreadable_blocking_answer_is_a_typed_provider_error(
    monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    monkeypatch.setenv("BODY", MALFORMED_BODIES[case])
    result = asyncio.run(ask("body", "openai", False, 30.0))
    assert _malformed(result), result


@STREAM
def test_a3_a_finish_reason_of_the_wrong_type_is_never_handed_on(
    monkeypatch: pytest.MonkeyPatch, stream: bool
) -> None:
    chunk = {**CHUNK, "choices": [{"index": 0, "delta": {"content": "a"}, "finish_reason": ["stop"]}]}
    body = {"choices": [{"index": 0, "message": {"content": "a"}, "finish_reason": {"x": 1}}]}
    monkeypatch.setenv("EVENTS", json.dumps([["x", json.dumps(chunk)]]))
    monkeypatch.setenv("BODY", json.dumps(body))
    from flows.agent.model_turn import model_turn
    from flows.providers import Message, ModelRequest, provider_for

    async def turn() -> Any:
        async with HostileModelServer("events" if stream else "body", "openai") as srv:
            provider = provider_for("openai:m", srv.env)
            request = ModelRequest([Message("user", "hi")], stream=stream)
            return await model_turn(provider, request, 1, lambda _k, _d: None)

    completion = asyncio.run(turn())
    assert completion.message.content == "a" and completion.stop_reason == "stop", completion
