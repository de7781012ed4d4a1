"""A returned value as text for a tool's output: indented JSON, built off the event loop, bounded (SPEC K-6).

``json.dumps(indent=2)`` runs the json module's pure-Python encoder (the C one does not indent):
1 MiB of tiny values (``[[0], [0], …]``) took ~0.8 s and grew to ~6 MB of text, on the session's
event loop. ``pretty_json`` builds the text in a worker thread and stops as soon as it passes
``max_bytes`` (``None`` then: the caller shows compact JSON or refuses), so the work is bounded by
the output it may keep, and other calls of the process keep being served meanwhile.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any


def pretty_or_none(value: Any, max_bytes: int, default: Callable[[Any], Any] | None = None) -> str | None:
    """``value`` as indented JSON (``ensure_ascii=False``), or None when longer than ``max_bytes``
    (UTF-8) or not encodable (too deep a nesting for the encoder included)."""
    parts: list[str] = []
    chars = 0
    try:
        for chunk in json.JSONEncoder(indent=2, ensure_ascii=False, default=default).iterencode(value):
            chars += len(chunk)
            if chars > max_bytes:  # a character is at least one byte: over already
                return None
            parts.append(chunk)
    except (RecursionError, TypeError, ValueError):
        return None
    text = "".join(parts)
    return text if len(text.encode("utf-8", "surrogatepass")) <= max_bytes else None


def compact(value: Any, default: Callable[[Any], Any] | None = None) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=default)


async def pretty_json(value: Any, max_bytes: int, default: Callable[[Any], Any] | None = None) -> str | None:
    """``pretty_or_none`` in a worker thread."""
    return await asyncio.to_thread(pretty_or_none, value, max_bytes, default)


async def pretty_or_compact(value: Any, max_bytes: int, default: Callable[[Any], Any] | None = None) -> str:
    """Indented JSON when it fits in ``max_bytes``, else compact JSON (both built off the loop)."""

    def render() -> str:
        pretty = pretty_or_none(value, max_bytes, default)
        return pretty if pretty is not None else compact(value, default)

    return await asyncio.to_thread(render)
