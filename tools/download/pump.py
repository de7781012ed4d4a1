"""A raw response body from its socket to the temp file, in a worker thread (SPEC D-4; ``bench/network.py``).

When ``SafeHttp`` can hand a body over raw (``tools/net/sockets.py``: a plain direct connection,
exact ``Content-Length``), one thread per response does what curl does, without the event loop:
``recv_into`` a reusable buffer, ``pwrite`` it at its offset, feed the running SHA-256 when a digest
is expected, and start write-back every few MiB (``writeback.py``). The socket read, the write
and the hash all release the GIL, so four segments really run side by side, and no byte is
copied in Python. Memory is one ``BUFFER_BYTES`` buffer per response.

Invariants:

- Exactly ``length`` bytes are read: the caller has checked ``Content-Length`` (and, for a Range
  segment, that it matches the range). The server closing early, or sending nothing for the
  read timeout, is a ``transport`` failure, like the same event on the httpx path — so the
  caller's retry and resume rules apply unchanged.
- ``done`` only counts bytes already written; on every exit — success, failure, stop — every byte
  read is on disk and counted, so a resume starts exactly where the file ends.
- ``stop`` (a cancel or the call's timeout) wakes the thread at once; ``run_pump`` does not
  return or raise before the thread has ended, so the socket and the temp file's descriptor are
  never closed under it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
from typing import Any

from kernel.errors import Transport
from tools.download.writeback import Writeback
from tools.net.sockets import BodyStopped, RawBody

BUFFER_BYTES = 1 << 20
POLL_S = 0.25  # how often progress is reported to the event loop while a pump runs
THREAD_PREFIX = "a3s-download-pump"
STATS = {"bodies": 0}  # bodies pumped by this process (counted on the event loop; tests read it)


class ReadFailed(Exception):
    """The socket failed (reset, closed early, silent past the read timeout); disk errors are not this."""


class Pump:
    def __init__(
        self,
        body: RawBody,
        fd: int,
        offset: int,
        hasher: Any,
        read_timeout: float,
        writeback: Writeback | None = None,
    ) -> None:
        self.body = body
        self.fd = fd
        self.offset = offset
        self.hasher = hasher
        self.read_timeout = read_timeout
        self.writeback = writeback if writeback is not None else Writeback(fd)
        self.done = 0  # bytes written so far (set by the thread, read by the loop)

    def run(self) -> int:
        """The whole body (blocking; in a worker thread)."""
        view = memoryview(bytearray(min(BUFFER_BYTES, max(self.body.length, 1))))
        while self.body.remaining:
            try:
                n = self.body.read_into(view, self.read_timeout)
            except TimeoutError:
                raise ReadFailed(f"timed out (no data for {self.read_timeout:g}s)") from None
            except OSError as exc:  # ConnectionError included; BodyStopped passes through
                raise ReadFailed(f"failed: {exc.strerror or exc}") from None
            self._write(view[:n])
        return self.done

    def _write(self, data: memoryview) -> None:
        at = self.offset + self.done
        rest = data
        while rest:
            written = os.pwrite(self.fd, rest, at)
            rest, at = rest[written:], at + written
        if self.hasher is not None:
            self.hasher.update(data)  # releases the GIL on large buffers
        self.writeback.wrote(self.offset + self.done, len(data))
        self.done += len(data)


async def run_pump(
    pool: concurrent.futures.ThreadPoolExecutor,
    pump: Pump,
    on_progress: Any,
    op: str,
    anchor: str,
) -> int:
    """Run ``pump`` in ``pool``; ``on_progress(n)`` gets the newly written bytes on the loop thread.

    Returns the bytes written; socket failures become ``Transport`` (the bytes already written
    are reported first) and disk errors propagate as they are. On cancel the pump is stopped and
    waited for before the cancel goes on.
    """
    reported = 0

    def report() -> None:
        nonlocal reported
        now = pump.done
        if now > reported:
            on_progress(now - reported)
            reported = now

    job = pool.submit(pump.run)
    waiter = asyncio.wrap_future(job)
    try:
        while not waiter.done():
            await asyncio.wait({waiter}, timeout=POLL_S)
            report()
    except BaseException:
        pump.body.stop()
        try:
            await asyncio.wait({waiter})
        except BaseException:
            concurrent.futures.wait([job])  # cancelled again: block; the stopped thread ends at once
        if waiter.done() and not waiter.cancelled():
            waiter.exception()  # the stopped pump's BodyStopped: retrieved, not logged as stray
        report()
        raise
    report()
    try:
        return waiter.result()
    except ReadFailed as exc:
        raise Transport(f"{op}: reading the body of {anchor} {exc}", op=op) from None
    except BodyStopped:
        raise asyncio.CancelledError from None
