"""Which file a download lands in when the caller names none (SPEC D-2, REFERENCE 4.6).

Candidates, first usable wins: the ``Content-Disposition`` filename (``filename*`` RFC 5987/2231
first), the URL's ``file`` or ``filename`` query parameter, the last path segment, then
``download.bin``. Every candidate is *sanitised* to one plain file name: the server and the URL
are untrusted, so directory parts (``/``, ``\\``), ``..``, leading dots (no hidden or dot files, no
``.a3s``), control and reserved characters are removed and the name is cut to 255 bytes keeping
its extension. An inferred file always lands in the workspace root.
"""

from __future__ import annotations

import re
import unicodedata
from email.message import Message
from urllib.parse import parse_qsl, unquote

from tools.net.urls import SafeUrl

DEFAULT_NAME = "download.bin"
MAX_NAME_BYTES = 255
QUERY_NAME_KEYS = ("file", "filename")
_RESERVED = re.compile(r'[\x00-\x1f\x7f<>:"|?*\\/]')
_SPACES = re.compile(r"\s+")


def sanitize(name: str) -> str | None:
    """One safe file name from an untrusted string, or None when nothing usable is left."""
    text = unicodedata.normalize("NFC", name)
    text = re.split(r"[/\\]", text)[-1]  # keep the last component only
    text = _RESERVED.sub("_", text)
    text = "".join(ch for ch in text if unicodedata.category(ch) not in ("Cc", "Cf", "Cs", "Co", "Cn"))
    text = _SPACES.sub(" ", text).strip(" .")
    if not text or set(text) <= {"_"}:
        return None
    return _truncate(text)


def _truncate(name: str) -> str:
    if len(name.encode("utf-8")) <= MAX_NAME_BYTES:
        return name
    stem, dot, ext = name.rpartition(".")
    if not dot or len(ext.encode("utf-8")) > 16:
        stem, ext = name, ""
    room = MAX_NAME_BYTES - (len(ext.encode("utf-8")) + 1 if ext else 0)
    cut = stem.encode("utf-8")[:room].decode("utf-8", "ignore").rstrip(" .")
    return f"{cut}.{ext}" if ext else cut


def disposition_name(header: str | None) -> str | None:
    """The filename a ``Content-Disposition`` header proposes (``filename*`` preferred)."""
    if not header:
        return None
    msg = Message()
    msg["content-disposition"] = header
    try:
        name = msg.get_filename()
    except (ValueError, LookupError, UnicodeError):
        return None
    return name or None


def infer_name(url: SafeUrl, content_disposition: str | None) -> str:
    candidates: list[str] = []
    proposed = disposition_name(content_disposition)
    if proposed:
        candidates.append(proposed)
    query = url.url.query.decode("ascii", "replace")
    for key, value in parse_qsl(query, keep_blank_values=False):
        if key.lower() in QUERY_NAME_KEYS:
            candidates.append(value)
    path = url.url.raw_path.decode("ascii", "replace").split("?", 1)[0]
    if path and not path.endswith("/"):
        candidates.append(unquote(path.rsplit("/", 1)[-1]))
    for candidate in candidates:
        clean = sanitize(candidate)
        if clean:
            return clean
    return DEFAULT_NAME
