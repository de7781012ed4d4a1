"""How a file name is shown in a tool's text output, so that a name cannot forge lines or terminal
output (``ls``, search results, ``git status``).

A name with a control character (``\\n``, ESC…), a line or paragraph separator, a
bidirectional-text control, an undecodable byte (a lone surrogate from the file system), a
backslash or a double quote is shown in double quotes with C-style escapes, as git quotes paths;
other names are shown as they are. Metadata keeps every name exact.
"""

from __future__ import annotations

import unicodedata

_BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
_SHORT_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape_char(ch: str) -> str | None:
    """The escape ``ch`` is shown as in a quoted name, or None when it is shown as itself."""
    if ch in _SHORT_ESCAPES:
        return _SHORT_ESCAPES[ch]
    code = ord(ch)
    if 0xDC80 <= code <= 0xDCFF:  # an undecodable byte, as os.fsdecode carries it
        return f"\\x{code - 0xDC00:02x}"
    if ch in _BIDI_CONTROLS or unicodedata.category(ch) in ("Cc", "Cs", "Zl", "Zp"):
        return f"\\x{code:02x}" if code < 0x80 else f"\\u{code:04x}"
    return None


def shown_name(name: str) -> str:
    """``name`` for the text output: as is, or quoted with escapes (module docstring)."""
    escapes = [_escape_char(ch) for ch in name]
    if not any(escapes):
        return name
    return '"' + "".join(e or ch for e, ch in zip(escapes, name, strict=True)) + '"'
