"""A model server's answer is bounded while it is read (SPEC A-3; the MCP HTTP bound's twin).

The SDKs read a blocking answer whole, buffer an SSE line until it ends, and httpx2 undoes
``Content-Encoding`` chunk by chunk without a bound. A hostile or broken server on loopback took
this process to its 3 GB address-space cap with a 1 MiB gzip body (``MemoryError``), and an endless
stream grew it by ~50-100 MiB a second until the run's deadline — with no ``timeout_ms`` (the
default of ``send``), without end.

Every response of a provider's HTTP client passes ``bound_response`` (an httpx2 response hook, so
proxy transports from the environment are covered too): its body is decoded here by
``tools.net.decoding.BoundedDecoder`` (gzip/deflate, 64 KiB per layer step) and handed on without
``Content-Encoding``; past ``MAX_MODEL_RESPONSE_BYTES`` decoded (or an event-stream line past
``MAX_SSE_LINE_BYTES``), reading fails ``ResponseTooLarge``,
which the providers turn into ``provider_error{status, reason: "too_large"}`` — not ``transport``,
since asking again would bring the same answer.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import httpx2

from kernel.errors import ProviderError
from tools.net.decoding import ACCEPT_ENCODING, BodyTooLarge, BoundedDecoder

# One answer, decoded: a streamed 128k-token reply is ~32 MiB of OpenAI SSE (a JSON chunk per token).
MAX_MODEL_RESPONSE_BYTES = 64 * 1024 * 1024
# One line of an event stream: the SDKs rescan a line's whole buffer for each chunk that extends it,
# so a 64 MiB line held the event loop 41 s (Anthropic's decoder). A real event is one delta.
MAX_SSE_LINE_BYTES = 8 * 1024 * 1024
_DROPPED = ("content-encoding", "content-length")


class ResponseTooLarge(Exception):
    """A model server's answer passed the limit while it was read."""

    def __init__(self, status: int, limit: int, what: str = "answer") -> None:
        super().__init__(f"model API {what} larger than {limit} bytes (HTTP {status})")
        self.status = status
        self.limit = limit
        self.what = what

    def error(self) -> ProviderError:
        return ProviderError(
            f"model API {self.what} larger than {self.limit} bytes: reading it stopped there "
            f"(HTTP {self.status})",
            status=self.status,
            reason="too_large",
        )


def too_large_in(exc: BaseException | None) -> ResponseTooLarge | None:
    """``ResponseTooLarge`` itself, or the one an SDK wrapped (``APIConnectionError from …``)."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, ResponseTooLarge):
            return exc
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None


class _BoundedBody(httpx2.AsyncByteStream):
    def __init__(self, inner: Any, encoding: str, limit: int, status: int, line_limit: int | None) -> None:
        self.inner = inner
        self.encoding = encoding
        self.limit = limit
        self.status = status
        self.line_limit = line_limit  # event streams only
        self.line = 0  # bytes of the event-stream line not yet ended

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            decoder = BoundedDecoder(self.encoding, self.limit)
            async for chunk in self.inner:
                out = decoder.feed(chunk)
                if out:
                    self._check_line(out)
                    yield out
            tail = decoder.finish()
        except BodyTooLarge:
            raise ResponseTooLarge(self.status, self.limit) from None
        except httpx.DecodingError as exc:  # the decoder's own type; the SDKs know httpx2's
            raise httpx2.DecodingError(str(exc)) from None
        if tail:
            self._check_line(tail)
            yield tail

    def _check_line(self, data: bytes) -> None:
        if self.line_limit is None:
            return
        end = max(data.rfind(b"\n"), data.rfind(b"\r"))
        self.line = len(data) - end - 1 if end >= 0 else self.line + len(data)
        if self.line > self.line_limit:
            raise ResponseTooLarge(self.status, self.line_limit, "event-stream line")

    async def aclose(self) -> None:
        await self.inner.aclose()


def response_hook(
    limit: int = MAX_MODEL_RESPONSE_BYTES, line_limit: int = MAX_SSE_LINE_BYTES
) -> Callable[[httpx2.Response], Any]:
    async def bound_response(response: httpx2.Response) -> None:
        encoding = response.headers.get("content-encoding", "")
        events = response.headers.get("content-type", "").lower().startswith("text/event-stream")
        response.stream = _BoundedBody(
            response.stream, encoding, limit, response.status_code, line_limit if events else None
        )
        if encoding:  # decoded here: httpx2 must not decode again, and the length no longer holds
            for name in _DROPPED:
                response.headers.pop(name, None)

    return bound_response


def bounded_http_client(factory: Callable[..., Any], limit: int = MAX_MODEL_RESPONSE_BYTES) -> Any:
    """The SDK's own default client (``factory``: ``openai.DefaultAsyncHttpxClient`` …) with the bound."""
    return factory(
        event_hooks={"response": [response_hook(limit)]},
        headers={"Accept-Encoding": ACCEPT_ENCODING},
    )
