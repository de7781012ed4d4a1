"""Start writing a download's pages to disk while it is still arriving (SPEC D-4; ``bench/network.py``).

The file is fsynced before promotion. If every page is still dirty at that point, the fsync writes
the whole file while the call waits (~80 ms per 256 MiB here, a quarter of curl's whole transfer).
``Writeback`` asks the kernel to *start* writing each region once ``KICK_BYTES`` have been written
to it (Linux ``sync_file_range(SYNC_FILE_RANGE_WRITE)``: it queues the I/O and returns). The disk
then works while the network does, and the final fsync only waits for the tail. It changes
nothing about durability: the fsync still comes first and still decides.

Where the call is unavailable (no glibc symbol, another OS, a file system that refuses it) it
turns itself off and the fsync does all the work, as before.
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
from typing import Any

KICK_BYTES = 8 << 20
SYNC_FILE_RANGE_WRITE = 2

_lock = threading.Lock()
_call: Any = None
_loaded = False


def _sync_file_range() -> Any:
    global _call, _loaded
    with _lock:
        if not _loaded:
            _loaded = True
            with contextlib.suppress(AttributeError, OSError, TypeError):
                fn = ctypes.CDLL(None, use_errno=True).sync_file_range
                fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
                fn.restype = ctypes.c_int
                _call = fn
        return _call


class Writeback:
    """Writes reported through ``wrote`` are handed to the disk every ``KICK_BYTES``.

    One instance per writing thread (it keeps no lock); regions may interleave — the kick covers
    the span written since the last one, and pages that are already clean cost nothing.
    """

    def __init__(self, fd: int, kick_bytes: int = KICK_BYTES) -> None:
        self.fd = fd
        self.kick_bytes = kick_bytes
        self.kicks = 0
        self._call = _sync_file_range()
        self._pending = 0
        self._lo = -1
        self._hi = -1

    @property
    def enabled(self) -> bool:
        return self._call is not None

    def wrote(self, offset: int, n: int) -> None:
        if self._call is None or n <= 0:
            return
        end = offset + n
        self._lo = offset if self._lo < 0 else min(self._lo, offset)
        self._hi = max(self._hi, end)
        self._pending += n
        if self._pending >= self.kick_bytes:
            self._kick()

    def _kick(self) -> None:
        lo, hi = self._lo, self._hi
        self._pending, self._lo, self._hi = 0, -1, -1
        # ctypes releases the GIL for the call. Without a WAIT flag the call does not consume the
        # file's write-back error state, so the fsync before promotion still reports every I/O
        # error. A failure here (EINVAL, ESPIPE, EIO) only turns the optimisation off.
        if self._call(self.fd, lo, hi - lo, SYNC_FILE_RANGE_WRITE) != 0:
            self._call = None
            return
        self.kicks += 1
