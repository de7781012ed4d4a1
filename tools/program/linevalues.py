"""How many JSON values a line from the QuickJS child would make, counted before it is parsed (SPEC K-6, K-8).

A line is at most 8 MiB, but what parsing it costs depends on what it holds: 8 MiB of ``{}`` or
``[]`` is 2.8 million containers — ~190 MB of Python objects and 0.25-0.6 s of ``json.loads``,
which holds the GIL (so a worker thread would not spare the event loop either). The host
therefore counts first and parses only lines of at most ``MAX_LINE_VALUES`` values: ~20 MB and
~50 ms at worst.

The count is the number of ``,`` ``:`` ``[`` ``{`` outside strings, plus one: every value and
every key but the first is preceded by one of them, so it is at least the number of values and
keys the parse would create. Lines of up to ``2 * MAX_LINE_VALUES`` bytes cannot hold more (each
value needs a separator or an opening bracket, and nesting is bounded by the parser's recursion
limit), so they skip the count. Longer ones are counted in a worker thread, by a Python loop over
the C ``count``/``find`` and ``json.decoder.scanstring`` that stops as soon as the cap is passed,
so the event loop keeps being served meanwhile.
"""

from __future__ import annotations

from json.decoder import scanstring

MAX_LINE_VALUES = 262_144
_SEPARATORS = (",", ":", "[", "{")


def needs_count(line: bytes) -> bool:
    """Whether ``line`` is long enough to hold more than ``MAX_LINE_VALUES`` values."""
    return len(line) > 2 * MAX_LINE_VALUES


def count_values(text: str, cap: int = MAX_LINE_VALUES) -> int:
    """An upper bound on the values (and keys) parsing ``text`` makes; stops counting past ``cap``."""
    count = 1 + sum(text.count(c) for c in _SEPARATORS)
    if count <= cap:
        return count  # separators inside strings only made it larger
    count, pos = 1, 0
    while count <= cap:
        quote = text.find('"', pos)
        end = len(text) if quote < 0 else quote
        count += sum(text.count(c, pos, end) for c in _SEPARATORS)
        if quote < 0:
            break
        try:
            _, pos = scanstring(text, quote + 1)
        except ValueError:
            break  # not JSON: json.loads says so, cheaply, past this point
    return count


def within_value_cap(line: bytes) -> str | None:
    """``line`` decoded as ``json.loads`` would, or None when it holds more than ``MAX_LINE_VALUES``
    values (a decoding error is raised: a ``ValueError``, as from ``json.loads``)."""
    text = line.decode("utf-8", "surrogatepass")
    return text if count_values(text) <= MAX_LINE_VALUES else None
