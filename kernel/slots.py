"""``Slots``: the counting semaphore behind the kernel's concurrency limits (SPEC K-3, stage 8).

A session limits its concurrent top-level calls and each tool its concurrent calls. Calls normally
run as tasks on the agent's event loop, but a synchronous ``session.tool(...)`` of a plain host
tool runs on the caller's own thread (``Kernel.invoke_host_inline``): both kinds of call count
against the same limits. ``asyncio.Semaphore`` is not thread-safe, so this one keeps its count under
a lock and wakes a waiting task through that task's loop.

Invariants: ``try_acquire`` never waits and never overtakes a queued waiter (it fails while anyone
waits); ``acquire`` waits first-in, first-out; ``release`` hands the slot straight to the oldest
waiter (the count stays taken), and a waiter cancelled after it was handed a slot passes it on, so
no slot is ever lost or counted twice. A ``max_waiting`` bounds the queue: one caller more is
refused at once with ``QueueFull`` instead of waiting.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque


class QueueFull(Exception):
    """Every slot is taken and ``max_waiting`` callers already wait."""


class _Waiter:
    __slots__ = ("future", "granted")

    def __init__(self, future: asyncio.Future[None]) -> None:
        self.future = future
        self.granted = False


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class Slots:
    __slots__ = ("_free", "_lock", "_waiters", "limit", "max_waiting")

    def __init__(self, limit: int, max_waiting: int | None = None) -> None:
        if limit < 1:
            raise ValueError(f"a slot limit must be at least 1, got {limit}")
        self.limit = limit
        self.max_waiting = max_waiting
        self._free = limit
        self._lock = threading.Lock()
        self._waiters: deque[_Waiter] = deque()

    @property
    def in_use(self) -> int:
        return self.limit - self._free

    @property
    def waiting(self) -> int:
        with self._lock:
            return len(self._waiters)

    def try_acquire(self) -> bool:
        """Take a slot now, or return False (a free slot with callers queued for it is theirs)."""
        with self._lock:
            if self._free > 0 and not self._waiters:
                self._free -= 1
                return True
            return False

    async def acquire(self) -> None:
        with self._lock:
            if self._free > 0 and not self._waiters:
                self._free -= 1
                return
            if self.max_waiting is not None and len(self._waiters) >= self.max_waiting:
                raise QueueFull(f"{self.limit} running, {len(self._waiters)} waiting")
            waiter = _Waiter(asyncio.get_running_loop().create_future())
            self._waiters.append(waiter)
        try:
            await waiter.future
        except asyncio.CancelledError:
            with self._lock:
                granted = waiter.granted
                if not granted:
                    self._waiters.remove(waiter)
            if granted:
                self.release()  # handed a slot while being cancelled: pass it on
            raise

    def release(self) -> None:
        with self._lock:
            while self._waiters:
                waiter = self._waiters.popleft()
                waiter.granted = True
                try:
                    waiter.future.get_loop().call_soon_threadsafe(_wake, waiter.future)
                except RuntimeError:  # its loop is closed: nobody will ever wake there
                    continue
                return
            self._free += 1
