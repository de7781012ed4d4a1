"""Garbage from an MCP server ends its connection at once instead of hanging its calls (SPEC M-1, K-8).

The SDK's dispatcher drops what it cannot use: a transport's parse error (a stdout line that is not
JSON, JSON that is no JSON-RPC message, an error object of the wrong shape) goes to the session's
``message_handler``, which ignores it, and a response whose id no request has is dropped with a
debug log. When that was the answer to a pending call, the call waited for its deadline (600 s by
default) and the user saw a silent hang.

``ProtocolGuard`` sits between a transport's streams and ``mcp.ClientSession`` (one guard per
connection generation, stdio and HTTP alike). It records the ids of the requests that go out and
inspects what comes in. A *fault* is:

- an ``Exception`` item (the transport could not parse a message);
- a response or error whose id no request of this connection ever had (ids are kept for the last
  ``ISSUED_IDS_KEPT`` requests; a late answer to a cancelled or timed-out call is *not* a fault —
  the SDK drops it);
- an error with ``id: null`` (the server could not tie it to a request, so the pending one would
  never be answered).

On the first fault the guard records one bounded line saying what the server sent
(``MAX_EXCERPT_CHARS`` of it, never the whole message), calls ``on_fault`` (the connection marks
itself dead and stops the server) and ends the read stream: the dispatcher then fails every
pending request with ``CONNECTION_CLOSED`` at once, and the connection turns that into
``transport{op}`` carrying the guard's line. Notifications of any method, requests from the server
and well-formed responses pass untouched.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from types import TracebackType
from typing import Any

import anyio
import mcp_types as types
from mcp.shared.dispatcher import coerce_request_id
from mcp.shared.message import SessionMessage

MAX_EXCERPT_CHARS = 200
ISSUED_IDS_KEPT = 4096


class MalformedMessage(ValueError):
    """A message a transport could not parse, with a bounded excerpt of what it received."""

    def __init__(self, raw: bytes | str, reason: str) -> None:
        self.excerpt = excerpt(raw)
        super().__init__(f"{reason}: {self.excerpt}")


def excerpt(raw: bytes | str) -> str:
    """At most ``MAX_EXCERPT_CHARS`` of ``raw`` as a one-line quoted string (control characters escaped)."""
    text = raw[: MAX_EXCERPT_CHARS * 4].decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    cut = text[:MAX_EXCERPT_CHARS].strip()
    if len(raw) <= MAX_EXCERPT_CHARS:
        return repr(cut)
    return f"{cut!r} …[{len(raw)} {'bytes' if isinstance(raw, bytes) else 'characters'} in all]"


class ProtocolGuard:
    def __init__(self, on_fault: Callable[[str], None]) -> None:
        self.fault: str | None = None
        self._on_fault = on_fault
        self._issued: OrderedDict[Any, None] = OrderedDict()

    def wrap(self, read_stream: Any, write_stream: Any) -> tuple[GuardedRead, GuardedWrite]:
        return GuardedRead(read_stream, self), GuardedWrite(write_stream, self)

    def issued(self, message: SessionMessage) -> None:
        if isinstance(message.message, types.JSONRPCRequest):
            self._issued[coerce_request_id(message.message.id)] = None
            if len(self._issued) > ISSUED_IDS_KEPT:
                self._issued.popitem(last=False)

    def inspect(self, item: SessionMessage | Exception) -> str | None:
        """Why ``item`` is a fault, or None when it may go on to the session."""
        if isinstance(item, Exception):
            if isinstance(item, MalformedMessage):
                return f"sent a message that is not JSON-RPC: {item.excerpt}"
            first = str(item).strip().splitlines()[:1] or [type(item).__name__]
            return f"sent a message that could not be read: {excerpt(first[0])}"
        msg = item.message
        if isinstance(msg, types.JSONRPCError) and msg.id is None:
            return f"sent an error tied to no request: {excerpt(f'{msg.error.code} {msg.error.message}')}"
        if isinstance(msg, (types.JSONRPCResponse, types.JSONRPCError)):
            if msg.id is not None and coerce_request_id(msg.id) not in self._issued:
                return f"answered a request it was never sent (id {excerpt(str(msg.id))})"
        return None

    def trip(self, reason: str) -> None:
        if self.fault is None:
            self.fault = reason
            self._on_fault(reason)


class GuardedRead:
    """The read stream ``ClientSession`` sees: ends (EOF) at the first fault."""

    def __init__(self, inner: Any, guard: ProtocolGuard) -> None:
        self._inner = inner
        self._guard = guard

    @property
    def last_context(self) -> Any:  # the dispatcher reads it duck-typed (HTTP's context streams)
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        if self._guard.fault is not None:
            raise anyio.EndOfStream
        item: SessionMessage | Exception = await self._inner.receive()
        reason = self._guard.inspect(item)
        if reason is not None:
            self._guard.trip(reason)
            raise anyio.EndOfStream
        return item

    def __aiter__(self) -> GuardedRead:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> GuardedRead:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


class GuardedWrite:
    """The write stream ``ClientSession`` sees: records each request's id before it goes out."""

    def __init__(self, inner: Any, guard: ProtocolGuard) -> None:
        self._inner = inner
        self._guard = guard

    async def send(self, item: SessionMessage, /) -> None:
        self._guard.issued(item)
        await self._inner.send(item)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> GuardedWrite:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()
