"""Proxies and their credentials (SPEC D-3, W-4; REFERENCE 4.10 ``proxy``).

- ``ProxySettings``: the environment's proxies (curl's conventions), read once at the process edge;
  an operator's proxy is trusted configuration.
- ``parse_proxy``: one proxy URL — ``http``, ``https``, ``socks5`` or ``socks5h`` — into a
  ``ProxyUrl``. ``user:password@`` is kept as *credentials* (percent-decoded, each part at most 255
  bytes: RFC 1929's limit for SOCKS5, applied to every scheme so one rule holds) and handed only to
  httpx's ``Proxy(auth=…)``: HTTP(S) proxies get ``Proxy-Authorization: Basic`` on CONNECT (https
  targets) and on forwarded plain-http requests; SOCKS5 negotiates username/password (RFC 1929).
- The secret is shown nowhere: messages name a proxy by ``anchor`` (``scheme://host:port``), a
  coalesced flight is keyed by ``credential_digest``, and ``redact_proxy`` masks the userinfo of a
  ``proxy`` argument in events. Parse errors never echo the URL. httpcore's DEBUG trace prints the
  SOCKS5 handshake's arguments, credentials included: a filter on its ``httpcore.socks`` logger
  masks them (installed when this module is imported, i.e. before any proxy is used).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.request import proxy_bypass_environment

import httpx

from kernel.errors import InvalidArgument
from tools.net.urls import SafeUrl

PROXY_SCHEMES = ("http", "https", "socks5", "socks5h")  # socks5/socks5h: the proxy resolves names
MAX_CREDENTIAL_BYTES = 255  # RFC 1929: ULEN and PLEN are one byte
ProxySource = Literal["request", "environment"]


class _MaskSocksAuth(logging.Filter):
    """``setup_socks5_connection.started … auth=(b'user', b'password')``: ``auth`` is the last
    argument httpcore prints, so everything after it goes."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        cut = text.find(" auth=")
        if cut >= 0 and not text.endswith(" auth=None"):
            record.msg, record.args = text[:cut] + " auth=***", None
        return True


logging.getLogger("httpcore.socks").addFilter(_MaskSocksAuth())


@dataclass(frozen=True)
class ProxyUrl:
    scheme: str
    host: str  # as written (an IPv6 literal without brackets)
    port: int | None
    credentials: tuple[str, str] | None = None
    source: ProxySource = "request"

    def __repr__(self) -> str:  # never the password, even in a traceback
        who = " with credentials" if self.credentials else ""
        return f"ProxyUrl({self.anchor}{who}, {self.source})"

    @property
    def anchor(self) -> str:
        """``scheme://host:port``: how messages and metadata name this proxy."""
        return _url(self.scheme, self.host, self.port)

    @property
    def credential_digest(self) -> str | None:
        """A digest of the credentials (never the credentials): two users' flights stay apart."""
        if self.credentials is None:
            return None
        user, password = self.credentials
        data = b"a3s-proxy-credentials\0" + user.encode() + b"\0" + password.encode()
        return hashlib.sha256(data).hexdigest()[:32]

    @property
    def key(self) -> str:
        """Identifies the proxy *and* whose credentials it carries (a client pool per key)."""
        return f"{self.anchor}#{self.credential_digest or ''}"

    def to_httpx(self, host: str | None = None) -> httpx.Proxy:
        """The httpx proxy, reached at ``host`` (a verified address) when given."""
        return httpx.Proxy(_url(self.scheme, host or self.host, self.port), auth=self.credentials)


def _url(scheme: str, host: str, port: int | None) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"{scheme}://{shown}" + (f":{port}" if port is not None else "")


def parse_proxy(raw: str, *, source: ProxySource = "request") -> ProxyUrl:
    """A proxy URL (``scheme://[user:password@]host:port``); a request's proxy must name its port.

    Errors name the problem, never the URL (it may carry a password)."""
    where = "proxy" if source == "request" else "the environment's proxy (HTTP(S)_PROXY/ALL_PROXY)"
    try:
        url = httpx.URL(raw.strip())
        host = url.host  # decodes punycode: ``xn--`` raises IDNAError (a ValueError)
        credentials = (url.username, url.password) if url.userinfo else None  # percent-decoded
    except (httpx.InvalidURL, ValueError, TypeError):
        raise InvalidArgument(f"invalid {where} url: expected scheme://[user:password@]host:port") from None
    if url.scheme not in PROXY_SCHEMES:
        raise InvalidArgument(
            f"{where} must be http://host:port, https://host:port or socks5://host:port (socks5h too), "
            f"not {url.scheme[:16]}:"
        )
    if not host or (source == "request" and url.port is None):
        raise InvalidArgument(f"{where} must name a host and a port (http://host:port or socks5://host:port)")
    if url.port is not None and not 0 < url.port < 65536:
        raise InvalidArgument(f"{where} port must be 1-65535")
    if url.path not in ("", "/") or url.query or url.fragment:
        raise InvalidArgument(f"{where} url must be scheme://[user:password@]host:port, without a path")
    if credentials is not None:
        for part, name in zip(credentials, ("user name", "password"), strict=True):
            if len(part.encode("utf-8")) > MAX_CREDENTIAL_BYTES:
                raise InvalidArgument(f"{where}: the {name} is longer than {MAX_CREDENTIAL_BYTES} bytes")
    return ProxyUrl(url.scheme, host, url.port, credentials, source)


def check_proxy_url(raw: str) -> ProxyUrl:
    """A proxy URL a request named (http, https, socks5 or socks5h, with a port)."""
    return parse_proxy(raw, source="request")


def redact_proxy(raw: str) -> str:
    """A ``proxy`` argument as events show it: ``scheme://***@host:port`` when it carries userinfo."""
    try:
        url = httpx.URL(raw.strip())
        host = url.host  # may raise IDNAError (a ValueError)
    except (httpx.InvalidURL, ValueError, TypeError):
        return "(invalid proxy url)" if "@" in raw else raw
    if not url.userinfo and "@" not in raw:
        return raw
    if not host:
        return "(invalid proxy url)"
    shown = _url(url.scheme, host, url.port)
    return shown.replace("://", "://***@", 1)


def redact_proxy_arg(args: Any) -> Any:
    """``event_args`` for tools taking a ``proxy``: its userinfo is masked."""
    if not isinstance(args, dict) or not isinstance(args.get("proxy"), str):
        return args
    return {**args, "proxy": redact_proxy(args["proxy"])}


@dataclass(frozen=True)
class ProxySettings:
    """Proxies from the process environment (curl's conventions), read once at the edge."""

    http: str | None = None
    https: str | None = None
    no_proxy: str = ""

    def __repr__(self) -> str:  # the values may carry credentials
        return f"ProxySettings(http={self.http is not None}, https={self.https is not None})"

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> ProxySettings:
        def first(*names: str) -> str | None:
            for name in names:
                value = environ.get(name, "").strip()
                if value:
                    return value
            return None

        fallback = first("ALL_PROXY", "all_proxy")
        return cls(
            http=first("HTTP_PROXY", "http_proxy") or fallback,
            https=first("HTTPS_PROXY", "https_proxy") or fallback,
            no_proxy=first("NO_PROXY", "no_proxy") or "",
        )

    def for_url(self, url: SafeUrl) -> str | None:
        proxy = self.https if url.scheme == "https" else self.http
        if proxy is None:
            return None
        if self.no_proxy and proxy_bypass_environment(url.host, {"no": self.no_proxy}):
            return None
        return proxy
