"""The bytes one rendered page may have the headless tier fetch for it (SPEC W-4, D-3; docs/network.md).

Each request the page makes is fetched by this process (``browser.BrowserPool._route``) and read
whole, up to 5 MiB, before Chromium gets it. Nothing bounded the sum: a hostile page of a few
hundred ``<script src>`` tags had hundreds of 5 MiB bodies read for it.

Invariants:

- a request *reserves* what it may read (the per-request cap, or what is left of the budget if
  less) before it is fetched, and settles what it used after; reservations plus spent bytes never
  exceed ``total``, so concurrent requests cannot overshoot together either;
- a request that finds the budget reserved but not spent waits for the others to settle (a page
  of many small scripts is slowed, not refused); one that finds it spent gets 0: refuse it;
- everything runs on the one event loop that drives Playwright: no lock is needed.
"""

from __future__ import annotations

import asyncio


class ByteBudget:
    def __init__(self, total: int) -> None:
        self.total = total
        self.spent = 0
        self.reserved = 0
        self.refused = 0
        self._settled = asyncio.Event()

    async def reserve(self, cap: int) -> int:
        """Bytes this request may read (at most ``cap``); 0 once the budget is spent."""
        while True:
            left = self.total - self.spent
            want = min(cap, left)
            if want <= 0:
                self.refused += 1
                return 0
            if self.reserved + want <= left:
                self.reserved += want
                return want
            settled = self._settled
            await settled.wait()

    def settle(self, reserved: int, used: int) -> None:
        """Give back a reservation, ``used`` bytes of it spent."""
        self.reserved -= reserved
        self.spent += min(used, reserved)
        self._settled.set()  # wake every waiter once; later ones wait on a fresh event
        self._settled = asyncio.Event()
