"""Best-effort parsing of a JSON prefix, for streamed partial objects (SPEC G-5).

While the model streams an object, ``partial_json(prefix)`` returns the value the prefix describes
so far: an open string is closed, an unfinished key or literal is dropped back to the last complete
member, and open arrays/objects are closed. It returns None when nothing usable has arrived yet.
Only a preview: the final object is always parsed and validated in full.
"""

from __future__ import annotations

import json
from typing import Any

from kernel.call_args import depth_within

MAX_CUTS = 4
MAX_PREVIEW_DEPTH = 64  # as ``schema.MAX_ANSWER_DEPTH``: a deeper prefix gives no preview


def _scan(text: str) -> tuple[list[str], bool, list[int]]:
    """Open containers, whether a string is open, and cut points (after , { [ outside strings)."""
    stack: list[str] = []
    in_string = False
    escaped = False
    cuts: list[int] = []
    for i, ch in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
            continue
        if ch == '"':
            in_string = True
        elif ch in "{[":
            stack.append("}" if ch == "{" else "]")
            cuts.append(i + 1)
        elif ch in "}]":
            if stack:
                stack.pop()
        elif ch == ",":
            cuts.append(i)
    return stack, in_string, cuts


def _close(text: str) -> str:
    stack, in_string, _ = _scan(text)
    if in_string:
        if text.endswith("\\"):
            text = text[:-1]
        text += '"'
    body = text.rstrip()
    if body.endswith(","):
        body = body[:-1]
    return body + "".join(reversed(stack))


def partial_json(prefix: str) -> Any:
    starts = [i for i in (prefix.find("{"), prefix.find("[")) if i >= 0]
    if not starts:
        return None
    text = prefix[min(starts) :]
    try:
        return _preview(text)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than json.loads goes
        pass
    _, _, cuts = _scan(text)
    for cut in reversed(cuts[-MAX_CUTS:]):
        try:
            return _preview(text[:cut])
        except (ValueError, RecursionError):
            continue
    return None


def _preview(text: str) -> Any:
    value = json.loads(_close(text))
    # A preview deeper than a final answer may be (MAX_PREVIEW_DEPTH) is not shown.
    return value if depth_within(value, MAX_PREVIEW_DEPTH) else None
