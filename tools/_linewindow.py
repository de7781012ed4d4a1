"""Streaming line windows for ``read`` (SPEC B-1, B-4; issue 15 item 9): never a whole file in memory.

``read_window(stream, offset, limit, budget)`` reads a binary stream in ``CHUNK_BYTES`` chunks and
returns the lines ``offset .. offset+limit`` and the file's total line count, with memory bounded by
one chunk plus what the output can show:

- lines before the window and after it are only *counted* (``bytes.count``), never kept;
- a kept line keeps at most ``KEEP_LINE_BYTES`` raw bytes (``read`` shows at most
  ``MAX_LINE_BYTES`` of it; the few extra bytes make the UTF-8-safe cut identical to cutting the
  whole line), so a 50 MB single-line file costs a few KiB;
- keeping stops once the lower bound of the rendered size of the kept lines passes ``budget``
  (``read`` could not show more than that anyway): the caller still gets every line that fits.

The work is bounded too: ``max_scan_bytes`` caps the bytes read (hence scanned for newlines) in
one call. A sparse or all-zero file costs no disk (``truncate -s 64G`` in the sandbox), yet
counting its lines is a pass over every byte — 64 GiB kept a core busy for minutes. When the cap
stops the scan before the end, the window says so (``stopped``); ``total`` is then unknown
(None), and ``reached``/``complete`` tell the caller whether the offset was reached and whether
every wanted line was collected before the stop. A line still being read at the stop is kept only
when it is already longer than ``KEEP_LINE_BYTES`` (it renders cut either way, so what is shown is
exact); a shorter one might not have ended and is left out.

Line semantics are exactly those of ``data.decode("utf-8", "replace").split("\\n")`` with a final
empty segment dropped (what ``read`` always did): decoding per line is the same as decoding the
whole text, because ``\\n`` never continues a UTF-8 sequence.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import BinaryIO

from kernel.errors import Cancelled

CHUNK_BYTES = 1 << 20
MAX_LINE_BYTES = 2000
KEEP_LINE_BYTES = MAX_LINE_BYTES + 8  # > MAX + one UTF-8 character + '\r': the cut is unaffected
LINE_OVERHEAD_BYTES = 8  # "{n:>6}\t" + "\n", the least a rendered line adds


@dataclass(slots=True)
class Window:
    """Lines ``offset .. offset + len(lines)`` (decoded; long ones cut) and the file's line count."""

    offset: int
    lines: list[str] = field(default_factory=list)
    cut: list[bool] = field(default_factory=list)  # the line was longer than KEEP_LINE_BYTES
    total: int | None = 0  # None: the scan stopped at max_scan_bytes before the end
    scanned_bytes: int = 0
    stopped: bool = False  # the scan hit max_scan_bytes with bytes left in the stream
    reached: bool = True  # the first wanted line was reached (False only when stopped)
    complete: bool = True  # every line the window could hold was collected (False only when stopped)
    stop_line: int = 0  # 0-based line the scan was in when it stopped


def read_window(
    stream: BinaryIO,
    offset: int,
    limit: int,
    budget: int,
    cancelled: Callable[[], bool] | None = None,
    max_scan_bytes: int | None = None,
) -> Window:
    """See the module docstring; ``budget`` bounds the rendered bytes the caller can use."""
    win = Window(offset)
    stop = offset + limit  # first line index not wanted
    line = 0  # index of the line the next byte belongs to
    cur = bytearray()
    cur_long = False
    shown = 0  # lower bound of the rendered size of the kept lines
    last_byte_newline = True  # an empty file has no lines

    def keep(raw: bytes | bytearray, long: bool) -> None:
        nonlocal shown
        text = bytes(raw).decode("utf-8", "replace")
        win.lines.append(text)
        win.cut.append(long)
        # The least this line can render to: each raw byte becomes >= 1 byte, one '\r' is dropped,
        # and a cut line still shows MAX_LINE_BYTES (less at most 3 bytes of a split character, which
        # the '…' it gains makes up for).
        stripped = len(raw) - (1 if raw.endswith(b"\r") and not long else 0)
        shown += LINE_OVERHEAD_BYTES + min(stripped, MAX_LINE_BYTES)

    while True:
        if cancelled is not None and cancelled():
            raise Cancelled("read cancelled", op="read")
        want = CHUNK_BYTES if max_scan_bytes is None else min(CHUNK_BYTES, max_scan_bytes - win.scanned_bytes)
        if want <= 0:
            # At the cap: one more byte tells a file that ends exactly here from one that goes on.
            if stream.read(1):
                win.stopped = True
            break
        chunk = stream.read(want)
        if not chunk:
            break
        win.scanned_bytes += len(chunk)
        last_byte_newline = chunk.endswith(b"\n")
        pos, n = 0, len(chunk)
        while pos < n:
            if line >= stop or shown > budget:
                line += chunk.count(b"\n", pos)
                break
            if line < offset:
                need = offset - line
                count = chunk.count(b"\n", pos)
                if count < need:
                    line += count
                    break
                for _ in range(need):
                    pos = chunk.index(b"\n", pos) + 1
                line += need
                continue
            nl = chunk.find(b"\n", pos)
            end = n if nl < 0 else nl
            room = KEEP_LINE_BYTES - len(cur)
            if room > 0:
                cur += chunk[pos : min(end, pos + room)]
            if end - pos > room:
                cur_long = True
            if nl < 0:
                break
            keep(cur, cur_long)
            cur.clear()
            cur_long = False
            line += 1
            pos = nl + 1
    if win.stopped:
        win.total = None
        win.stop_line = line
        win.reached = line >= offset
        win.complete = line >= stop or shown > budget
        if win.reached and not win.complete and cur_long:
            keep(cur, cur_long)  # renders cut at MAX_LINE_BYTES wherever the line really ends
        return win
    if not last_byte_newline:
        # The last line has no newline: it counts, and it may be the one being kept.
        if offset <= line < stop and shown <= budget:
            keep(cur, cur_long)
        line += 1
    win.total = line
    return win


def render_line(n: int, text: str, long: bool) -> str:
    """``{n:>6}\\t{line}``: one ``\\r`` before the newline dropped, cut UTF-8-safely at 2000 bytes."""
    if text.endswith("\r") and not long:
        text = text[:-1]
    raw = text.encode("utf-8")
    if len(raw) > MAX_LINE_BYTES:
        text = raw[:MAX_LINE_BYTES].decode("utf-8", errors="ignore") + "…"
    return f"{n:>6}\t{text}\n"
