"""OpenAI-compatible answers read with the types the conversation holds (SPEC A-2, A-3).

The SDK hands on what the server sent without validating it, and a blocking body is parsed here
(``openai_chat``), so every field is read through ``flows.providers.wire_values``: text, argument
text, names, indexes and finish reasons become the strings and ints the rest expects. A shape that
cannot be read — a chunk, a choice, a ``delta``/``message``, a tool call or its ``function`` that is
not an object; ``choices`` or ``tool_calls`` that are not a list — used to raise AttributeError/
TypeError out of the provider (``"delta": [1]``, ``"choices": 5``); it is now
``provider_error{status: 200, reason: "malformed"}``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from flows.providers.errors import malformed
from flows.providers.merge import StreamState
from flows.providers.types import (
    Completion,
    Message,
    StreamItem,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    Usage,
    token_count,
)
from flows.providers.wire_values import (
    MALFORMED,
    as_arguments,
    as_index,
    as_list,
    as_name,
    as_object,
    as_text,
    field,
)


def usage_of(raw: Any) -> Usage:
    """The usage counters as the server sent them (unvalidated): clamped, never raised on."""
    cached = token_count(field(field(raw, "prompt_tokens_details"), "cached_tokens"))
    return Usage(
        token_count(field(raw, "prompt_tokens")), token_count(field(raw, "completion_tokens")), cached
    )


def completion_of(response: Any) -> Completion:
    """A blocking answer (parsed JSON) as a ``Completion``."""
    try:
        return _completion(as_object(response, "the answer"))
    except MALFORMED as exc:  # a shape no reader here expected: still the server's fault
        raise malformed(f"the answer: {type(exc).__name__}") from None


def _completion(response: Any) -> Completion:
    choices = as_list(field(response, "choices"), "choices")
    choice = as_object(choices[0], "a choice") if choices else None
    msg = field(choice, "message")
    if msg is not None:
        as_object(msg, "a choice's message")
    calls = []
    for i, call in enumerate(as_list(field(msg, "tool_calls"), "tool_calls")):
        fn = field(as_object(call, "a tool call"), "function")
        if fn is None:
            continue
        as_object(fn, "a tool call's function")
        name, arguments = as_name(field(fn, "name")), as_arguments(field(fn, "arguments"))
        calls.append(ToolCall(as_name(field(call, "id")) or f"call_{i}", name, arguments))
    stop = as_name(field(choice, "finish_reason")) or ("tool_calls" if calls else "stop")
    return Completion(
        Message("assistant", as_text(field(msg, "content")), tuple(calls)),
        usage_of(field(response, "usage")),
        stop,
    )


def read_chunk(chunk: Any, state: StreamState) -> Iterator[StreamItem]:
    """The items of one streamed chunk, ``state`` updated; ``malformed`` when its shape cannot be read."""
    as_object(chunk, "a chunk")
    try:
        yield from _read(chunk, state)
    except MALFORMED as exc:  # a shape no reader here expected: still the server's fault
        raise malformed(f"a chunk: {type(exc).__name__}") from None


def _read(chunk: Any, state: StreamState) -> Iterator[StreamItem]:
    usage = field(chunk, "usage")
    if usage is not None:
        state.usage = usage_of(usage)
    for choice in as_list(field(chunk, "choices"), "choices"):
        delta = field(as_object(choice, "a choice"), "delta")
        if delta is not None:
            as_object(delta, "a choice's delta")
            content = as_text(field(delta, "content"))
            if content:
                state.text.append(content)
                yield TextDelta(content)
            for call in as_list(field(delta, "tool_calls"), "tool_calls"):
                fn = field(as_object(call, "a tool call"), "function")
                if fn is not None:
                    as_object(fn, "a tool call's function")
                piece = ToolCallDelta(
                    as_index(field(call, "index")),
                    as_name(field(call, "id")),
                    as_name(field(fn, "name")) if fn is not None else None,
                    as_arguments(field(fn, "arguments")),
                )
                state.calls.add(piece)
                yield piece
        stop = as_name(field(choice, "finish_reason"))
        if stop:
            state.stop = stop
