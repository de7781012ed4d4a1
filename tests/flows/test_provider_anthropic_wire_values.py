"""Loosely typed Anthropic answers become the conversation's types or a typed error (SPEC A-2, A-3).

``flows/providers/anthropic_events.py``, the twin of ``wire_values`` for the OpenAI reader. A real
loopback server (``tests/flows/fixtures/hostile_model_server.py``, modes ``events`` and ``body``)
sends each malformed answer. Before, a number where text belongs, a list or null where an object
belongs, a list as ``index``, or data that is not JSON raised TypeError/AttributeError/ValueError/
RecursionError out of the provider, and a number as a tool call's ``id`` was handed on as it came.
Now every such answer is read as the types the rest expects, or ends the request
``provider_error{status: 200, reason: "malformed"}`` — never retried, never an exception.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator import Agent
from tests.flows.fixtures.hostile_model_server import HostileModelServer, ask

START = {
    "type": "message_start",
    "message": {"id": "m", "type": "message", "role": "assistant", "content": [], "model": "m"},
}
START["message"]["usage"] = {"input_tokens": 3, "output_tokens": 1}  # type: ignore[index]
TEXT_BLOCK = {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
TOOL_BLOCK = {
    "type": "content_block_start",
    "index": 0,
    "content_block": {"type": "tool_use", "id": "t1", "name": "ls", "input": {}},
}


def _event(data: Any) -> list[str]:
    text = data if isinstance(data, str) else json.dumps(data)
    name = data.get("type") if isinstance(data, dict) and isinstance(data.get("type"), str) else "x"
    return [name if name != "x" else "content_block_delta", text]


def _delta(delta: Any, index: Any = 0) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": delta}


# Events (after a valid message_start) that cannot be read: provider_error{reason: malformed}.
MALFORMED = {
    "data_a_list": [[1, 2]],
    "data_a_number": [5],
    "content_block_a_number": [{"type": "content_block_start", "index": 0, "content_block": 5}],
    "delta_null": [_delta(None)],
    "message_delta_delta_a_string": [{"type": "message_delta", "delta": "x", "usage": {"output_tokens": 1}}],
    "data_not_json": ['{"type": "content_block_delta", "ind'],
    "integer_over_the_int_string_limit": ['{"type": "content_block_delta", "index": ' + "9" * 5000 + "}"],
    "nested_past_the_recursion_limit": ["[" * 100_000 + "]" * 100_000],
}


def _events_turn(monkeypatch: pytest.MonkeyPatch, events: list[Any], start: Any = START) -> dict[str, Any]:
    monkeypatch.setenv("EVENTS", json.dumps([_event(start), *(_event(e) for e in events)]))
    return asyncio.run(ask("events", "anthropic", True, 30.0))


def _malformed(result: dict[str, Any]) -> bool:
    error = result.get("error")
    return error == {"type": "provider_error", "status": 200, "reason": "malformed"}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a3_k8_an_unreadable_stream_event_is_a_typed_provider_error(
    monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    result = _events_turn(monkeypatch, MALFORMED[case])
    assert _malformed(result), result
    assert result["requests"] == 1 and result["retries"] == 0, result  # the same answer would come


def test_a3_k8_a_message_start_whose_message_is_a_list_is_a_typed_provider_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    result = _events_turn(monkeypatch, [], start={"type": "message_start", "message": []})
    assert _malformed(result), result
    assert "message_start's message is list" in result["message"], result


def test_a3_text_of_the_wrong_type_is_never_handed_on(monkeypatch: pytest.MonkeyPatch) -> None:
    events = [
        TEXT_BLOCK,
        _delta({"type": "text_delta", "text": 5}),
        _delta({"type": "text_delta", "text": {"a": 1}}),
        _delta({"type": "text_delta", "text": [{"type": "text", "text": "hello"}]}),
        _delta({"type": "text_delta", "text": " there"}),
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": 12}},
        {"type": "message_delta", "delta": {"stop_reason": ["end_turn"]}, "usage": {"output_tokens": "9"}},
    ]
    result = _events_turn(monkeypatch, events)
    assert result.get("text") == "hello there", result
    assert result["usage"]["prompt_tokens"] == 3, result


def test_a3_tool_call_fields_of_the_wrong_type_are_read_as_their_text(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    events = [
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "tool_use", "id": 7, "name": "ls"},
        },
        # an index that is not an int counts as 0, as in the OpenAI reader
        _delta({"type": "input_json_delta", "partial_json": {"path": "."}}, index=[0]),
        {**TOOL_BLOCK, "index": 1, "content_block": {"type": "tool_use", "id": ["x"], "name": 5}},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 2}},
    ]
    result = _events_turn(monkeypatch, events)
    assert result["tool_calls"] == [
        {"id": "7", "name": "ls", "arguments": '{"path": "."}'},
        {"id": "toolu_1", "name": "5", "arguments": ""},
    ], result
    calls = result["tool_calls"]
    assert all(isinstance(v, str) for c in calls for v in c.values()), calls


def test_a3_unknown_event_types_are_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    events = [TEXT_BLOCK, {"type": 5, "index": 0}, _delta({"type": "text_delta", "text": "ok"})]
    result = _events_turn(monkeypatch, events)
    assert result.get("text") == "ok", result


def _body_turn(monkeypatch: pytest.MonkeyPatch, body: str) -> dict[str, Any]:
    monkeypatch.setenv("BODY", body)
    return asyncio.run(ask("body", "anthropic", False, 30.0))


@pytest.mark.parametrize(
    "body",
    ["[1, 2]", "5", '{"content": [', "[" * 100_000 + "]" * 100_000],
    ids=["list", "number", "cut", "deep"],
)
def test_a3_k8_an_unreadable_blocking_answer_is_a_typed_provider_error(
    monkeypatch: pytest.MonkeyPatch, body: str
) -> None:
    result = _body_turn(monkeypatch, body)
    assert _malformed(result), result


def test_a3_a_blocking_answer_with_loose_types_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    body = {
        "content": [
            5,
            {"type": "text", "text": [{"type": "text", "text": "hi"}]},
            {"type": "text", "text": 3},
            {"type": "tool_use", "name": ["ls"], "input": {"path": "."}},
            {"type": "tool_use", "id": 9, "name": "ls"},
        ],
        "stop_reason": {"x": 1},
        "usage": [1],
    }
    result = _body_turn(monkeypatch, json.dumps(body))
    assert result.get("text") == "hi", result
    assert result["tool_calls"] == [
        {"id": "toolu_0", "name": "", "arguments": '{"path": "."}'},
        {"id": "9", "name": "ls", "arguments": "{}"},
    ], result


@pytest.fixture()
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[HostileModelServer]:
    """The fixture server on its own loop thread, for a whole session run."""
    monkeypatch.setenv("EVENTS", json.dumps([_event(START), _event(TEXT_BLOCK), _event(_delta(None))]))
    loop = asyncio.new_event_loop()
    srv = HostileModelServer("events", "anthropic")
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


def test_a2_a3_a_run_whose_stream_is_malformed_ends_provider_error_not_internal_error(
    server: HostileModelServer, workspace: Path
) -> None:
    with Agent(model="anthropic:m") as agent:
        result = agent.session(workspace).send("hi")
    assert result.error == {"type": "provider_error", "status": 200, "reason": "malformed"}, result.error
