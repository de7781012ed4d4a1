"""Blocking work in the default executor that a cancelled call can walk away from.

A call awaits the executor's future through ``asyncio.shield`` so that a timeout or a cancel does
not pretend to stop a thread. The thread then ends on its own — usually by raising the
``Cancelled``/``Timeout`` its stop flag asks for — into a future nobody awaits any more, and
asyncio logs "Future exception was never retrieved" when that future is collected. ``abandon``
retrieves the outcome when it arrives, so a stopped call leaves nothing behind in the log.
"""

from __future__ import annotations

import asyncio
from typing import Any


def abandon(fut: asyncio.Future[Any]) -> None:
    """Nobody will await ``fut`` again: retrieve its outcome (now or when it ends), never log it."""
    fut.add_done_callback(_retrieve)


def _retrieve(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled():
        fut.exception()
