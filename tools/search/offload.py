"""Blocking search work off the event loop, stoppable, and the session's bm25 cache.

Scans (ripgrep, file walks, scoring, embedding) are blocking: ``in_thread`` runs one in the default
executor with a ``grep.Guard`` bound to the call's deadline and to a stop flag that is set by the
call's own ``ctx.cancelled`` *or* by cancelling the awaiting task — so a timeout or a cancel stops
the scan (and kills ripgrep's process group) instead of leaving it running behind the result.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from kernel.context import ToolContext
from tools._offthread import abandon
from tools.search import grep

if TYPE_CHECKING:
    from tools.search import bm25

T = TypeVar("T")
CANCEL_SETTLE_S = 2.0  # a cancelled scan gets this long to notice its stop flag


class _Either:
    """An Event-like view that is set when the call's own event or our local one is set."""

    def __init__(self, outer: threading.Event) -> None:
        self.outer = outer
        self.local = threading.Event()

    def is_set(self) -> bool:
        return self.outer.is_set() or self.local.is_set()


async def in_thread(ctx: ToolContext, op: str, fn: Callable[[grep.Guard], T]) -> T:
    stop = _Either(ctx.cancelled)
    guard = grep.Guard(ctx.remaining_s(), stop, op)  # type: ignore[arg-type]
    fut = asyncio.get_running_loop().run_in_executor(None, fn, guard)
    try:
        return await asyncio.shield(fut)
    except asyncio.CancelledError:
        stop.local.set()
        abandon(fut)  # the stopped scan's Cancelled/Timeout is retrieved, not logged as stray
        await asyncio.wait([fut], timeout=CANCEL_SETTLE_S)
        raise


def bm25_cache(ctx: ToolContext) -> bm25.Bm25Cache:
    """The session's bm25 corpus cache (keyed by content digests inside, so never stale)."""
    from tools.search import bm25, bm25_mode  # numpy: imported by the first bm25 query, not at start-up

    cache = ctx.session_state.get(bm25_mode.SESSION_KEY)
    if not isinstance(cache, bm25.Bm25Cache):
        cache = ctx.session_state.setdefault(bm25_mode.SESSION_KEY, bm25.Bm25Cache())
    return cache
