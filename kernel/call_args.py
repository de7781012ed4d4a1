"""A call's arguments before validation and in events: nesting bounded (an iterative walk, so a
hostile or cyclic structure cannot exhaust the stack) and a bounded, redacted copy for
``tool_start`` (the tool's ``event_args`` redaction first, then at most 16 KiB of JSON)."""

from __future__ import annotations

import json
from typing import Any

from kernel.errors import InvalidArgument
from kernel.spec import ToolSpec

MAX_EVENT_ARGS_BYTES = 16 * 1024
MAX_ARGS_DEPTH = 64  # JSON nesting of a call's arguments; deeper is invalid_argument before validation
MAX_ARGS_CONTAINERS = 1_000_000


def depth_within(value: Any, limit: int) -> bool:
    """True when JSON-like ``value`` nests at most ``limit`` containers deep (iterative: no recursion).

    A cycle (only a host can build one) is too deep; more than ``MAX_ARGS_CONTAINERS`` containers
    (shared ones counted each time) is refused the same way.
    """
    stack: list[tuple[Any, int]] = [(value, 0)]
    budget = MAX_ARGS_CONTAINERS
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        budget -= 1
        if depth >= limit or budget < 0:
            return False
        stack.extend((child, depth + 1) for child in children)
    return True


def check_depth(args: Any) -> None:
    if not depth_within(args, MAX_ARGS_DEPTH):
        raise InvalidArgument(
            f"$: arguments are nested more than {MAX_ARGS_DEPTH} levels deep (or hold too many objects)"
        )


def event_args(spec: ToolSpec | None, args: Any) -> Any:
    """The arguments as events show them: the tool's ``event_args`` redaction, then bounded."""
    if spec is not None and spec.event_args is not None:
        try:
            args = spec.event_args(args)
        except Exception:  # a redaction that fails must not leak the original
            args = {"redacted": True}
    return bounded_args(args)


def bounded_args(args: Any) -> Any:
    if type(args) is dict and not args:
        return args  # {}: nothing to bound (the common no-argument call skips a json.dumps)
    if not depth_within(args, MAX_ARGS_DEPTH):
        return {"unserializable": True, "reason": "nested too deeply"}
    try:
        text = json.dumps(args, default=str)
    except (TypeError, ValueError, RecursionError):
        return {"unserializable": True}
    if len(text) <= MAX_EVENT_ARGS_BYTES:
        return args
    return {"truncated": True, "bytes": len(text), "preview": text[:1024]}
