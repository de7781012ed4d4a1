"""Disk writes off the event loop, overlapping the network (SPEC D-4; ``bench/network.py``).

Received chunks are handed to one background thread that ``pwrite``s them at their offsets and
feeds the running SHA-256, in submission order (one thread, FIFO), while the event loop goes back
to the socket. At most ``MAX_PENDING`` chunks are in flight (back-pressure: the reader waits for
the oldest write). A write error surfaces on the next ``write`` or on ``drain``. ``close`` waits
for the thread to finish its current chunk — the file descriptor is only closed after that. Every
``KICK_BYTES`` written are handed to the disk right away (``writeback.py``), so the fsync before
promotion has little left to do.
"""

from __future__ import annotations

import asyncio
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tools.download.staging import Staging
from tools.download.writeback import Writeback

MAX_PENDING = 8


class Writer:
    def __init__(self, stage: Staging) -> None:
        self.stage = stage
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="a3s-download-write")
        self._pending: deque[asyncio.Future[None]] = deque()
        self.writeback: Writeback | None = None  # the writer thread's own (the temp file comes later)

    def _write(self, chunk: bytes, offset: int, hasher: Any) -> None:
        self.stage.write_at(chunk, offset)
        if self.writeback is None or self.writeback.fd != self.stage.fd:
            self.writeback = Writeback(self.stage.fd)
        self.writeback.wrote(offset, len(chunk))
        if hasher is not None:
            hasher.update(chunk)  # hashlib releases the GIL on large buffers

    async def write(self, chunk: bytes, offset: int, hasher: Any = None) -> None:
        while len(self._pending) >= MAX_PENDING:
            await self._pending.popleft()
        loop = asyncio.get_running_loop()
        self._pending.append(loop.run_in_executor(self._pool, self._write, chunk, offset, hasher))

    async def drain(self) -> None:
        """Wait for every submitted chunk to be written (raising the first write error)."""
        while self._pending:
            await self._pending.popleft()

    def close(self) -> None:
        """Stop accepting work and wait for the chunk being written (never leaves a write running)."""
        self._pending.clear()
        self._pool.shutdown(wait=True, cancel_futures=True)
