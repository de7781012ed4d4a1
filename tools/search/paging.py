"""Opaque continuation cursors for the paginated search modes (SPEC B-1, Q-2, Q-4).

A cursor names the last item of the previous page (a sort key) and a fingerprint of the request
that produced it, base64url-encoded. Resuming returns exactly the items after that key in the same
order, so a walk through the pages has no duplicates and no gaps even if files appear meanwhile.
A cursor is refused (``invalid_argument``) when it was made for another query, mode or order.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from typing import Any

from kernel.errors import InvalidArgument

CURSOR_VERSION = 1
MAX_CURSOR_BYTES = 8192


def fingerprint(*parts: Any) -> str:
    raw = json.dumps(parts, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def encode(fp: str, key: list[Any]) -> str:
    raw = json.dumps({"v": CURSOR_VERSION, "f": fp, "k": key}, ensure_ascii=False, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode("utf-8", "surrogatepass")).decode("ascii").rstrip("=")


def decode(cursor: str, fp: str) -> list[Any] | None:
    """The key after which to resume, or None for an empty cursor (first page)."""
    if not cursor:
        return None
    if len(cursor) > MAX_CURSOR_BYTES:
        raise InvalidArgument("cursor is too long; copy it back verbatim from the previous result")
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        data = json.loads(base64.urlsafe_b64decode(padded.encode("ascii")).decode("utf-8", "surrogatepass"))
    except (ValueError, UnicodeError, binascii.Error):
        raise InvalidArgument("cursor is not valid; copy it back verbatim from the previous result") from None
    if not isinstance(data, dict) or data.get("v") != CURSOR_VERSION or not isinstance(data.get("k"), list):
        raise InvalidArgument("cursor is not valid; copy it back verbatim from the previous result")
    if data.get("f") != fp:
        raise InvalidArgument(
            "cursor belongs to a different search (mode, query, path, include or sort changed); "
            "repeat the original arguments or drop the cursor"
        )
    return data["k"]
