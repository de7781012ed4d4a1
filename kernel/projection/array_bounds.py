"""Where the first and the last items of a valid top-level JSON array end and start (sampling, R-3).

``kernel.projection.sample`` validates and counts a big array of objects in one msgspec pass that
keeps nothing per item (an empty ``Struct`` each), then needs only the bytes of the head and tail
items it retains. These scanners find them without parsing the rest: forward from the opening
``[`` for the head, backward from the closing ``]`` for the tail, walking structural characters at
C speed (``re``) and skipping whole strings.

Backward scanning is sound only for a document already known valid: there, a ``"`` inside a string
is always escaped (an odd run of backslashes before it) and no backslash appears outside strings,
so the unescaped quotes after any offset tell whether it lies inside a string. Every scan is
bounded (``MAX_TOKENS``); ``None`` means "not found cheaply" and the caller takes its general path.
"""

from __future__ import annotations

import re
from itertools import islice

# A whole string (unrolled: no per-character alternation) or one structural character.
_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{},]', re.DOTALL)
_QUOTE = re.compile(rb'"')
_OPEN = frozenset(b"[{")
_CLOSE = frozenset(b"]}")
_COMMA = 0x2C
_STRING = 0x22
MAX_TOKENS = 1 << 13  # structural characters and strings walked per scan, at most
MAX_ESCAPE_RUN = 16  # backslashes counted before one quote, at most
_FIRST_WINDOW = 4096
_MAX_WINDOW = 1 << 22


def head_end(data: bytes, start: int, count: int) -> int | None:
    """Offset of the top-level comma after the first ``count`` items of the array whose ``[`` is at
    ``start``; ``None`` when the array has no more than ``count`` items or the scan would be long."""
    depth = 0
    seen = 0
    for n, match in enumerate(_TOKEN.finditer(data, start)):
        if n >= MAX_TOKENS:
            return None
        char = data[match.start()]
        if char == _STRING:
            continue
        if char in _OPEN:
            depth += 1
        elif char in _CLOSE:
            depth -= 1
            if depth == 0:
                return None
        elif depth == 1:  # a comma between two top-level items
            seen += 1
            if seen == count:
                return match.start()
    return None


def tail_start(data: bytes, end: int, count: int) -> int | None:
    """Offset just past the top-level comma before the last ``count`` items of the array whose ``]``
    is at ``end``; ``None`` when the array has no more than ``count`` items or the scan would be long."""
    window = _FIRST_WINDOW
    while True:
        low = max(0, end - window)
        found = [m.start() for m in islice(_QUOTE.finditer(data, low, end), MAX_TOKENS + 1)]
        if len(found) > MAX_TOKENS:
            return None
        escapes = [_escaped(data, pos) for pos in found]
        if None in escapes:  # a run of backslashes too long to count cheaply
            return None
        quotes = [pos for pos, escaped in zip(found, escapes, strict=True) if not escaped]
        # The document is valid and ``end`` lies outside any string: an odd number of unescaped quotes
        # after ``low`` means ``low`` is inside one, which the first of them closes.
        begin = quotes[0] + 1 if len(quotes) % 2 else low
        tokens = [m.start() for m in islice(_TOKEN.finditer(data, begin, end + 1), MAX_TOKENS + 1)]
        if len(tokens) > MAX_TOKENS:
            return None
        depth = 0
        seen = 0
        for pos in reversed(tokens):
            char = data[pos]
            if char == _STRING:
                continue
            if char in _CLOSE:
                depth += 1
            elif char in _OPEN:
                depth -= 1
                if depth == 0:
                    return None
            elif depth == 1:
                seen += 1
                if seen == count:
                    return pos + 1
        if low == 0 or window >= _MAX_WINDOW:
            return None
        window *= 8


def _escaped(data: bytes, pos: int) -> bool | None:
    """An odd run of backslashes right before ``pos``; ``None`` past ``MAX_ESCAPE_RUN`` of them."""
    run = 0
    while pos - run - 1 >= 0 and data[pos - run - 1] == 0x5C:
        run += 1
        if run > MAX_ESCAPE_RUN:
            return None
    return run % 2 == 1
