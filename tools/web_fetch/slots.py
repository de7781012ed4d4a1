"""How many HTML conversions of this process run at once (SPEC W-6, K-6; docs/network.md).

Each conversion runs in a child allowed 2 GiB of address space and 150 s of CPU
(``convert_child.py``). Nothing bounded how many ran together: a ``batch`` of 32 ``web_fetch``
calls, or 32 sub-agents, started 32 children — 64 GiB of allowed address space on a 2-core host.

Invariants:

- at most ``limit`` callers hold a slot at a time, whichever event loop (session) they run on;
  the rest wait in arrival order, at most ``max_waiting`` of them — one more fails at once with
  ``transport{op}`` ("busy") instead of queueing without bound;
- a waiter that is cancelled (the call's deadline, a session closing) leaves the queue and owns
  nothing: a slot handed to it at that very moment is passed on to the next waiter, never lost;
- a slot is handed over under one lock (``granted`` is set there), so ``holding`` never exceeds
  ``limit`` and the peak is recorded for the tests.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
from collections.abc import AsyncIterator

from kernel.errors import Transport


class _Waiter:
    __slots__ = ("fut", "granted", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.fut: asyncio.Future[None] = loop.create_future()
        self.granted = False


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class Slots:
    """A bounded, loop-agnostic semaphore with a bounded FIFO queue of waiters."""

    def __init__(self, limit: int, max_waiting: int) -> None:
        self.limit = limit
        self.max_waiting = max_waiting
        self.holding = 0
        self.peak = 0
        self._waiters: collections.deque[_Waiter] = collections.deque()
        self._lock = threading.Lock()

    @property
    def waiting(self) -> int:
        with self._lock:
            return len(self._waiters)

    @contextlib.asynccontextmanager
    async def hold(self, op: str) -> AsyncIterator[None]:
        await self._acquire(op)
        try:
            yield
        finally:
            self._release()

    async def _acquire(self, op: str) -> None:
        with self._lock:
            if self.holding < self.limit and not self._waiters:
                self._take()
                return
            if len(self._waiters) >= self.max_waiting:
                raise Transport(
                    f"{op}: this process is busy converting pages ({self.limit} running, "
                    f"{len(self._waiters)} waiting); try again later",
                    op=op,
                )
            waiter = _Waiter(asyncio.get_running_loop())
            self._waiters.append(waiter)
        try:
            await waiter.fut
        except BaseException:  # cancelled while queued (deadline, session closed)
            with self._lock:
                if not waiter.granted:
                    self._waiters.remove(waiter)
                    raise
            self._release()  # a slot reached us as we were cancelled: pass it on
            raise

    def _take(self) -> None:
        self.holding += 1
        self.peak = max(self.peak, self.holding)

    def _release(self) -> None:
        with self._lock:
            self.holding -= 1
            if not self._waiters:
                return
            waiter = self._waiters.popleft()
            waiter.granted = True
            self._take()
        with contextlib.suppress(RuntimeError):  # its loop closed: its caller is gone
            waiter.loop.call_soon_threadsafe(_wake, waiter.fut)
            return
        self._release()
