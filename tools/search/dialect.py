"""The grep regex dialect: one pattern, read the same way by ripgrep (Rust ``regex``) and Python ``re``.

``translate(pattern)`` returns a ``Dialect`` with a Rust spelling (for ``rg``) and a Python spelling
(for the pure-Python engine) of the *same* language, or raises ``invalid_argument`` naming the
construct. Invariant: when a pattern is accepted, both engines report the same matching lines.

The dialect is the common core of the two engines (Rust regex syntax, which is what ripgrep users
type), plus a few friendly readings that engines would otherwise disagree on:

- escaped punctuation is always a literal (``\\/``, ``\\"``, ``\\@``: Python accepts them, ripgrep 13
  rejects them; we send rg a ``\\x{..}`` escape);
- a ``{`` that does not start a valid repetition ``{n}``, ``{n,}``, ``{n,m}`` is a literal brace
  (Python reads it so, Rust rejects it); ``{,m}`` means ``{0,m}``;
- POSIX classes ``[[:alpha:]]`` (ASCII, as in Rust) are expanded for Python;
- ``\\x{1F600}`` / ``\\u{..}`` code points are spelled ``\\U0001f600`` for Python.

Refused, because the two engines read them differently or one cannot read them at all:
look-around and backreferences (Rust has neither), atomic groups and possessive quantifiers
(``a*+`` is possessive in Python 3.11 but a nested repetition in Rust), ``(?x)`` (Rust ignores
whitespace inside classes, Python does not), ``(?U)`` (Rust only), inline flags after the start,
Unicode property classes ``\\p{..}`` (Python ``re`` has none), nested classes and set operations
``&&`` ``--`` ``~~`` ``||`` inside a class, ``\\A`` ``\\z`` ``\\Z`` (lines are matched one at a time: use
``^`` and ``$``), a literal ``\\n`` (lines never contain one, as in ripgrep), ``\\N{..}``, octal and
``\\0`` escapes. Case-insensitive matching uses simple Unicode case folding in both engines; the
known residual difference is invalid UTF-8 inside a line (Rust never matches those bytes, Python
sees U+FFFD) and combining marks under ``\\w`` (Rust counts them as word characters).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kernel.errors import InvalidArgument

MAX_PATTERN_BYTES = 64 * 1024

# Characters Rust regex-syntax (ripgrep 13) accepts after a backslash as a literal.
_RUST_META = set("\\.+*?()|[]{}^$#&-~")
_SIMPLE_ESCAPES = set("dDwWsSbBtrfva")
_POSIX = {
    "alnum": "0-9A-Za-z",
    "alpha": "A-Za-z",
    "ascii": "\\x00-\\x7F",
    "blank": "\\t ",
    "cntrl": "\\x00-\\x1F\\x7F",
    "digit": "0-9",
    "graph": "!-~",
    "lower": "a-z",
    "print": " -~",
    "punct": "!-/:-@\\[-`{-~",
    "space": "\\t\\n\\v\\f\\r ",
    "upper": "A-Z",
    "word": "0-9A-Za-z_",
    "xdigit": "0-9A-Fa-f",
}
_REPEAT_RE = re.compile(r"\{(\d*)(,?)(\d*)\}")


@dataclass(frozen=True, slots=True)
class Dialect:
    source: str
    rust: str
    python: str


def _refuse(pattern: str, what: str, hint: str = "") -> InvalidArgument:
    msg = f"regex {pattern!r} uses {what}, which the search engines read differently or not at all"
    return InvalidArgument(msg + (f"; {hint}" if hint else ""))


def translate(pattern: str) -> Dialect:
    """Validate ``pattern`` and spell it for both engines (see the module docstring)."""
    if len(pattern.encode("utf-8", "surrogatepass")) > MAX_PATTERN_BYTES:
        raise InvalidArgument(f"regex is longer than {MAX_PATTERN_BYTES} bytes")
    rust: list[str] = []
    py: list[str] = []
    i, n = 0, len(pattern)
    in_class = False
    class_start = 0  # index in pattern just after '[' / '[^'
    prev_quantifiable = False

    def both(text: str) -> None:
        rust.append(text)
        py.append(text)

    while i < n:
        c = pattern[i]
        if c == "\\":
            if i + 1 >= n:
                raise InvalidArgument(f"regex {pattern!r} ends with a lone backslash")
            e = pattern[i + 1]
            i += 2
            if e.isdigit():
                if e == "0" or not in_class:
                    raise _refuse(
                        pattern, f"the escape \\{e} (backreference or octal)", "Rust regex has neither"
                    )
                raise _refuse(pattern, f"the escape \\{e} inside a class")
            if e in "AzZ":
                raise _refuse(pattern, f"\\{e}", "lines are matched one at a time: use ^ and $")
            if e == "n":
                raise InvalidArgument(
                    f"regex {pattern!r}: the literal '\\n' is not allowed (lines are matched one at a time)"
                )
            if e in "pP":
                raise _refuse(
                    pattern, f"the Unicode class \\{e}", "spell the class explicitly, e.g. [A-Za-z]"
                )
            if e == "N":
                raise _refuse(pattern, "\\N{...}", "type the character itself")
            if e in "bB" and in_class:
                raise _refuse(pattern, f"\\{e} inside a class")
            if e in ("x", "u", "U"):
                i = _hex_escape(pattern, i, e, rust, py)
            elif e in _SIMPLE_ESCAPES:
                both("\\" + e)
            elif e.isascii() and e.isalpha():
                raise InvalidArgument(f"regex {pattern!r}: unknown escape \\{e}")
            elif e in _RUST_META:
                both("\\" + e)
            else:
                # Escaped punctuation (or any other char) is a literal: spell it unambiguously.
                rust.append(f"\\x{{{ord(e):X}}}")
                py.append(re.escape(e))
            prev_quantifiable = not in_class
            continue
        if in_class:
            if c == "]" and i > class_start:
                in_class = False
                both("]")
                i += 1
                prev_quantifiable = True
                continue
            if c == "[":
                if pattern.startswith("[:", i):
                    end = pattern.find(":]", i + 2)
                    name = pattern[i + 2 : end] if end >= 0 else ""
                    if end < 0 or name.startswith("^") or name not in _POSIX:
                        raise _refuse(pattern, f"the class item {pattern[i : end + 2 if end >= 0 else n]!r}")
                    rust.append(f"[:{name}:]")
                    py.append(_POSIX[name])
                    i = end + 2
                    continue
                raise _refuse(pattern, "a nested character class", "escape '[' inside a class as \\[")
            two = pattern[i : i + 2]
            if two in ("&&", "--", "~~", "||"):
                raise _refuse(pattern, f"the class set operation {two!r}", "escape the characters")
            both(c)
            i += 1
            continue
        if c == "[":
            in_class = True
            both("[")
            i += 1
            if i < n and pattern[i] == "^":
                both("^")
                i += 1
            class_start = i
            continue
        if c == "(":
            i = _group_open(pattern, i, rust, py)
            prev_quantifiable = False
            continue
        if c in "*+?":
            if i + 1 < n and pattern[i + 1] == "+":
                raise _refuse(
                    pattern, f"the possessive quantifier {c}+", "Rust reads it as a nested repetition"
                )
            both(c)
            i += 1
            if i < n and pattern[i] == "?":  # lazy form, same in both
                both("?")
                i += 1
            prev_quantifiable = False
            continue
        if c == "{":
            m = _REPEAT_RE.match(pattern, i)
            if m and prev_quantifiable and (m.group(1) or (m.group(2) and m.group(3))):
                lo, comma, hi = m.group(1) or "0", m.group(2), m.group(3)
                if hi and int(hi) < int(lo):
                    raise InvalidArgument(f"regex {pattern!r}: repetition {m.group(0)} has min > max")
                both("{" + lo + comma + hi + "}")
                i = m.end()
                if i < n and pattern[i] == "+":
                    raise _refuse(pattern, "a possessive repetition", "Rust reads it as a nested repetition")
                if i < n and pattern[i] == "?":
                    both("?")
                    i += 1
                prev_quantifiable = False
                continue
            both("\\{")
            i += 1
            prev_quantifiable = True
            continue
        if c == "}":
            both("\\}")
            i += 1
            prev_quantifiable = True
            continue
        if c == "\n":
            raise InvalidArgument(
                f"regex {pattern!r}: the literal '\\n' is not allowed (lines are matched one at a time)"
            )
        if c == "#":
            both("\\#")  # literal in both; escaped so no verbose-mode reading can turn it into a comment
            i += 1
            prev_quantifiable = True
            continue
        both(c)
        i += 1
        prev_quantifiable = c not in "|^"
    if in_class:
        raise InvalidArgument(f"regex {pattern!r}: unclosed character class")
    d = Dialect(source=pattern, rust="".join(rust), python="".join(py))
    try:
        re.compile(d.python)
    except (re.error, OverflowError, RecursionError) as exc:
        raise InvalidArgument(f"regex {pattern!r} is invalid: {exc}") from None
    return d


_HEX_ESCAPE_RE = re.compile(r"\\(?:U[0-9a-fA-F]{8}|u[0-9a-fA-F]{4}|x[0-9a-fA-F]{2})")


def required_literal(python_pattern: str, case_sensitive: bool) -> str | None:
    """A string every match must contain, for a cheap byte pre-check; None when unsure.

    Conservative: no alternation anywhere, nothing inside groups or classes, a literal run loses
    its last character before any quantifier, and case-insensitive searches only use runs with no
    cased characters.
    """
    src = python_pattern
    if "|" in src or src.startswith("(?"):
        return None
    runs: list[str] = []
    cur: list[str] = []
    depth = 0
    in_class = False
    i = 0

    def close() -> None:
        if cur:
            runs.append("".join(cur))
            cur.clear()

    while i < len(src):
        c = src[i]
        if in_class:
            if c == "\\":
                i += 2
                continue
            if c == "]":
                in_class = False
            i += 1
            continue
        if c == "\\":
            m = _HEX_ESCAPE_RE.match(src, i)
            if m:
                close()
                i = m.end()
                continue
            e = src[i + 1] if i + 1 < len(src) else ""
            if e and e.isascii() and not e.isalnum() and depth == 0:
                cur.append(e)
            else:
                close()
            i += 2
            continue
        if c in "?*+{":
            if cur:
                cur.pop()
            close()
            i = src.index("}", i) + 1 if c == "{" else i + 1  # the dialect only emits {n}, {n,}, {n,m}
            continue
        if c in "()[.^$":
            close()
            if c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
            elif c == "[":
                in_class = True
            i += 1
            continue
        if depth == 0:
            cur.append(c)
        i += 1
    close()
    usable = [
        r for r in runs if len(r) >= 2 and "\ufffd" not in r and (case_sensitive or r.lower() == r.upper())
    ]
    return max(usable, key=len) if usable else None


def _hex_escape(pattern: str, i: int, e: str, rust: list[str], py: list[str]) -> int:
    """``\\xHH``, ``\\x{H..}``, ``\\uHHHH``, ``\\u{..}``, ``\\UHHHHHHHH``: one code point, both spellings."""
    if i < len(pattern) and pattern[i] == "{":
        end = pattern.find("}", i)
        digits = pattern[i + 1 : end] if end > 0 else ""
        nxt = end + 1
    else:
        width = {"x": 2, "u": 4, "U": 8}[e]
        digits = pattern[i : i + width]
        nxt = i + width
        if len(digits) != width:
            digits = ""
    try:
        cp = int(digits, 16) if digits and all(ch in "0123456789abcdefABCDEF" for ch in digits) else -1
    except ValueError:
        cp = -1
    if not 0 <= cp <= 0x10FFFF or 0xD800 <= cp <= 0xDFFF:
        raise InvalidArgument(f"regex {pattern!r}: invalid hex escape \\{e}{digits}")
    rust.append(f"\\x{{{cp:X}}}")
    py.append(f"\\U{cp:08x}")
    return nxt


_FLAG_GROUP_RE = re.compile(r"\(\?([a-zA-Z-]*)([:)])")


def _group_open(pattern: str, i: int, rust: list[str], py: list[str]) -> int:
    if not pattern.startswith("(?", i):
        rust.append("(")
        py.append("(")
        return i + 1
    if pattern.startswith("(?P<", i):
        end = pattern.find(">", i)
        name = pattern[i + 4 : end] if end > 0 else ""
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise InvalidArgument(f"regex {pattern!r}: invalid group name {name!r}")
        rust.append(f"(?P<{name}>")
        py.append(f"(?P<{name}>")
        return end + 1
    m = _FLAG_GROUP_RE.match(pattern, i)
    if m:
        flags, kind = m.group(1), m.group(2)
        if any(f not in "ims-" for f in flags):
            bad = "".join(sorted({f for f in flags if f not in "ims-"}))
            raise _refuse(pattern, f"the inline flag(s) {bad!r}", "only i, m and s are supported")
        if kind == ")" and (i != 0 or "-" in flags):
            raise _refuse(
                pattern, "inline flags after the start of the pattern", "use a scoped group (?i:...)"
            )
        text = m.group(0)
        rust.append(text)
        py.append(text)
        return m.end()
    construct = pattern[i : i + 4]
    raise _refuse(
        pattern, f"the group syntax {construct!r} (look-around, backreference, comment or atomic group)"
    )
