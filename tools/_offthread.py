"""Blocking work in the default executor that a cancelled call can walk away from.

A call awaits the executor's future through ``asyncio.shield`` so that a timeout or a cancel does
not pretend to stop a thread. The thread then ends on its own — usually by raising the
``Cancelled``/``Timeout`` its stop flag asks for — into a future nobody awaits any more, and
asyncio logs "Future exception was never retrieved" when that future is collected. ``abandon``
retrieves the outcome when it arrives, so a stopped call leaves nothing behind in the log;
``stoppable`` runs a function that way with a stop flag it can poll.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def abandon(fut: asyncio.Future[Any]) -> None:
    """Nobody will await ``fut`` again: retrieve its outcome (now or when it ends), never log it."""
    fut.add_done_callback(_retrieve)


def _retrieve(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled():
        fut.exception()


async def stoppable(cancelled: threading.Event, fn: Callable[[Callable[[], bool]], T]) -> T:
    """``fn(stopped)`` in the default executor, off the event loop; ``stopped()`` turns true when
    the call is cancelled (``cancelled``: the call's ``ctx.cancelled``) or the awaiting task is
    (a deadline, a closed session), so a loop in ``fn`` that asks it ends soon after. The caller
    returns at once on cancellation; the thread's outcome is then retrieved, never logged."""
    stop = threading.Event()

    def stopped() -> bool:
        return stop.is_set() or cancelled.is_set()

    fut = asyncio.get_running_loop().run_in_executor(None, fn, stopped)
    try:
        return await asyncio.shield(fut)
    except asyncio.CancelledError:
        stop.set()
        abandon(fut)
        raise
