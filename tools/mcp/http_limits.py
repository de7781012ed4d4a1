"""Bounded replies from a streamable-HTTP MCP server (SPEC M-1; the stdio bound's twin).

The SDK reads an ``application/json`` reply whole (``response.aread()``), and httpx2 undoes its
``Content-Encoding`` chunk by chunk without a bound: a hostile server's few kilobytes of gzip on
gzip took this process from 55 MiB to 2 GiB, and larger ones would not stop there. stdio lines are
capped at ``MAX_MESSAGE_BYTES`` (``stdio.py``); ``BoundedTransport`` gives HTTP the same cap:

- every body is decoded here with ``tools.net.decoding.BoundedDecoder`` (gzip/deflate, 64 KiB per
  layer step) and handed on without ``Content-Encoding``, so httpx2 never inflates anything; an
  encoding we do not undo is passed on raw (and fails to parse), never decoded unbounded;
- a JSON reply past ``MAX_MESSAGE_BYTES`` decoded is a read error: the call fails ``transport`` and
  the connection is restarted on the next call, as for a stdio line;
- an event stream is decoded the same way without a total (it may stay open for hours); the SDK
  bounds each of its events (``max_sse_event_size``).
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from typing import Any

import httpx2

from tools.mcp.stdio import MAX_MESSAGE_BYTES
from tools.net.decoding import ACCEPT_ENCODING, BodyTooLarge, BoundedDecoder

_DROPPED = ("content-encoding", "content-length")


class _BoundedBody(httpx2.AsyncByteStream):
    def __init__(self, inner: Any, encoding: str, limit: int) -> None:
        self.inner = inner
        self.encoding = encoding
        self.limit = limit

    async def __aiter__(self) -> AsyncIterator[bytes]:
        decoder = BoundedDecoder(self.encoding, self.limit)
        try:
            async for chunk in self.inner:
                out = decoder.feed(chunk)
                if out:
                    yield out
            tail = decoder.finish()
        except BodyTooLarge:
            raise httpx2.ReadError(f"MCP reply larger than {self.limit} bytes") from None
        if tail:
            yield tail

    async def aclose(self) -> None:
        await self.inner.aclose()


class BoundedTransport(httpx2.AsyncBaseTransport):
    def __init__(self, inner: httpx2.AsyncBaseTransport, limit: int = MAX_MESSAGE_BYTES) -> None:
        self.inner = inner
        self.limit = limit

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self.inner.handle_async_request(request)
        encoding = response.headers.get("content-encoding", "")
        stream = response.headers.get("content-type", "").lower().startswith("text/event-stream")
        headers = [(k, v) for k, v in response.headers.multi_items() if k.lower() not in _DROPPED]
        if not encoding and "content-length" in response.headers:
            headers.append(("content-length", response.headers["content-length"]))
        return httpx2.Response(
            response.status_code,
            headers=headers,
            stream=_BoundedBody(response.stream, encoding, sys.maxsize if stream else self.limit),
            extensions=response.extensions,
            request=request,
        )

    async def aclose(self) -> None:
        await self.inner.aclose()


def bounded_client(headers: dict[str, str] | None) -> httpx2.AsyncClient:
    """The SDK's client (its timeouts, no redirects) on a ``BoundedTransport``."""
    from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT

    return httpx2.AsyncClient(
        timeout=httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT),
        headers={"Accept-Encoding": ACCEPT_ENCODING, **(headers or {})},
        transport=BoundedTransport(httpx2.AsyncHTTPTransport()),
    )
