"""HTTP failures as kernel errors, in one place (CONVENTIONS §9; SPEC W-6, A-3).

``map_http_error`` translates every ``httpx``/``httpcore`` exception (the mapping is total: a test
walks httpx's exception classes) — I/O failures and the client's own socket timeouts are
``transport{op}``, a bad URL is ``invalid_argument``. ``status_error`` types a response by its
status alone, never by its body: 429 → ``rate_limited{retry_after_ms}`` (``Retry-After`` seconds or
HTTP date), 408 and 5xx → ``transport{op}``, anything else an untyped failure naming the status.
Messages name URLs only by their anchor, so query strings (signatures) never reach them.

``ProxyAuthFailed`` (``transport{op, proxy:"authentication_failed"}``): a proxy refused our
credentials or asked for some — HTTP 407 (on CONNECT or on a forwarded request) or a SOCKS5
username/password refusal. It is not transient: nobody retries it, and a search engine's breaker
does not count it (the engine was never reached). The message names the proxy by its anchor only.
"""

from __future__ import annotations

import email.utils
from http import HTTPStatus

import httpcore
import httpx

from kernel.errors import InvalidArgument, RateLimited, ToolError, Transport

MAX_RETRY_AFTER_MS = 24 * 3600 * 1000
MAX_DELTA_DIGITS = 12  # more seconds than that is past the cap anyway
MAX_DETAIL_CHARS = 200


def retry_after_ms(value: str | None, now_ms: int) -> int | None:
    """``Retry-After`` as milliseconds from now (delta seconds or an HTTP date), capped at 24 h.

    The server wrote it: only ASCII digits are delta seconds (``str.isdigit`` also takes ``²``,
    which ``int`` refuses), a longer number than ``MAX_DELTA_DIGITS`` is the cap (``int`` refuses
    5,000 digits), and anything unreadable is no delay — never an exception."""
    if not value:
        return None
    text = value.strip()
    if text.isascii() and text.isdigit():
        if len(text) > MAX_DELTA_DIGITS:
            return MAX_RETRY_AFTER_MS
        return min(int(text) * 1000, MAX_RETRY_AFTER_MS)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when is None or when.tzinfo is None:
        return None
    return max(0, min(int(when.timestamp() * 1000) - now_ms, MAX_RETRY_AFTER_MS))


def reason_phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


def status_error(op: str, status: int, headers: httpx.Headers, anchor: str, now_ms: int) -> ToolError:
    """The typed failure for an error status (the body is never consulted)."""
    label = f"HTTP {status} {reason_phrase(status)}".rstrip()
    if status == 429:
        delay = retry_after_ms(headers.get("retry-after"), now_ms)
        hint = f"; retry after {delay / 1000:.0f}s" if delay is not None else ""
        return RateLimited(f"{op}: {anchor} answered {label}{hint}", retry_after_ms=delay)
    if status == 408 or 500 <= status <= 599:
        return Transport(f"{op}: {anchor} answered {label}", op=op, status=status)
    return ToolError(f"{op}: {anchor} answered {label}", status=status)


class ProxyAuthFailed(Transport):
    """A proxy refused our credentials, or wanted some (see the module docstring)."""


def proxy_auth_failed(op: str, anchor: str, *, had_credentials: bool, source: str) -> ProxyAuthFailed:
    where = "the proxy URL" if source == "request" else "the proxy variable (HTTP(S)_PROXY/ALL_PROXY)"
    if had_credentials:
        why = f"refused the user name and password given in {where}"
    else:
        why = f"requires authentication: give user:password@ in {where}"
    return ProxyAuthFailed(f"{op}: proxy {anchor} {why}", op=op, proxy="authentication_failed")


def is_proxy_auth_failure(exc: BaseException) -> bool:
    """An exception from the proxy handshake that means "authentication failed": an HTTP proxy's 407
    to CONNECT, or a SOCKS5 proxy refusing (or requiring) username/password, or accepting none of
    the methods offered (httpcore's messages)."""
    if not isinstance(exc, (httpx.ProxyError, httpcore.ProxyError)):
        return False
    text = str(exc).upper()
    return text.startswith("407") or "USERNAME/PASSWORD" in text or "NO ACCEPTABLE METHODS" in text


def map_http_error(exc: BaseException, op: str, anchor: str, secret: str | None = None) -> ToolError:
    """A kernel error for an exception raised while talking HTTP (``secret``: a URL to scrub)."""
    if isinstance(exc, ToolError):
        return exc
    detail = str(exc) or type(exc).__name__
    if secret:
        detail = detail.replace(secret, anchor)
    detail = detail[:MAX_DETAIL_CHARS]
    if "CERTIFICATE_VERIFY_FAILED" in detail:  # say how a private CA is trusted (docs/network.md)
        detail += " (a private or proxy CA is trusted with A3S_CA_BUNDLE=ca.pem)"
    if isinstance(exc, (httpx.InvalidURL, httpx.UnsupportedProtocol)):
        return InvalidArgument(f"{op}: invalid request to {anchor}: {detail}")
    if isinstance(exc, (httpx.TimeoutException, httpcore.TimeoutException)):
        return Transport(f"{op}: {anchor} timed out ({type(exc).__name__})", op=op)
    if isinstance(exc, (httpx.HTTPError, httpx.StreamError, httpx.CookieConflict, httpcore.NetworkError)):
        return Transport(f"{op}: request to {anchor} failed: {type(exc).__name__}: {detail}", op=op)
    if type(exc).__module__.startswith("httpcore"):  # anything httpcore raises is a transport failure
        return Transport(f"{op}: request to {anchor} failed: {type(exc).__name__}: {detail}", op=op)
    if isinstance(exc, OSError):
        return Transport(f"{op}: request to {anchor} failed: {detail}", op=op)
    raise exc
