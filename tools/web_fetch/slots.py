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
- the queue and the hand-over are the kernel's own semaphore (``kernel.slots.Slots``, thread-safe
  and FIFO, with a bounded queue); this adds the ``transport`` refusal and records the peak for the
  tests.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import AsyncIterator

from kernel import slots
from kernel.errors import Transport


class Slots:
    """The conversions' slots: at most ``limit`` held, at most ``max_waiting`` queued."""

    def __init__(self, limit: int, max_waiting: int) -> None:
        self.limit = limit
        self.max_waiting = max_waiting
        self.peak = 0
        self._slots = slots.Slots(limit, max_waiting)
        self._peak_lock = threading.Lock()

    @property
    def holding(self) -> int:
        return self._slots.in_use

    @property
    def waiting(self) -> int:
        return self._slots.waiting

    @contextlib.asynccontextmanager
    async def hold(self, op: str) -> AsyncIterator[None]:
        try:
            await self._slots.acquire()
        except slots.QueueFull as exc:
            raise Transport(
                f"{op}: this process is busy converting pages ({exc}); try again later", op=op
            ) from None
        with self._peak_lock:
            self.peak = max(self.peak, self._slots.in_use)
        try:
            yield
        finally:
            self._slots.release()
