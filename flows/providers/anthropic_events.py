"""Anthropic answers read with the types the conversation holds (SPEC A-2, A-3; ``wire_values``' twin).

The SDK builds its stream events without validating them: a field holds whatever JSON the server
sent, and an event whose data is not an object comes as a bare list or number. Read as typed, a
number where text belongs (``"text": 5``), a list or null where an object belongs (``"delta":
null``), a list as ``index`` or ``stop_reason``, or data that is not JSON at all raised
TypeError/AttributeError/ValueError/RecursionError out of the provider — the run ended
``internal_error`` — and a number or list as a tool call's ``id``/``name`` was handed on as it came.

Here every field is read through ``flows.providers.wire_values`` (``field``; text, argument text,
names, indexes as the strings and ints the rest of the code expects). An event whose shape
cannot be read (its data, ``message``, ``content_block`` or ``delta`` not an object) or whose data is
not JSON is ``provider_error{status: 200, reason: "malformed"}``: the same request would bring the
same answer, so it is not retried. Unknown event types are skipped, as the SDK does.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pydantic

from flows.providers.errors import malformed
from flows.providers.merge import StreamState
from flows.providers.types import MAX_TOKEN_COUNT, StreamItem, TextDelta, ToolCallDelta, Usage, token_count
from flows.providers.wire_values import (
    MALFORMED,
    as_arguments,
    as_index,
    as_name,
    as_object,
    as_text,
    field,
)

STOP_REASONS = {"end_turn": "stop", "tool_use": "tool_calls", "max_tokens": "length", "stop_sequence": "stop"}


def stop_reason(value: Any) -> str:
    """The neutral finish reason for a ``stop_reason`` ("" when absent or not a name)."""
    reason = as_name(value)
    return STOP_REASONS.get(reason, reason)


def usage_of(raw: Any, base: Usage | None = None) -> Usage:
    """Usage normalised to OpenAI's convention (module docstring of ``anthropic_messages``)."""
    if not isinstance(raw, (dict, pydantic.BaseModel)):
        return base or Usage()
    # Counters as the server sent them (the SDK does not validate): clamped, never raised on.
    read = token_count(field(raw, "cache_read_input_tokens"))
    write = token_count(field(raw, "cache_creation_input_tokens"))
    fresh = field(raw, "input_tokens")
    prompt = (
        min(token_count(fresh) + read + write, MAX_TOKEN_COUNT)
        if fresh is not None
        else (base.prompt_tokens if base else 0)
    )
    return Usage(prompt, token_count(field(raw, "output_tokens")), read, write)


def read_event(event: Any, state: StreamState) -> Iterator[StreamItem]:
    """The items of one stream event, ``state`` updated; ``provider_error{reason: "malformed"}``
    when its shape cannot be read."""
    kind = field(as_object(event, "an event"), "type")
    try:
        yield from _read(kind, event, state)
    except MALFORMED as exc:  # a shape no reader here expected: still the server's fault
        raise malformed(f"{as_name(kind) or 'an'} event: {type(exc).__name__}") from None


def _read(kind: Any, event: Any, state: StreamState) -> Iterator[StreamItem]:
    if kind == "message_start":
        message = as_object(field(event, "message"), "message_start's message")
        state.started = True
        state.usage = usage_of(field(message, "usage"))
    elif kind == "content_block_start":
        block = as_object(field(event, "content_block"), "content_block_start's content_block")
        block_type = field(block, "type")
        if block_type == "tool_use":
            index = as_index(field(event, "index"))
            piece = ToolCallDelta(index, as_name(field(block, "id")), as_name(field(block, "name")), "")
            state.calls.add(piece)
            yield piece
        elif block_type == "text":
            text = as_text(field(block, "text"))
            if text:
                state.text.append(text)
                yield TextDelta(text)
    elif kind == "content_block_delta":
        delta = as_object(field(event, "delta"), "content_block_delta's delta")
        delta_type = field(delta, "type")
        if delta_type == "text_delta":
            text = as_text(field(delta, "text"))
            if text:
                state.text.append(text)
                yield TextDelta(text)
        elif delta_type == "input_json_delta":
            arguments = as_arguments(field(delta, "partial_json"))
            piece = ToolCallDelta(as_index(field(event, "index")), None, None, arguments)
            state.calls.add(piece)
            yield piece
    elif kind == "message_delta":
        delta = as_object(field(event, "delta"), "message_delta's delta")
        late = usage_of(field(event, "usage"), state.usage)  # output tokens are cumulative here
        usage = state.usage
        state.usage = Usage(
            late.prompt_tokens or usage.prompt_tokens,
            late.completion_tokens,
            late.cached_tokens or usage.cached_tokens,
            late.cache_write_tokens or usage.cache_write_tokens,
        )
        stop = stop_reason(field(delta, "stop_reason"))
        if stop:
            state.stop = stop
