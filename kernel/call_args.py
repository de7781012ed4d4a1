"""A call's arguments before validation and in events: nesting bounded (an iterative walk, so a
hostile or cyclic structure cannot exhaust the stack), integers bounded by Python's int-string limit,
arguments sent as JSON text parsed with a reason the caller can act on (``UnparsedArguments``
carries it to validation), and a bounded, redacted copy for ``tool_start`` (the tool's
``event_args`` redaction first, then at most 16 KiB of JSON)."""

from __future__ import annotations

import functools
import json
import re
import sys
from typing import Any

from kernel.errors import InvalidArgument
from kernel.spec import ToolSpec

MAX_EVENT_ARGS_BYTES = 16 * 1024
MAX_ARGS_DEPTH = 64  # JSON nesting of a call's arguments; deeper is invalid_argument before validation
MAX_ARGS_CONTAINERS = 1_000_000


class UnparsedArguments(str):
    """A model's argument text that is not a JSON value, with why: validation refuses it with that
    reason (events still show the text as the model sent it)."""

    why: str

    def __new__(cls, raw: str, why: str = "$: the arguments are not a JSON value") -> UnparsedArguments:
        self = super().__new__(cls, raw)
        self.why = why
        return self


_INT_DIGITS = re.compile(r"value has (\d+) digits")


def parse_json_arguments(raw: str) -> Any:
    """``raw`` (JSON text; empty means ``{}``) as a value, or ``InvalidArgument`` saying what is wrong.

    ``json.loads`` refuses an integer longer than Python's int-string limit (4300 digits) with a
    ``ValueError`` about ``sys.set_int_max_str_digits``: valid JSON, so it is named as what it is.
    """
    if not raw.strip():
        return {}
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InvalidArgument(f"$: the arguments are not valid JSON ({exc})") from None
    except ValueError as exc:  # only the int-string limit raises a bare ValueError
        raise InvalidArgument(f"$: {long_int_reason(exc)}") from None
    except RecursionError:
        raise InvalidArgument("$: the arguments are nested too deeply to parse") from None


def long_int_reason(exc: ValueError | None = None, where: str = "the arguments") -> str:
    """What ``json.loads``'s int-string-limit ``ValueError`` means, for whoever sent the JSON."""
    got = _INT_DIGITS.search(str(exc)) if exc is not None else None
    has = f" (one has {got.group(1)})" if got else ""
    return f"an integer in {where} is longer than {sys.get_int_max_str_digits()} digits{has}"


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
    """Before validation: text that did not parse says why; nesting and integers are bounded."""
    if isinstance(args, UnparsedArguments):
        raise InvalidArgument(args.why)
    if not depth_within(args, MAX_ARGS_DEPTH):
        raise InvalidArgument(
            f"$: arguments are nested more than {MAX_ARGS_DEPTH} levels deep (or hold too many objects)"
        )
    if _has_long_int(args):
        raise InvalidArgument(f"$: {long_int_reason()}")


@functools.lru_cache(maxsize=4)
def _int_bound(digits: int) -> int:
    bound: int = 10**digits
    return bound


def _has_long_int(value: Any) -> bool:
    """An integer a host passed that ``str()`` would refuse (a tool's message naming it would raise
    ``ValueError`` instead). Runs after ``depth_within``: the structure is bounded and acyclic."""
    limit = sys.get_int_max_str_digits()
    if not limit or (type(value) is dict and not value):
        return False
    bound = _int_bound(limit)
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
        elif type(item) is int and not -bound < item < bound:
            return True
    return False


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
