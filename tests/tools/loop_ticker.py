"""How long the event loop went without serving anything while some work ran on it (SPEC K-6).

``while_ticking(start)`` runs a 10 ms ticker on the running loop, then awaits ``start()``; it
returns the work's result and the longest gap the ticker saw meanwhile. Work done on the loop's
thread shows as a gap as long as the work; work handed to a thread does not.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")
TICK_S = 0.01


async def while_ticking(start: Callable[[], Awaitable[T]]) -> tuple[T, float]:
    loop = asyncio.get_running_loop()
    done = asyncio.Event()
    gaps: list[float] = []

    async def tick() -> None:
        last = loop.time()
        while not done.is_set():
            await asyncio.sleep(TICK_S)
            now = loop.time()
            gaps.append(now - last)
            last = now

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(TICK_S * 2)  # the ticker is running before the work starts
    try:
        result = await start()
    finally:
        done.set()
        await ticker
    return result, max(gaps)
