"""Character paging of fetched content (SPEC B-1, W-6; REFERENCE 4.9).

Offsets and lengths count Unicode code points (never bytes), so a page can never cut a UTF-8
sequence; a page boundary is also moved back so it does not split a base character from its
combining marks, a ZWJ emoji sequence, a variation selector or a CRLF. ``max_chars`` above
``MAX_CHARS`` is clamped (``limit_clamped``); an offset past the end is an error, an offset exactly
at the end is an empty, successful last page.
"""

from __future__ import annotations

import unicodedata
from typing import Any

from kernel.errors import InvalidArgument

MAX_CHARS = 100_000
DEFAULT_MAX_CHARS = 50_000
_JOINERS = {"\u200d", "\ufe0e", "\ufe0f"}


def _splits_cluster(text: str, i: int) -> bool:
    """Would a cut before ``text[i]`` split a character cluster?"""
    ch = text[i]
    if unicodedata.combining(ch) or ch in _JOINERS or unicodedata.category(ch) == "Me":
        return True
    if text[i - 1] == "\u200d":
        return True
    if 0x1F3FB <= ord(ch) <= 0x1F3FF:  # skin-tone modifiers belong to the emoji before them
        return True
    return text[i - 1] == "\r" and ch == "\n"


def page(content: str, offset: int, requested: int) -> tuple[str, dict[str, Any]]:
    """``(text with continuation footer, range metadata)`` for one page."""
    total = len(content)
    if offset > total:
        raise InvalidArgument(f"offset {offset} exceeds the fetched content ({total} characters)")
    applied = min(requested, MAX_CHARS)
    end = min(total, offset + applied)
    while offset < end < total and end - offset > 1 and _splits_cluster(content, end):
        end -= 1
    eof = end >= total
    text = content[offset:end]
    if not eof:
        text += f"\n\n... (more fetched content available; continue with offset={end})"
    meta = {
        "offset": offset,
        "requested_max_chars": requested,
        "applied_max_chars": applied,
        "returned_chars": end - offset,
        "total_chars": total,
        "next_offset": None if eof else end,
        "eof": eof,
        "limit_clamped": applied != requested,
    }
    return text, meta
