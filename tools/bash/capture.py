"""Bounded head/tail capture of a command's two output streams (SPEC B-2; REFERENCE 4.7).

One budget of ``BUDGET_BYTES`` (100 KiB) covers stdout *and* stderr together, in arrival order:
the first ``HEAD_BYTES`` (64 KiB) that arrive are kept as the head, the last ``TAIL_BYTES``
(36 KiB) as the tail, everything between is counted and dropped. Each retained chunk remembers
which stream it came from, so each stream stays separately readable: a stream's chunks in the head
are a prefix of that stream and its chunks in the tail a suffix, so a per-stream view is
``head + marker + tail`` with its own exact counts.

The *original* of a truncated capture (what evidence describes, SPEC R-6) is the command's
output as a line-buffered terminal shows ``2>&1``: both streams merged line by line in arrival
order (a line is never cut by the other stream's output, unless it passes
``MAX_PARTIAL_LINE_BYTES`` without a newline). ``OutputCapture``
hashes it while it streams (SHA-256, on a helper thread once it passes ``HASH_INLINE_BYTES``, so
reading and hashing overlap) and keeps a full copy while it stays within
``RETAIN_FULL_MAX_BYTES`` (1 MiB); ``end()`` finishes both.

Invariants:
- memory held is at most ``BUDGET_BYTES`` + ``RETAIN_FULL_MAX_BYTES`` + the hashing queue
  (``HASH_QUEUE_CHUNKS`` chunks) + two unfinished lines plus the chunk being fed (callers read ``READ_CHUNK_BYTES`` at a
  time), however much the command prints;
- ``total_bytes`` is exact for each stream and overall; nothing is ever decoded before rendering;
- the marker reads ``[command output truncated: retained the first H and last T of N bytes]``;
- the rendered text (labels and markers included) fits ``OUTPUT_MAX_BYTES``, see ``render``.
"""

from __future__ import annotations

import hashlib
import queue
import threading
from collections import deque
from dataclasses import dataclass, replace
from typing import Any, Literal

Stream = Literal["stdout", "stderr"]
STREAMS: tuple[Stream, ...] = ("stdout", "stderr")

HEAD_BYTES = 64 * 1024
TAIL_BYTES = 36 * 1024
BUDGET_BYTES = HEAD_BYTES + TAIL_BYTES
READ_CHUNK_BYTES = 8 * 1024
# The rendered text's cap: the default projection cap (SPEC R-4, 100 KiB).
OUTPUT_MAX_BYTES = 100 * 1024
MAX_RENDER_PASSES = 4
RETAIN_FULL_MAX_BYTES = 1024 * 1024
MAX_PARTIAL_LINE_BYTES = 64 * 1024
HASH_INLINE_BYTES = BUDGET_BYTES
HASH_QUEUE_CHUNKS = 64


class StreamDigest:
    """SHA-256 of everything fed, in order; past ``HASH_INLINE_BYTES`` the hashing runs on a thread.

    hashlib releases the GIL on large updates, so the reading thread and the hashing thread run
    side by side; the queue is bounded, so a fast producer waits rather than piling up memory.
    ``hexdigest()`` ends the thread (call it exactly once, also on error paths: ``OutputCapture.end``).
    """

    def __init__(self) -> None:
        self._hash = hashlib.sha256()
        self._inline = 0
        self._queue: queue.Queue[bytes | None] | None = None
        self._thread: threading.Thread | None = None
        self._hex: str | None = None

    def update(self, data: bytes) -> None:
        if self._queue is None:
            if self._inline + len(data) <= HASH_INLINE_BYTES:
                self._hash.update(data)
                self._inline += len(data)
                return
            self._queue = queue.Queue(maxsize=HASH_QUEUE_CHUNKS)
            self._thread = threading.Thread(target=self._drain, name="bash-output-sha256", daemon=True)
            self._thread.start()
        self._queue.put(data)

    def _drain(self) -> None:
        assert self._queue is not None
        while (chunk := self._queue.get()) is not None:
            self._hash.update(chunk)

    def hexdigest(self) -> str:
        if self._hex is None:
            if self._thread is not None and self._queue is not None:
                self._queue.put(None)
                self._thread.join()
                self._thread = None
            self._hex = self._hash.hexdigest()
        return self._hex


def _render(views: list[StreamView]) -> str:
    out, err = views
    if out.total_bytes and err.total_bytes:
        out_text = out.text if out.text.endswith("\n") else out.text + "\n"
        return f"[stdout]\n{out_text}[stderr]\n{err.text}"
    return err.text if err.total_bytes else out.text


def _shrink(views: list[StreamView], over: int) -> list[StreamView]:
    """Drop ``over`` bytes of shown output: from the front of the longest tails, then head ends."""
    views = list(views)
    for part in ("tail", "head"):
        for i in sorted(range(len(views)), key=lambda j: -len(getattr(views[j], part))):
            if over <= 0:
                return views
            v = views[i]
            data = getattr(v, part)
            cut = min(over, len(data))
            if cut:
                trimmed = data[cut:] if part == "tail" else data[: len(data) - cut]
                views[i] = replace(v, **{part: trimmed})
                over -= cut
    return views


def truncation_marker(head: int, tail: int, total: int) -> str:
    return f"[command output truncated: retained the first {head} and last {tail} of {total} bytes]"


@dataclass(frozen=True, slots=True)
class StreamView:
    """One stream's retained bytes: ``head`` is a prefix of the stream, ``tail`` a suffix."""

    stream: Stream
    head: bytes
    tail: bytes
    total_bytes: int

    @property
    def captured_bytes(self) -> int:
        return len(self.head) + len(self.tail)

    @property
    def truncated(self) -> bool:
        return self.total_bytes > self.captured_bytes

    @property
    def text(self) -> str:
        """Head, the truncation marker when bytes were dropped, tail (invalid UTF-8 replaced)."""
        head = self.head.decode("utf-8", "replace")
        if not self.truncated:
            return head + self.tail.decode("utf-8", "replace")
        marker = truncation_marker(len(self.head), len(self.tail), self.total_bytes)
        sep = "" if not head or head.endswith("\n") else "\n"
        return f"{head}{sep}{marker}\n{self.tail.decode('utf-8', 'replace')}"

    def summary(self) -> dict[str, Any]:
        return {
            "total_bytes": self.total_bytes,
            "captured_bytes": self.captured_bytes,
            "truncated": self.truncated,
            "text": self.text,
        }


class OutputCapture:
    """Feed chunks as they arrive; read per-stream views and the combined summary at the end."""

    def __init__(self, head_bytes: int = HEAD_BYTES, tail_bytes: int = TAIL_BYTES) -> None:
        if head_bytes < 0 or tail_bytes < 0:
            raise ValueError("head_bytes and tail_bytes must be >= 0")
        self._head_limit = head_bytes
        self._tail_limit = tail_bytes
        self._head: list[tuple[Stream, bytes]] = []
        self._head_len = 0
        self._tail: deque[tuple[Stream, bytes]] = deque()
        self._tail_len = 0
        self._totals: dict[Stream, int] = {"stdout": 0, "stderr": 0}
        self._digest = StreamDigest()
        self._full: bytearray | None = bytearray()
        self._partial: dict[Stream, bytes] = {"stdout": b"", "stderr": b""}

    def feed(self, stream: Stream, data: bytes) -> bytes:
        """Account ``data`` to ``stream``; return the part that landed in the head (for live deltas)."""
        self._totals[stream] += len(data)
        self._to_original(stream, data)
        head_part = b""
        room = self._head_limit - self._head_len
        if room > 0 and data:
            head_part = data[:room]
            self._head.append((stream, head_part))
            self._head_len += len(head_part)
            data = data[room:]
        if data and self._tail_limit:
            self._tail.append((stream, data))
            self._tail_len += len(data)
            # Drop from the front until the tail fits again: the tail is a sliding window.
            while self._tail_len > self._tail_limit:
                excess = self._tail_len - self._tail_limit
                first_stream, first = self._tail[0]
                if len(first) <= excess:
                    self._tail.popleft()
                    self._tail_len -= len(first)
                else:
                    self._tail[0] = (first_stream, first[excess:])
                    self._tail_len -= excess
        return head_part

    def _to_original(self, stream: Stream, data: bytes) -> None:
        """Merge ``data`` into the original at line granularity: a stream's unfinished last line
        waits for the rest of it (up to ``MAX_PARTIAL_LINE_BYTES``), so lines of the two streams
        never cut into each other."""
        buf = self._partial[stream] + data if self._partial[stream] else data
        cut = buf.rfind(b"\n") + 1
        if not cut and len(buf) > MAX_PARTIAL_LINE_BYTES:
            cut = len(buf)
        self._partial[stream] = buf[cut:]
        if cut:
            self._append_original(buf[:cut])

    def _append_original(self, data: bytes) -> None:
        self._digest.update(data)
        if self._full is not None:
            if len(self._full) + len(data) <= RETAIN_FULL_MAX_BYTES:
                self._full += data
            else:
                self._full = None  # too big to keep whole: only the digest and the count go on

    def end(self) -> str:
        """The stream is over: the SHA-256 (hex) of the merged original; ends the hashing thread."""
        for stream in STREAMS:
            if self._partial[stream]:
                self._append_original(self._partial[stream])
                self._partial[stream] = b""
        return self._digest.hexdigest()

    @property
    def full_output(self) -> bytes | None:
        """The merged original, when it stayed within ``RETAIN_FULL_MAX_BYTES``."""
        return bytes(self._full) if self._full is not None else None

    @property
    def total_bytes(self) -> int:
        return sum(self._totals.values())

    @property
    def captured_bytes(self) -> int:
        return self._head_len + self._tail_len

    @property
    def truncated(self) -> bool:
        return self.total_bytes > self.captured_bytes

    def view(self, stream: Stream) -> StreamView:
        head = b"".join(chunk for s, chunk in self._head if s == stream)
        tail = b"".join(chunk for s, chunk in self._tail if s == stream)
        return StreamView(stream=stream, head=head, tail=tail, total_bytes=self._totals[stream])

    def render(self, max_bytes: int = OUTPUT_MAX_BYTES) -> str:
        """Model-facing text: stdout then stderr, labelled only when both printed something.

        The text never exceeds ``max_bytes``: when labels and markers would push it over, the
        shown tails (then heads) are shortened by the overflow and the markers count what is shown.
        So the kernel's projection (whose cap is ``OUTPUT_MAX_BYTES`` by default) never has to cut
        the tail or the marker off. The metadata views keep everything captured.
        """
        views = [self.view("stdout"), self.view("stderr")]
        text = _render(views)
        for _ in range(MAX_RENDER_PASSES):
            over = len(text.encode("utf-8")) - max_bytes
            if over <= 0:
                return text
            views = _shrink(views, over)
            text = _render(views)
        # Pathological decoding growth (replacement characters): a last, UTF-8-safe hard cut.
        return text.encode("utf-8")[: max(0, max_bytes)].decode("utf-8", "ignore")

    def summary(self, *, timed_out: bool) -> dict[str, Any]:
        """The ``output`` metadata: the reference's four keys plus one view per stream."""
        return {
            "total_bytes": self.total_bytes,
            "captured_bytes": self.captured_bytes,
            "truncated": self.truncated,
            "timed_out": timed_out,
            "head_bytes_limit": self._head_limit,
            "tail_bytes_limit": self._tail_limit,
            "stdout": self.view("stdout").summary(),
            "stderr": self.view("stderr").summary(),
        }
