"""Diagnostics for text that was expected but not found (``edit`` misses, ``patch`` context mismatches).

A model that misses usually copied almost the right text: a tab where the file has spaces, a
regular space where the file has a non-breaking space (U+00A0), LF where the file has CRLF, curly
quotes. So a miss is explained by (1) the closest region of the file, (2) the first differing
character on each side *named by its code point*, and (3) an explicit sentence when the
difference is one of those usual culprits. All work is bounded (``MAX_SCAN_LINES``,
``MAX_SCAN_CHARS``, ``MAX_SHOWN_LINES``) so a huge file cannot make a failure slow or long.

``SequenceMatcher`` is quadratic (cubic in the worst case) in its inputs, and the model controls
both the needle and the file: every comparison one diagnostic makes draws on one budget of
``MAX_COMPARE_STEPS`` inner-loop steps, charged *before* each step is taken (``_Matcher``). When
it runs out, the search keeps the best place found so far (the similarity may go uncomputed), a
sentence says the search stopped, and the error still returns at once.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from difflib import Match, SequenceMatcher

from tools._filetext import split_keepends

MAX_SCAN_LINES = 20_000
MAX_SCAN_CHARS = 4 * 1024 * 1024
MAX_SHOWN_LINES = 6
MAX_SHOWN_LINE_CHARS = 200
REFINE_RADIUS = 3
MIN_SHOWN_SIMILARITY = 0.5  # below this a 'closest match' is noise, not help
MAX_COMPARE_STEPS = 2_000_000  # SequenceMatcher inner-loop steps per diagnostic (~0.2 s)

_CONTROL_NAMES = {
    "\t": "CHARACTER TABULATION (tab)",
    "\n": "LINE FEED (LF)",
    "\r": "CARRIAGE RETURN (CR)",
    "\x0b": "LINE TABULATION",
    "\x0c": "FORM FEED",
    "\x00": "NULL",
}
_QUOTES = {"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"'}
_SPACES_LIKE = {"\u00a0", "\u2007", "\u202f", "\u200b", "\ufeff", "\u3000", "\u2009"}


def describe_char(ch: str | None) -> str:
    """``U+00A0 NO-BREAK SPACE``; ``end of text`` for None."""
    if ch is None:
        return "end of text"
    name = _CONTROL_NAMES.get(ch) or unicodedata.name(ch, "UNNAMED CHARACTER")
    return f"U+{ord(ch):04X} {name}"


def culprit_hint(wanted: str | None, found: str | None, label: str = "old_string") -> str | None:
    """One sentence naming the usual culprit when (wanted, found) is one of them."""
    pair = {wanted, found}
    if "\r" in pair and ("\n" in pair or None in pair):
        side = "the file" if found == "\r" else label
        return (
            f"Line endings differ: {side} has CRLF (\\r\\n) here and the other side LF. "
            "Use the file's line endings (or plain \\n in a file that is CRLF throughout)."
        )
    if pair == {"\t", " "}:
        return (
            f"Tabs vs spaces: the file has a tab where {label} has a space"
            if found == "\t"
            else f"Tabs vs spaces: the file has a space where {label} has a tab"
        ) + " (check the indentation)."
    for ch in pair:
        if ch in _SPACES_LIKE:
            where = "the file" if found == ch else label
            kind = "a non-breaking space" if ch == "\u00a0" else "an invisible or unusual space"
            return (
                f"Invisible character: {where} has {kind} ({describe_char(ch)}) where the other side has "
                f"{describe_char(found if where == label else wanted)}; a plain space will not match it."
            )
    if pair & set(_QUOTES):
        return "Quote style differs: one side has typographic (curly) quotes, the other ASCII quotes."
    return None


def first_difference(wanted: str, found: str) -> int:
    """Index of the first differing character (``len`` of the shorter one when one is a prefix)."""
    n = min(len(wanted), len(found))
    for i in range(n):
        if wanted[i] != found[i]:
            return i
    return n


def describe_difference(
    wanted: str, found: str, *, wanted_label: str = "expected", label: str = "the hunk"
) -> str:
    """``first difference at column C: expected U+0020 SPACE, found U+00A0 NO-BREAK SPACE. <hint>``."""
    i = first_difference(wanted, found)
    w = wanted[i] if i < len(wanted) else None
    f = found[i] if i < len(found) else None
    text = (
        f"first difference at column {i + 1}: {wanted_label} {describe_char(w)}, file has {describe_char(f)}."
    )
    hint = culprit_hint(w, f, label)
    return f"{text} {hint}" if hint else text


# Whole-text probes: if old_string matches once this difference is erased, we know the culprit.
_PROBES: list[tuple[str, Callable[[str], str]]] = [
    ("line endings (CRLF vs LF)", lambda s: s.replace("\r\n", "\n")),
    ("non-breaking or other invisible spaces", lambda s: re.sub("[\u00a0\u2007\u202f\u2009\u3000]", " ", s)),
    ("tabs vs spaces (indentation)", lambda s: re.sub(r"[ \t]+", " ", s)),
    ("trailing whitespace", lambda s: re.sub(r"[ \t]+(?=\r?\n|$)", "", s)),
    ("typographic quotes", lambda s: s.translate(str.maketrans(_QUOTES))),
]


class _OutOfSteps(Exception):
    pass


class _Budget:
    def __init__(self, steps: int) -> None:
        self.left = steps
        self.exhausted = False

    def charge(self, steps: int) -> None:
        if steps > self.left:
            self.exhausted = True
            raise _OutOfSteps
        self.left -= steps


class _Matcher(SequenceMatcher):
    """A ``SequenceMatcher`` (no junk heuristic) whose super-linear work is paid from a ``_Budget``.

    ``find_longest_match`` visits, for each ``a[i]`` in range, every position of that element in
    ``b``: that count is known up front from ``b2j``, so it is charged before the call runs. The
    linear parts (building ``b2j``, ``quick_ratio``) are bounded by ``MAX_SCAN_CHARS`` already.
    """

    def __init__(self, budget: _Budget, a: str = "", b: str = "") -> None:
        self._budget = budget
        super().__init__(None, a, b, autojunk=False)

    def find_longest_match(
        self, alo: int = 0, ahi: int | None = None, blo: int = 0, bhi: int | None = None
    ) -> Match:
        ahi = len(self.a) if ahi is None else ahi
        b2j = self.b2j
        self._budget.charge(ahi - alo)
        self._budget.charge(sum(len(b2j.get(ch, ())) for ch in self.a[alo:ahi]))
        return super().find_longest_match(alo, ahi, blo, bhi)


def explain_miss(
    needle: str, haystack: str, *, whole_lines: bool = False, needle_label: str = "old_string"
) -> str:
    """The text appended to ``old_string not found in P`` (may be empty for an empty file).

    ``whole_lines``: the needle is a block of complete lines (a patch hunk), so the probes must
    match at line boundaries, not as a substring of a longer line.
    """
    if not haystack:
        return "The file is empty."
    if len(haystack) > MAX_SCAN_CHARS:
        return f"(The file is larger than {MAX_SCAN_CHARS} characters; no closest-match search was run.)"
    lines: list[str] = []
    probe_line: int | None = None
    lead = "\n" if whole_lines else ""
    for label, fn in _PROBES:
        n, h = fn(lead + needle), fn(lead + haystack)
        idx = h.find(n) if n else -1
        if idx >= 0:
            lines.append(f"It would match if {label} were ignored.")
            probe_line = h.count("\n", 0, idx + len(lead)) - len(lead)
            break
    budget = _Budget(MAX_COMPARE_STEPS)
    hay_lines = split_keepends(haystack)
    needle_lines = split_keepends(needle) or [needle]
    start, ratio = (
        (probe_line, None) if probe_line is not None else _closest_start(hay_lines, needle_lines, budget)
    )
    end = min(len(hay_lines), start + len(needle_lines))
    window = "".join(hay_lines[start:end])
    offset = 0 if whole_lines else _align(needle_lines[0], hay_lines[start], budget)
    if offset or ratio is None:
        ratio = _ratio(budget, needle, window[offset:])
    if ratio is not None and ratio < MIN_SHOWN_SIMILARITY and probe_line is None:
        lines.append(
            f"No similar text in the file (best similarity {ratio:.2f}, lines {start + 1}-{end}); re-read it."
        )
        return "\n".join(lines)
    similarity = f"similarity {ratio:.2f}" if ratio is not None else "similarity not computed"
    lines.append(f"Closest match: lines {start + 1}-{end} ({similarity}):")
    for k in range(start, min(end, start + MAX_SHOWN_LINES)):
        shown = hay_lines[k].rstrip("\r\n")
        if len(shown) > MAX_SHOWN_LINE_CHARS:
            shown = shown[:MAX_SHOWN_LINE_CHARS] + "…"
        lines.append(f"  {k + 1:>6}: {shown}")
    if end - start > MAX_SHOWN_LINES:
        lines.append(f"  ... ({end - start - MAX_SHOWN_LINES} more lines)")
    i = first_difference(needle, window[offset:])
    w = needle[i] if i < len(needle) else None
    f = window[offset + i] if offset + i < len(window) else None
    pos = offset + i
    line_no = start + window.count("\n", 0, pos) + 1
    col = pos - (window.rfind("\n", 0, pos) + 1) + 1
    lines.append(
        f"First difference at line {line_no}, column {col}: {needle_label} has {describe_char(w)}, "
        f"the file has {describe_char(f)}."
    )
    hint = culprit_hint(w, f, needle_label)
    if hint:
        lines.append(hint)
    if budget.exhausted:
        lines.append(
            f"(The closest-match search stopped after {MAX_COMPARE_STEPS:,} comparison steps, its budget; "
            "the place shown is the best found by then.)"
        )
    return "\n".join(lines)


def _ratio(budget: _Budget, a: str, b: str) -> float | None:
    """``SequenceMatcher.ratio`` paid from ``budget``; None once the budget is spent."""
    try:
        return _Matcher(budget, a, b).ratio()
    except _OutOfSteps:
        return None


def _norm(line: str) -> str:
    return " ".join(line.replace("\u00a0", " ").split())


def _closest_start(
    hay_lines: list[str], needle_lines: list[str], budget: _Budget
) -> tuple[int, float | None]:
    """Start line of the window most like the needle, and its ratio when it was computed: anchor
    on the needle's longest line, then refine around it. The budget running out stops the search
    where it is, keeping the best place found so far."""
    n = len(needle_lines)
    anchor_idx = max(range(n), key=lambda i: len(needle_lines[i].strip()))
    sm = _Matcher(budget)
    sm.set_seq2(_norm(needle_lines[anchor_idx]))
    best_ratio, best_i = -1.0, 0
    try:
        for i, line in enumerate(hay_lines[:MAX_SCAN_LINES]):
            sm.set_seq1(_norm(line))
            if sm.real_quick_ratio() <= best_ratio or sm.quick_ratio() <= best_ratio:
                continue
            r = sm.ratio()
            if r > best_ratio:
                best_ratio, best_i = r, i
    except _OutOfSteps:
        pass
    last_start = max(0, len(hay_lines) - n)
    guess = min(max(0, best_i - anchor_idx), last_start)
    needle = "".join(needle_lines)
    # The guess first (the likeliest, so a spent budget still has its ratio), then its neighbours;
    # ties go to the earliest start.
    best: tuple[float, int] | None = None
    near = range(max(0, guess - REFINE_RADIUS), min(last_start, guess + REFINE_RADIUS) + 1)
    for s in sorted(near, key=lambda s: s != guess):
        r = _ratio(budget, needle, "".join(hay_lines[s : s + n]))
        if r is None:
            break
        if best is None or (r, -s) > (best[0], -best[1]):
            best = (r, s)
    return (best[1], best[0]) if best is not None else (guess, None)


def _align(needle_first: str, hay_line: str, budget: _Budget) -> int:
    """Where in the file's line the needle's first line begins (old_string may start mid-line)."""
    head = needle_first.rstrip("\r\n")
    if not head:
        return 0
    idx = hay_line.find(head)
    if idx >= 0:
        return idx
    try:
        m = _Matcher(budget, head, hay_line).find_longest_match(0, len(head), 0, len(hay_line))
    except _OutOfSteps:
        return 0
    return max(0, m.b - m.a) if m.size else 0
