"""Values of a model server's answer as the types the conversation holds (SPEC A-2, A-3).

The SDKs build their response objects without validating them, so a field holds whatever JSON the
server sent. OpenAI-compatible servers differ: some send a message's ``content`` as a list of parts
(``[{"type": "text", "text": "hi"}]``), some a tool call's ``arguments`` as a JSON object instead of
its text. Handed on as they came, the first ended a run ``success`` with its text lost (the list
became the result's ``text``), the second ended the run ``internal_error`` (``'dict' object has no
attribute 'strip'``). Here every such value becomes the string the rest of the code expects.

A value whose *shape* is wrong — a list or a number where an object belongs (``"delta": [1]``,
``"choices": 5``), or data that is not JSON — used to raise AttributeError/TypeError/ValueError out
of the provider (the run ended ``internal_error``). ``field`` reads SDK objects and dicts alike,
``as_object``/``as_list`` check a shape, and what cannot be read is
``provider_error{status: 200, reason: "malformed"}`` (``errors.malformed``).
"""

from __future__ import annotations

import json
from typing import Any

import pydantic

from flows.providers.errors import malformed

# What reading a malformed answer may raise: the SDK's json.loads (ValueError, RecursionError) and,
# as a last guard, a field of a type no reader expected.
MALFORMED = (TypeError, AttributeError, KeyError, IndexError, ValueError, RecursionError)


def field(value: Any, name: str) -> Any:
    """``value.name`` of an SDK object or ``value[name]`` of a dict; None for anything else."""
    if isinstance(value, dict):
        return value.get(name)
    if isinstance(value, pydantic.BaseModel):
        return getattr(value, name, None)
    return None


def as_object(value: Any, what: str) -> Any:
    """``value`` when it is an object (an SDK object or a dict); ``malformed`` otherwise."""
    if not isinstance(value, (dict, pydantic.BaseModel)):
        raise malformed(f"{what} is {type(value).__name__}, not an object")
    return value


def as_list(value: Any, what: str) -> list[Any]:
    """``value`` when it is a list, ``[]`` for null/absent; ``malformed`` otherwise."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise malformed(f"{what} is {type(value).__name__}, not a list")
    return value


def as_text(value: Any) -> str:
    """Message text: a string as is; a list of parts as the concatenation of their text."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(
            part if isinstance(part, str) else as_text(part.get("text")) if isinstance(part, dict) else ""
            for part in value
        )
    return ""


def as_arguments(value: Any) -> str:
    """A tool call's argument text: a string as is; a JSON value the server sent unquoted, as JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return ""


def as_name(value: Any) -> str:
    """An id or a tool name: a string as is, a number as its digits, anything else empty."""
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return ""


def as_index(value: Any) -> int:
    """A streamed tool call's ``index``: an int as is, anything else 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
