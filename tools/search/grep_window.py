"""A file's matching lines with their context lines, gathered run by run (``grep_stream`` runs).

``grep.context_lines`` needs all of a file's lines at once; ``LineWindow`` gives the same ``Line``s
from one run of lines at a time: it keeps the last ``context`` lines of the runs seen so far (for the
lines before a match at the start of a run) and the after-context still owed into the next run.
Memory is bounded by the output too: a line is kept cut to ``KEEP_CHARS`` characters (enough for
``grep.cut_line`` to give the same text), and gathering stops once the lines kept would already
overflow the content budget — ``ContentCollector.add`` stops at or before that line anyway.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from tools.search.grep import MAX_LINE_BYTES, Line, cut_line

KEEP_CHARS = MAX_LINE_BYTES + 1
_KEEP_BYTES = 4 * (KEEP_CHARS + 1)  # holds KEEP_CHARS whole characters of a longer line


def shown_text(line: bytes | str) -> str:
    """The text ``context_lines`` gave for a line (no trailing CR), cut to ``KEEP_CHARS``: over
    ``MAX_LINE_BYTES`` bytes ``cut_line`` keeps a prefix either way, so the output is the same."""
    if isinstance(line, str):
        line = line[:-1] if line.endswith("\r") else line
        return line[:KEEP_CHARS]
    line = line[:-1] if line.endswith(b"\r") else line
    return line[:_KEEP_BYTES].decode("utf-8", "replace")[:KEEP_CHARS]


class LineWindow:
    """The ``Line``s (1-based numbers) a file shows with ``context`` lines around each match."""

    def __init__(self, context: int, path: str, budget: int) -> None:
        self.context = context
        self.lines: list[Line] = []
        self.full = False  # the lines kept already overflow the budget: the rest cannot show
        self._tail: deque[tuple[int, str]] = deque(maxlen=context)
        self._next = 0  # first line index not shown yet
        self._owed = -1  # last line index owed as after-context
        self._fixed = len(path.encode("utf-8", "surrogatepass")) + 3  # path, two separators, newline
        self._budget = budget
        self._cost = 0

    def feed(self, base: int, hay: Any, hits: list[int]) -> int:
        """Take one run (``hay``: whole lines, the first numbered ``base``, 0-based) and its matching
        lines (0-based, ascending); returns the run's number of lines."""
        nl: Any = "\n" if isinstance(hay, str) else b"\n"
        n: int = hay.count(nl) + (1 if hay and not hay.endswith(nl) else 0)
        end = base + n
        parts: list[Any] | None = None
        if hits or self._owed >= base:
            parts = hay.split(nl)[:n]
            before = dict(self._tail)
            hit_set = set(hits)
            c = self.context
            for lo, hi in [(base, self._owed), *((h - c, h + c) for h in hits)]:
                for j in range(max(lo, self._next, 0), min(hi, end - 1) + 1):
                    text = shown_text(parts[j - base]) if j >= base else before[j]
                    self._show(j, j in hit_set, text)
                    if self.full:
                        return n
                self._owed = max(self._owed, hi)
        if self.context and n:
            self._keep_tail(hay, nl, parts, end)
        return n

    def _show(self, j: int, is_match: bool, text: str) -> None:
        self.lines.append((j + 1, is_match, text))
        self._next = j + 1
        # What ContentCollector.add will count for this line, less any "--" separators.
        self._cost += self._fixed + len(str(j + 1)) + len(cut_line(text).encode("utf-8", "surrogatepass"))
        self.full = self._cost > self._budget

    def _keep_tail(self, hay: Any, nl: Any, parts: list[Any] | None, end: int) -> None:
        c = self.context
        if parts is None:
            body = hay[: -len(nl)] if hay.endswith(nl) else hay
            parts = body.rsplit(nl, c)
        last = parts[-c:]
        self._tail.extend((end - len(last) + i, shown_text(t)) for i, t in enumerate(last))
