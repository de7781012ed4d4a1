"""The ``Provider`` protocol and what every SDK-backed provider shares (SPEC G-6, A-3).

A provider turns a ``ModelRequest`` into a stream of ``TextDelta`` / ``ToolCallDelta`` items ending
in exactly one ``Completion`` (merged tool calls + usage). ``complete()`` drains that stream.

Deadlines: each await on the wire is bounded by the request's deadline (``time.monotonic()``: the
run's, or the request ceiling of ``time_bounds.py`` when earlier), so a server that stops sending or
trickles mid-stream cannot hold a run past it; the SDK's own timeout is the idle bound, never more
than the time left. Retries are *not* done here: the SDK clients are built with ``max_retries=0`` and
the agent loop retries typed failures (bounded, visible as ``model_retry`` events).
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol, TypeVar, runtime_checkable

from flows.providers.errors import timeout_error
from flows.providers.types import Completion, ModelRequest, ProviderFeatures, StreamItem

T = TypeVar("T")


@runtime_checkable
class Provider(Protocol):
    name: str  # "openai:NAME" — the only thing snapshots, jobs and events carry
    features: ProviderFeatures

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]: ...

    async def complete(self, request: ModelRequest) -> Completion: ...


async def drain(stream: AsyncIterator[StreamItem]) -> Completion:
    """The ``Completion`` that ends ``stream`` (deltas are dropped)."""
    final: Completion | None = None
    async for item in stream:
        if isinstance(item, Completion):
            final = item
    if final is None:
        raise RuntimeError("provider stream ended without a completion")
    return final


def seconds_left(deadline: float, started: float) -> float:
    """Seconds until ``deadline``; raises the typed timeout when it already passed."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise timeout_error(started)
    return left


async def before_deadline(aw: Awaitable[T], deadline: float, started: float) -> T:
    """``await aw`` bounded by ``deadline``; past it, the typed ``timeout{op: "model"}``."""
    try:
        async with asyncio.timeout(seconds_left(deadline, started)):
            return await aw
    except TimeoutError:
        raise timeout_error(started) from None


class ClientsPerLoop:
    """One SDK client per event loop: an HTTP connection pool belongs to the loop that opened it, and
    a provider is shared by every session of the process (each ``Agent`` has its own loop thread)."""

    def __init__(self, factory: Callable[[], Any]) -> None:
        self._factory = factory
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = weakref.WeakKeyDictionary()

    def get(self) -> Any:
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            client = self._clients[loop] = self._factory()
        return client
