"""Injected time and ids (CONVENTIONS §11): tools never call ``time.time()`` or ``uuid4()`` directly."""

from __future__ import annotations

import itertools
import os
import time
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int:
        """Wall-clock milliseconds since the epoch (timestamps in events and records)."""
        ...

    def monotonic(self) -> float:
        """Seconds on a monotonic clock (deadlines, durations)."""
        ...


class SystemClock:
    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic(self) -> float:
        return time.monotonic()


class IdFactory(Protocol):
    def __call__(self, prefix: str) -> str: ...


class RandomIds:
    """Unique ids: a random process prefix plus a counter (cheap enough for 10k calls/s)."""

    def __init__(self) -> None:
        self._prefix = os.urandom(6).hex()
        self._counter = itertools.count(1)

    def __call__(self, prefix: str) -> str:
        return f"{prefix}-{self._prefix}-{next(self._counter)}"
