"""What parsing a line from the QuickJS child would cost, bounded before it is parsed (SPEC K-6, K-8).

A line is at most 8 MiB, but what ``json.loads`` costs depends on what it holds, and it holds the
GIL throughout (a worker thread would not spare the event loop). 8 MiB of ``[]`` is 2.8 million
lists: ~180 MB and ~0.2 s. A million short numbers or strings is ~40-65 MB and 40-90 ms; a number
with a fraction or an exponent takes ``json.loads`` 3-10 times an integer's time. So the host
weighs the characters that make work outside strings and parses only lines of at most
``MAX_LINE_COST`` units (~100 ms and ~65 MB at worst on the 2-core development machine):

- ``,`` ``:`` — 1: each value and key but the first follows one (~40-90 ns, 30-65 bytes each);
- ``[`` ``{`` — 4: a list or dict is 56-72 bytes empty, ~200 bytes with a few items, and every
  later walk of the value (surrogate repair, rendering) visits it;
- ``.`` — 2 and an exponent (``e``/``E`` before a sign or digit) — 4: ``json.loads`` parses
  ``1.5`` in ~185 ns, a JavaScript double in ~315 ns, ``1e+299`` in ~490 ns,
  ``2.2250738585072014e-308`` in ~680 ns, an integer in 40-90 ns.

Every weighted character of valid JSON comes with at least as many bytes as half its weight (a
container's brackets, ``1e1,``), so a line of up to ``MAX_LINE_COST / 2`` bytes cannot cost more and
skips the count. Longer ones are counted in a worker thread: the whole line first (an upper bound:
characters inside strings only add), then, when that is over the cap, outside strings only, by a
Python loop over ``str.find`` and ``json.decoder.scanstring`` that stops soon after the cap is passed,
so the event loop keeps being served meanwhile.
"""

from __future__ import annotations

import re
from json.decoder import scanstring

MAX_LINE_COST = 1_048_576
_FLUSH = 1024  # strings skipped between two counts of the text between them
# What each character outside strings costs (the module docstring); an exponent (4) is an ``e`` or
# ``E`` before a sign or a digit, never the ``e`` of ``true``/``false``.
_WEIGHTS = (((",", ":"), 1), (("[", "{"), 4), ((".",), 2))
_EXPONENT = re.compile(r"[eE][-+0-9]")
_SLICE = 256 * 1024


def needs_count(line: bytes) -> bool:
    """Whether ``line`` is long enough to cost more than ``MAX_LINE_COST``."""
    return len(line) > MAX_LINE_COST // 2


def _cost(text: str, cap: int) -> int:
    """The weight of ``text``'s characters, summed in that order; stops once past ``cap``."""
    total = 0
    for chars, weight in _WEIGHTS:
        total += weight * sum(text.count(c) for c in chars)
        if total > cap:
            return total
    # Exponents, by slices (a match needs two characters: none is counted twice or lost): a regex
    # holds the GIL for its whole search, ~7 ns a byte, so one over 8 MiB would stall the loop.
    ends = range(_SLICE, len(text) + _SLICE, _SLICE)
    return total + 4 * sum(len(_EXPONENT.findall(text, end - _SLICE, end + 1)) for end in ends)


def line_cost(text: str, cap: int = MAX_LINE_COST) -> int:
    """An upper bound on the cost of parsing ``text`` (units above); stops counting soon past ``cap``."""
    cost = 1 + _cost(text, cap)
    if cost <= cap:
        return cost  # characters inside strings only made it larger
    cost, pos, outside = 1, 0, []
    while cost <= cap:
        quote = text.find('"', pos)
        end = len(text) if quote < 0 else quote
        outside.append(text[pos:end])
        if quote >= 0:
            try:
                _, pos = scanstring(text, quote + 1)
            except ValueError:
                quote = -1  # not JSON: json.loads says so, cheaply, past this point
        if quote < 0 or len(outside) >= _FLUSH:
            cost += _cost(" ".join(outside), cap)  # the space: no "e1" forms across two strings
            outside.clear()
        if quote < 0:
            break
    return cost


def within_cost_cap(line: bytes) -> str | None:
    """``line`` decoded as ``json.loads`` would, or None when parsing it costs more than
    ``MAX_LINE_COST`` (a decoding error is raised: a ``ValueError``, as from ``json.loads``)."""
    text = line.decode("utf-8", "surrogatepass")
    return text if line_cost(text) <= MAX_LINE_COST else None
