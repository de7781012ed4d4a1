"""The pure-Python grep engine's regex: RE2 (linear time), spelled from the dialect's Rust form.

``compile_linear(dialect, case_sensitive)`` returns a compiled ``re2`` pattern over UTF-8 *bytes*
(searching ``bytes`` avoids the wrapper re-encoding a ``str`` per call), or None when RE2 cannot
read the pattern exactly; the engine then falls back to Python ``re``. Why RE2: a pattern such as
``(a+)+$`` backtracks exponentially in ``re`` and no thread can be stopped mid-match, so a
``git:`` workspace scan could run far past its deadline; RE2 and Rust's regex (ripgrep) both run
in time linear in the input, and share the dialect's syntax (``\\x{..}``, ``[[:alpha:]]``,
``(?P<n>..)``, ``(?i)``/``(?m)``/``(?s)``, escaped punctuation).

Where RE2 and Rust differ, the spelling is rewritten: ``\\w``, ``\\d``, ``\\s`` (and ``\\W``, ``\\D``,
``\\S`` outside classes) are ASCII in RE2 but Unicode in Rust, so they become Unicode property
classes. Fallbacks to ``re`` (documented, rare): ``\\W``/``\\S`` inside a class, a repetition above
RE2's 1000, a pattern beyond RE2's memory budget. (A ``\\W``/``\\S`` in a class that is not negated is
spelled as an alternation, ``[a\\W]`` → ``(?:[a]|[^word])``.) Known residual difference: ``\\b``/``\\B`` are
ASCII word boundaries in RE2 (Unicode in Rust).
"""

from __future__ import annotations

from typing import Any

_WORD = r"\p{L}\p{Nl}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}"  # Rust \w: Alphabetic, M, Nd, Pc, Join_Control
_SPACE = r"\t\n\x{B}\f\r\x{85}\p{Z}"  # Rust \s: Unicode White_Space
_OUTSIDE = {
    "w": f"[{_WORD}]",
    "W": f"[^{_WORD}]",
    "d": r"\p{Nd}",
    "D": r"\P{Nd}",
    "s": f"[{_SPACE}]",
    "S": f"[^{_SPACE}]",
}
_INSIDE = {"w": _WORD, "d": r"\p{Nd}", "D": r"\P{Nd}", "s": _SPACE}


class _NoExactSpelling(Exception):
    pass


def re2_spelling(rust: str) -> str:
    """The dialect's Rust spelling with Rust's Unicode classes spelled for RE2."""
    out: list[str] = []
    i, n = 0, len(rust)
    in_class = False
    class_start = 0
    class_out = 0  # index in ``out`` of the open class's '['
    negated = False
    extras: list[str] = []  # \W, \S of a (non-negated) class, spelled as alternatives
    while i < n:
        c = rust[i]
        if c == "\\" and i + 1 < n:
            e = rust[i + 1]
            table = _INSIDE if in_class else _OUTSIDE
            if e in "wWdDsS":
                if e not in table:
                    # [a\W] = (?:[a]|[^word]); a negated one is an intersection RE2 cannot spell,
                    # and a neighbouring '-' could turn into a range once \W is taken out.
                    if negated or rust[i - 1 : i] == "-" or rust[i + 2 : i + 3] == "-":
                        raise _NoExactSpelling(f"\\{e} inside a class")
                    extras.append(_OUTSIDE[e])
                    i += 2
                    continue
                out.append(table[e])
            else:
                out.append(rust[i : i + 2])
            i += 2
            continue
        if in_class:
            if rust.startswith("[:", i):
                end = rust.find(":]", i + 2)
                if end > 0:
                    out.append(rust[i : end + 2])
                    i = end + 2
                    continue
            if c == "]" and i > class_start:
                in_class = False
                if extras:
                    body = "".join(out[class_out + 1 :])
                    del out[class_out:]
                    out.append("(?:" + "|".join(([f"[{body}]"] if body else []) + extras) + ")")
                    extras = []
                    i += 1
                    continue
            out.append(c)
            i += 1
            continue
        if c == "[":
            in_class = True
            class_out = len(out)
            out.append(c)
            i += 1
            negated = i < n and rust[i] == "^"
            if negated:
                out.append("^")
                i += 1
            class_start = i
            continue
        out.append(c)
        i += 1
    return "".join(out)


def compile_linear(rust: str, case_sensitive: bool) -> Any | None:
    """A compiled RE2 pattern over UTF-8 bytes (multi-line anchors), or None (use ``re``)."""
    try:
        import re2
    except ImportError:  # pragma: no cover - pinned dependency; the engine still works without it
        return None
    try:
        spelled = re2_spelling(rust)
    except _NoExactSpelling:
        return None
    flags = "(?m)" if case_sensitive else "(?mi)"
    options = re2.Options()
    options.log_errors = False
    try:
        return re2.compile((flags + spelled).encode("utf-8"), options)
    except re2.error:
        return None
