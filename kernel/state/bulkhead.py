"""Bulkheads (W-4): leased counting semaphores and the in-memory implementation; see the package docstring."""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from typing import Protocol

from kernel.clock import Clock, IdFactory, RandomIds, SystemClock
from kernel.errors import InvalidArgument, Timeout, Transport
from kernel.state.limits import BULKHEAD_LEASE_MS, POLL_MAX_S, POLL_MIN_S


@dataclass(frozen=True, slots=True)
class Lease:
    name: str
    lease_id: str
    limit: int
    expires_at_ms: int
    wait_ms: int = 0


def check_bulkhead_args(name: str, limit: int, lease_ms: int) -> None:
    if not name:
        raise InvalidArgument("bulkhead name must not be empty")
    if limit < 1:
        raise InvalidArgument(f"bulkhead limit must be >= 1, got {limit}")
    if lease_ms < 1:
        raise InvalidArgument(f"bulkhead lease_ms must be >= 1, got {lease_ms}")


class Bulkheads(Protocol):
    def try_acquire(self, name: str, limit: int, *, lease_ms: int = BULKHEAD_LEASE_MS) -> Lease | None: ...

    async def acquire(
        self, name: str, limit: int, timeout_s: float, *, lease_ms: int = BULKHEAD_LEASE_MS
    ) -> Lease: ...

    def acquire_blocking(
        self, name: str, limit: int, timeout_s: float, *, lease_ms: int = BULKHEAD_LEASE_MS
    ) -> Lease: ...

    def renew(self, lease: Lease, *, lease_ms: int = BULKHEAD_LEASE_MS) -> Lease | None: ...

    def release(self, lease: Lease) -> bool: ...

    def holders(self, name: str) -> int: ...


def _next_delay(delay: float) -> float:
    # Jitter keeps many pollers in different processes from retrying in lockstep.
    return min(delay * 2, POLL_MAX_S) * (0.5 + random.random() / 2)


class BulkheadBase(ABC):
    """Waiting, blocking and scoped holding, built on a back end's atomic ``try_acquire``."""

    @abstractmethod
    def try_acquire(self, name: str, limit: int, *, lease_ms: int = BULKHEAD_LEASE_MS) -> Lease | None:
        """Admit one holder now (atomically) or answer None; never over-admits."""

    @abstractmethod
    def renew(self, lease: Lease, *, lease_ms: int = BULKHEAD_LEASE_MS) -> Lease | None:
        """Extend a live lease; None when it already expired (its permit was freed)."""

    @abstractmethod
    def release(self, lease: Lease) -> bool:
        """Free the permit; False when the lease had already expired."""

    def _attempt(
        self,
        name: str,
        limit: int,
        timeout_s: float,
        lease_ms: int,
        elapsed: Callable[[], float],
        delay: float,
    ) -> Lease | float:
        """One admission attempt: the lease (with its wait), or how long to sleep before the next."""
        lease = self.try_acquire(name, limit, lease_ms=lease_ms)
        waited = elapsed()
        if lease is not None:
            return replace(lease, wait_ms=int(waited * 1000))
        if waited >= timeout_s:
            raise Timeout(
                f"bulkhead {name!r} full ({limit} holders) for {timeout_s:.3f}s",
                op="bulkhead",
                duration_ms=int(waited * 1000),
            )
        return min(delay, max(timeout_s - waited, 0.0))

    async def acquire(
        self, name: str, limit: int, timeout_s: float, *, lease_ms: int = BULKHEAD_LEASE_MS
    ) -> Lease:
        loop = asyncio.get_running_loop()
        start = loop.time()
        delay = POLL_MIN_S
        while True:
            step = self._attempt(name, limit, timeout_s, lease_ms, lambda: loop.time() - start, delay)
            if isinstance(step, Lease):
                return step
            await asyncio.sleep(step)
            delay = _next_delay(delay)

    def acquire_blocking(
        self, name: str, limit: int, timeout_s: float, *, lease_ms: int = BULKHEAD_LEASE_MS
    ) -> Lease:
        start = time.monotonic()
        delay = POLL_MIN_S
        while True:
            step = self._attempt(name, limit, timeout_s, lease_ms, lambda: time.monotonic() - start, delay)
            if isinstance(step, Lease):
                return step
            time.sleep(step)
            delay = _next_delay(delay)

    @contextlib.asynccontextmanager
    async def hold(
        self, name: str, limit: int, timeout_s: float, *, lease_ms: int = BULKHEAD_LEASE_MS
    ) -> AsyncIterator[Lease]:
        """Acquire, renew every third of the lease while the body runs, release on any exit."""
        lease = await self.acquire(name, limit, timeout_s, lease_ms=lease_ms)

        async def keep_alive() -> None:
            while True:
                await asyncio.sleep(lease_ms / 3000)
                with contextlib.suppress(Transport):
                    self.renew(lease, lease_ms=lease_ms)

        renewer = asyncio.create_task(keep_alive())
        try:
            yield lease
        finally:
            renewer.cancel()
            await asyncio.gather(renewer, return_exceptions=True)
            with contextlib.suppress(Transport):  # the lease expires on its own
                self.release(lease)


class MemoryBulkheads(BulkheadBase):
    def __init__(self, *, clock: Clock | None = None, new_id: IdFactory | None = None) -> None:
        self._clock = clock or SystemClock()
        self._new_id = new_id or RandomIds()
        self._lock = threading.Lock()
        self._leases: dict[str, dict[str, int]] = {}  # name -> lease id -> expiry (ms)

    def _live(self, name: str, now: int) -> dict[str, int]:
        live = {k: exp for k, exp in self._leases.get(name, {}).items() if exp > now}
        self._leases[name] = live
        return live

    def try_acquire(self, name: str, limit: int, *, lease_ms: int = BULKHEAD_LEASE_MS) -> Lease | None:
        check_bulkhead_args(name, limit, lease_ms)
        now = self._clock.now_ms()
        with self._lock:
            live = self._live(name, now)
            if len(live) >= limit:
                return None
            lease_id = self._new_id("lease")
            live[lease_id] = now + lease_ms
            return Lease(name, lease_id, limit, now + lease_ms)

    def renew(self, lease: Lease, *, lease_ms: int = BULKHEAD_LEASE_MS) -> Lease | None:
        now = self._clock.now_ms()
        with self._lock:
            live = self._live(lease.name, now)
            if lease.lease_id not in live:
                return None
            live[lease.lease_id] = now + lease_ms
            return replace(lease, expires_at_ms=now + lease_ms)

    def release(self, lease: Lease) -> bool:
        with self._lock:
            return self._leases.get(lease.name, {}).pop(lease.lease_id, None) is not None

    def holders(self, name: str) -> int:
        with self._lock:
            return len(self._live(name, self._clock.now_ms()))
