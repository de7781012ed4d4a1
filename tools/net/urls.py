"""URLs a tool may request, and the forms that may be shown (SPEC D-2, D-5, REFERENCE 4.6, 4.9).

``parse_url`` accepts only absolute ``http``/``https`` URLs with a host, no userinfo (refused, not
stripped: ``https://user:pw@host`` is a mistake or an attack), no whitespace or control
characters, at most ``MAX_URL_CHARS``; the fragment is dropped (it is never sent). The query is
kept for the request: signed URLs need it.

``SafeUrl.anchor`` is what may appear in results, metadata, messages and events: scheme, host,
port and path — never userinfo, query or fragment, so a signature (``X-Amz-Signature``,
``sig=``, ``token=``) cannot leak. ``drop_secret_query`` removes secret-looking keys
(``api_key``, ``access_token`` …) from the request itself, which ``web_fetch`` does (REFERENCE
4.9); ``download`` keeps every parameter.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode

import httpx

from kernel.errors import InvalidArgument

MAX_URL_CHARS = 8192
SCHEMES = ("http", "https")
SECRET_QUERY_KEYS = frozenset(
    {
        "api_key",
        "apikey",
        "api-key",
        "access_token",
        "auth_token",
        "client_secret",
        "private_token",
        "password",
        "passwd",
        "secret",
    }
)
_FORBIDDEN_CHARS = re.compile(r"[\x00-\x20\x7f]")


@dataclass(frozen=True, slots=True)
class SafeUrl:
    url: httpx.URL

    @property
    def scheme(self) -> str:
        return self.url.scheme

    @property
    def host(self) -> str:
        """The host as it goes on the wire (IDNA/punycode ASCII, IPv6 without brackets)."""
        return self.url.raw_host.decode("ascii")

    @property
    def port(self) -> int:
        return self.url.port or (443 if self.url.scheme == "https" else 80)

    @property
    def origin(self) -> tuple[str, str, int]:
        return (self.scheme, self.host.lower(), self.port)

    @property
    def anchor(self) -> str:
        """Scheme, host, port and path only (no userinfo, query or fragment)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        port = f":{self.url.port}" if self.url.port is not None else ""
        return f"{self.scheme}://{host}{port}{self.url.raw_path.split(b'?', 1)[0].decode('ascii')}"

    def __str__(self) -> str:
        return str(self.url)


def parse_url(raw: str, *, base: SafeUrl | None = None, drop_secret_query: bool = False) -> SafeUrl:
    """A checked request URL (relative ``raw`` is joined to ``base``: redirects, meta refresh)."""
    if not isinstance(raw, str) or not raw.strip():
        raise InvalidArgument("url must be a non-empty string")
    text = raw.strip()
    if len(text) > MAX_URL_CHARS:
        raise InvalidArgument(f"url is longer than {MAX_URL_CHARS} characters")
    if _FORBIDDEN_CHARS.search(text):
        raise InvalidArgument("url contains whitespace or control characters")
    try:
        url = base.url.join(text) if base is not None else httpx.URL(text)
        # ``host`` decodes punycode: ``xn--`` or ``xn--ls8h.la`` raise IDNAError (a ValueError).
        host, port = url.host, url.port
    except (httpx.InvalidURL, ValueError, TypeError) as exc:
        raise InvalidArgument(f"invalid url: {str(exc)[:200]}") from None
    if url.scheme not in SCHEMES:
        shown = url.scheme or "(none)"
        raise InvalidArgument(f"only http and https URLs are allowed, not {shown}:")
    if url.userinfo:
        raise InvalidArgument("URLs with credentials (user:password@) are refused")
    if not host:
        raise InvalidArgument("url has no host")
    if port is not None and not 0 < port < 65536:  # connect() raised OverflowError past 65535
        raise InvalidArgument(f"url port must be 1-65535, not {port}")
    if "%" in url.raw_host.decode("ascii", "replace"):
        raise InvalidArgument("url host must not contain percent-escapes or zone identifiers")
    if url.fragment:
        url = url.copy_with(fragment=None)
    if drop_secret_query and url.query:
        pairs = parse_qsl(url.query.decode("ascii", "replace"), keep_blank_values=True)
        kept = [(k, v) for k, v in pairs if k.lower() not in SECRET_QUERY_KEYS]
        if len(kept) != len(pairs):
            url = url.copy_with(query=urlencode(kept).encode("ascii") if kept else None)
    return SafeUrl(url)


def anchor_of(raw: str) -> str:
    """A showable form of any URL string (for messages about URLs that failed to parse)."""
    try:
        return SafeUrl(httpx.URL(raw.strip())).anchor
    except (httpx.InvalidURL, ValueError, TypeError, UnicodeDecodeError):
        return "(invalid url)"


def redact_url_arg(args: Any) -> Any:
    """``event_args`` for tools taking a ``url``: the URL's anchor, with ``?…`` if it had a query."""
    if not isinstance(args, dict) or not isinstance(args.get("url"), str):
        return args
    raw = args["url"]
    shown = anchor_of(raw)
    if "?" in raw or "#" in raw or "@" in raw:
        shown += "?…" if "?" in raw else ""
    return {**args, "url": shown}
