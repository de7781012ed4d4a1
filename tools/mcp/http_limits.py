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
  bounds each of its events (``max_sse_event_size``);
- a JSON reply to a request must be a response: the SDK hands whatever JSON-RPC message the body
  holds to the session, so a notification or a request sent back in its place left the call
  pending until its deadline (a silent hang, like the garbage ``tools.mcp.guard`` ends). The body
  fails to read with ``NotAResponse`` (a ``StreamError``, which the SDK ties to that call as an
  unparsable reply), so that call fails ``transport`` at once, naming what came back.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from typing import Any

import httpx2

from tools.mcp.guard import excerpt
from tools.mcp.stdio import MAX_MESSAGE_BYTES
from tools.net.decoding import ACCEPT_ENCODING, BodyTooLarge, BoundedDecoder

_DROPPED = ("content-encoding", "content-length")


NOT_A_RESPONSE = "instead of a response"


class NotAResponse(httpx2.StreamError):
    """A JSON reply to a request that holds another kind of JSON-RPC message."""


class _BoundedBody(httpx2.AsyncByteStream):
    def __init__(self, inner: Any, encoding: str, limit: int, answers: bool = False) -> None:
        self.inner = inner
        self.encoding = encoding
        self.limit = limit
        self.answers = answers  # a JSON reply to a request: it must be a response

    async def __aiter__(self) -> AsyncIterator[bytes]:
        decoder = BoundedDecoder(self.encoding, self.limit)
        held: list[bytes] = []  # an answer is handed on only once it is known to be one
        try:
            async for chunk in self.inner:
                out = decoder.feed(chunk)
                if out and self.answers:
                    held.append(out)
                elif out:
                    yield out
            tail = decoder.finish()
        except BodyTooLarge:
            raise httpx2.ReadError(f"MCP reply larger than {self.limit} bytes") from None
        if self.answers:
            body = b"".join([*held, tail])
            instead = not_a_response(body)
            if instead is not None:
                raise NotAResponse(f"the server answered with {instead} {NOT_A_RESPONSE}: {excerpt(body)}")
            tail = body
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
        ctype = response.headers.get("content-type", "").lower()
        stream = ctype.startswith("text/event-stream")
        answers = ctype.startswith("application/json") and _is_request(request)
        headers = [(k, v) for k, v in response.headers.multi_items() if k.lower() not in _DROPPED]
        if not encoding and "content-length" in response.headers:
            headers.append(("content-length", response.headers["content-length"]))
        return httpx2.Response(
            response.status_code,
            headers=headers,
            stream=_BoundedBody(response.stream, encoding, sys.maxsize if stream else self.limit, answers),
            extensions=response.extensions,
            request=request,
        )

    async def aclose(self) -> None:
        await self.inner.aclose()


def _is_request(request: httpx2.Request) -> bool:
    """A POST carrying a JSON-RPC request (``method`` and ``id``): its JSON reply is its answer."""
    if request.method != "POST":
        return False
    try:
        message = json.loads(request.content)
    except (ValueError, httpx2.RequestNotRead):
        return False
    return isinstance(message, dict) and "method" in message and message.get("id") is not None


def not_a_response(body: bytes) -> str | None:
    """What a reply holds instead of a response ("a notification", "a request"), or None when it is
    a response — or not JSON-RPC at all, which the SDK already ties to its call as a parse error."""
    try:
        message = json.loads(body)
    except ValueError:
        return None
    if isinstance(message, dict) and isinstance(message.get("method"), str):
        return "a request" if "id" in message else "a notification"
    return None


def bounded_client(headers: dict[str, str] | None) -> httpx2.AsyncClient:
    """The SDK's client (its timeouts, no redirects) on a ``BoundedTransport``."""
    from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT

    return httpx2.AsyncClient(
        timeout=httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT),
        headers={"Accept-Encoding": ACCEPT_ENCODING, **(headers or {})},
        transport=BoundedTransport(httpx2.AsyncHTTPTransport()),
    )
