"""The progress line of ``a3s-fleet tool NAME`` on a terminal: a long call (a download, a command,
an MCP tool reporting progress) shows what it is doing on stderr while it runs, from the call's
``tool_output_delta`` events, and the line is erased before the result is printed.

One line, redrawn at most every ``REDRAW_S``: ``download 12.0 MiB / 256.0 MiB (4%) · 3.1s``,
``bash · <the last line of output> · 12.4s``, ``NAME 3/10 <message> · 2.0s``. What the tool chose to
say passes through ``for_terminal``; off a terminal nothing is drawn (the caller does not install it).
"""

from __future__ import annotations

import threading
import time
from typing import IO, Any

from orchestrator.terminal_text import for_terminal

REDRAW_S = 0.2
MAX_DETAIL_CHARS = 60


def _mib(n: Any) -> str:
    return f"{n / (1024 * 1024):.1f} MiB" if isinstance(n, (int, float)) else "?"


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_DETAIL_CHARS else "…" + text[-(MAX_DETAIL_CHARS - 1) :]


def describe(tool: str, delta: Any) -> str | None:
    """The status text for one ``tool_output_delta`` (``None``: nothing worth a line)."""
    if not isinstance(delta, dict):
        return None
    download = delta.get("download_progress")
    if isinstance(download, dict):
        done, total = download.get("bytes"), download.get("total_bytes")
        if isinstance(total, int) and total > 0 and isinstance(done, int):
            return f"{tool} {_mib(done)} / {_mib(total)} ({100 * done // total}%)"
        return f"{tool} {_mib(done)}"
    if isinstance(delta.get("text"), str):  # a command's output as it streams: its last line
        lines = [line for line in delta["text"].splitlines() if line.strip()]
        return f"{tool} · {_clip(lines[-1])}" if lines else None
    if "progress" in delta:  # an MCP server's progress notification
        progress, total, message = delta.get("progress"), delta.get("total"), delta.get("message")
        amount = f"{progress:g}" if isinstance(progress, (int, float)) else "?"
        if isinstance(total, (int, float)):
            amount += f"/{total:g}"
        return f"{tool} {amount}" + (f" {_clip(message)}" if isinstance(message, str) and message else "")
    return None


class ToolProgress:
    """An event sink (``SessionOptions.services["event_sink"]``) drawing the status line on ``err``."""

    def __init__(self, err: IO[str]) -> None:
        self.err = err
        self._lock = threading.Lock()
        self._started = time.monotonic()
        self._drawn_at = 0.0
        self._shown = False
        self._closed = False

    def emit(self, event: Any) -> None:
        if event.type != "tool_output_delta" or not isinstance(event.data, dict):
            return
        status = describe(event.tool, event.data.get("delta"))
        now = time.monotonic()
        if status is None or now - self._drawn_at < REDRAW_S:
            return
        with self._lock:
            if self._closed:
                return
            self._drawn_at = now
            self.err.write(f"\r\x1b[K{for_terminal(status)} · {now - self._started:.1f}s")
            self.err.flush()
            self._shown = True

    def close(self) -> None:
        """Erase the line (the result comes next); later events draw nothing."""
        with self._lock:
            self._closed = True
            if self._shown:
                self.err.write("\r\x1b[K")
                self.err.flush()
                self._shown = False
