"""Model API failures → typed kernel errors, from the status only (SPEC A-3; REFERENCE 4.14, W-6).

=========================================================  ==========================================
what happened                                              kind
=========================================================  ==========================================
HTTP 429                                                   ``rate_limited{retry_after_ms}`` (from
                                                           ``retry-after-ms`` / ``Retry-After``)
HTTP 408, HTTP 5xx, connection refused/reset/closed        ``transport{op: "model"}``
the request's deadline or ceiling passed, or no byte came  ``timeout{op: "model", duration_ms}``
within the idle bound (``time_bounds.py``)
the caller cancelled                                       ``cancelled{op: "model"}`` (by the loop)
another HTTP status (400, 401, 403, 404, 422…)             ``provider_error{status}``
an answer whose shape cannot be read (``wire_values``)     ``provider_error{status: 200,
                                                           reason: "malformed"}``
an error event inside a 200 stream                         by its typed ``error.type`` field
                                                           (``rate_limit_error`` → rate_limited;
                                                           ``overloaded_error``/``api_error`` →
                                                           transport; else provider_error)
=========================================================  ==========================================

The response body is never read to decide the kind (a page *saying* "429" stays what its status
says); it only contributes a bounded, human-readable detail to the message. Messages never quote
the endpoint URL or any header value: errors travel in events and snapshots.
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Mapping
from typing import Any

from kernel.errors import ProviderError, RateLimited, Timeout, ToolError, Transport, bound_text

OP = "model"
MAX_DETAIL_CHARS = 300
MAX_RETRY_AFTER_MS = 24 * 3600 * 1000


def retry_after_ms(headers: Mapping[str, str] | None, now: float | None = None) -> int | None:
    """Milliseconds a 429 asks us to wait: ``retry-after-ms``, else ``Retry-After`` (seconds or an
    HTTP date); None when absent or unparseable. Capped at a day."""
    if not headers:
        return None
    lowered = {str(k).lower(): str(v) for k, v in headers.items()}
    raw_ms = lowered.get("retry-after-ms")
    if raw_ms is not None:
        try:
            return _cap(float(raw_ms))
        except ValueError:
            pass
    raw = lowered.get("retry-after")
    if raw is None:
        return None
    try:
        return _cap(float(raw) * 1000)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    return _cap((when.timestamp() - (now if now is not None else time.time())) * 1000)


def _cap(ms: float) -> int | None:
    if ms != ms:  # NaN
        return None
    return int(min(max(ms, 0.0), MAX_RETRY_AFTER_MS))


class StatusTransport(Transport):
    """``transport`` that the server *answered* (408/5xx), as opposed to a broken connection or stream:
    the wire works, so a blocking re-send would not help, but a different request might (a server
    that fails on a request feature, e.g. llama.cpp's 500 for ``response_format: json_schema``).
    The kind on the wire is plain ``transport{op}``; ``status`` stays on the object."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message, op=OP)
        self.status = status


def status_error(status: int, headers: Mapping[str, str] | None, detail: str = "") -> ToolError:
    """The typed error for an HTTP status a model API answered with."""
    suffix = f": {bound_text(detail, MAX_DETAIL_CHARS)}" if detail else ""
    if status == 429:
        wait = retry_after_ms(headers)
        hint = f" (retry after {wait} ms)" if wait is not None else ""
        return RateLimited(
            f"model API rate limited the request (HTTP 429){hint}{suffix}", retry_after_ms=wait
        )
    if status == 408 or status >= 500:
        return StatusTransport(f"model API failed (HTTP {status}){suffix}", status)
    return ProviderError(f"model API refused the request (HTTP {status}){suffix}", status=status)


def stream_error(error_type: str | None, detail: str = "") -> ToolError:
    """An error event inside a successful (200) stream, by its typed ``type`` field."""
    suffix = f": {bound_text(detail, MAX_DETAIL_CHARS)}" if detail else ""
    if error_type == "rate_limit_error":
        return RateLimited(f"model API rate limited the stream{suffix}", retry_after_ms=None)
    if error_type in ("overloaded_error", "api_error", "server_error", None):
        return Transport(f"model API failed mid-stream ({error_type or 'error event'}){suffix}", op=OP)
    return ProviderError(f"model API error mid-stream ({error_type}){suffix}", status=200)


class EmptyStream(Transport):
    """A 200 stream that ended before any content, finish reason or usage (some servers cannot
    stream some requests — llama.cpp with an automatic tool choice — and just close it). Its kind is
    ``transport``; the loop answers it with one blocking request instead of retrying the stream."""

    def __init__(self) -> None:
        super().__init__("model stream ended before any content", op=OP)


def malformed(what: str) -> ProviderError:
    """An answer whose shape cannot be read (``wire_values``): the same request would bring the same
    answer, so it is not retried."""
    return ProviderError(f"model API sent a malformed answer ({what})", status=200, reason="malformed")


def timeout_error(started: float, why: str = "") -> Timeout:
    duration_ms = int((time.monotonic() - started) * 1000)
    suffix = f" ({why})" if why else ""
    return Timeout(f"model request timed out after {duration_ms}ms{suffix}", op=OP, duration_ms=duration_ms)


def transport_error(exc: BaseException) -> Transport:
    return Transport(f"model API connection failed ({type(exc).__name__})", op=OP)


# A key shorter than this is no secret worth hiding (and would blot out common words).
MIN_SECRET_CHARS = 8


def body_detail(body: Any, secret: str = "") -> str:
    """A short human-readable message from an API error body (for the message only). ``secret``,
    the provider's API key, is blotted out: a proxy that echoes the key it was sent (``invalid key
    …``) would otherwise put it in the run's result and its ``run_end`` event."""
    detail = _detail(body)
    if len(secret) >= MIN_SECRET_CHARS and secret in detail:
        detail = detail.replace(secret, "[REDACTED]")
    return detail


def _detail(body: Any) -> str:
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict):
            msg = err.get("message")
            if isinstance(msg, str):
                return msg
        elif isinstance(err, str):
            return err
    if isinstance(body, str):
        return body
    return ""


def body_error_type(body: Any) -> str | None:
    """The typed ``type`` of a stream error: ``{"error": {"type"}}`` (Anthropic) or the inner error
    object itself (what the OpenAI SDK hands over)."""
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and isinstance(err.get("type"), str):
            return str(err["type"])
        if isinstance(body.get("type"), str) and body["type"] != "error":
            return str(body["type"])
    return None
