"""Text from the model or a tool, made safe to show on a terminal.

What a model says, the arguments it chooses and the messages of failed calls are written to the
user's terminal by the live views (``a3s-fleet run``, ``a3s-fleet tool``'s progress line). A hostile
model — or a page or file it read — can put escape sequences there: OSC 52 writes the user's
clipboard, others retitle the window, move the cursor to overwrite what was shown, or hide text.
So on a terminal every control character except newline and tab (C0, DEL, C1), and the
bidirectional overrides that reorder what is seen ("Trojan Source"), is shown as a visible
``\\xNN``/``\\uNNNN`` escape instead of being sent. A pipe gets the text unchanged.
"""

from __future__ import annotations

import re

# C0 controls but \t and \n, DEL, C1 controls, and the bidi embedding/override/isolate characters.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def for_terminal(text: str) -> str:
    """``text`` with every character a terminal would act on (not print) shown as an escape; a
    CRLF line end stays a line end (a lone carriage return could overwrite what was shown)."""
    return _UNSAFE.sub(_escape, text.replace("\r\n", "\n"))
