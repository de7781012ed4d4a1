"""The live view of ``a3s-fleet run`` (issue 8 item 4): the model's text as it streams, one line per
tool call with its status and duration, and a spinner while a call runs long.

The text goes to ``out`` (stdout: a pipe receives only what the model said); tool lines, retries
and the spinner go to ``err`` (stderr). When both are the same terminal, one lock and the
``_mid_line`` flag keep them apart: a tool line never lands in the middle of a text line, and the
spinner's status line is erased before anything else is written. Off a terminal there is no spinner
and no escape sequence, only the finished lines. On a terminal, what the model or a tool chose
(text, arguments, error messages) passes through ``for_terminal``: its control characters are
shown, never acted on.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from typing import IO, Any

from orchestrator.terminal_text import for_terminal

SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
ASCII_SPINNER = "|/-\\"
SPINNER_INTERVAL_S = 0.1
SPINNER_AFTER_S = 0.3  # a call shorter than this never shows a spinner
ARGS_PREVIEW_CHARS = 80


def _can_encode(stream: IO[str], text: str) -> bool:
    try:
        text.encode(getattr(stream, "encoding", None) or "ascii")
    except (UnicodeEncodeError, LookupError):
        return False
    return True


def _isatty(stream: IO[str]) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def args_preview(args: Any) -> str:
    """One short line for a call's arguments: the main argument alone when there is one."""
    if isinstance(args, Mapping):
        for key in ("command", "file_path", "query", "url", "path", "prompt"):
            value = args.get(key)
            if isinstance(value, str) and value:
                return _clip(value)
        if not args:
            return ""
    try:
        text = json.dumps(args, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError):
        text = str(args)
    return _clip(text)


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= ARGS_PREVIEW_CHARS else text[: ARGS_PREVIEW_CHARS - 1] + "…"


def error_text(kind: Any) -> str:
    """``type (detail=value, …)`` of an ``error_kind`` dict, on one line."""
    if not isinstance(kind, dict):
        return "failed"
    details = ", ".join(
        f"{k}={v}" for k, v in kind.items() if k not in ("type", "message") and v not in (None, "")
    )
    text = str(kind.get("type") or "failed") + (f" ({details})" if details else "")
    message = kind.get("message")
    return f"{text}: {message}" if isinstance(message, str) and message else text


class RunView:
    """Renders the session's events; ``close()`` stops the spinner and ends the text line."""

    def __init__(self, out: IO[str], err: IO[str]) -> None:
        self.out = out
        self.err = err
        self.live = _isatty(err)
        self._same_terminal = self.live and _isatty(out)
        self._out_is_terminal = _isatty(out)
        fancy = _can_encode(err, "✓✗⠋…")
        self.ok_mark, self.bad_mark, self.run_mark = ("✓", "✗", "⏵") if fancy else ("ok", "FAIL", ">")
        self.frames = SPINNER if fancy else ASCII_SPINNER
        self._lock = threading.Lock()
        self._running: dict[str, tuple[str, float]] = {}  # call id → (label, start)
        self._mid_line = False  # the text on `out` does not end with a newline
        self.text_shown = False  # any model text reached `out` (a fleet run's text comes at the end)
        self._status_shown = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if self.live:
            self._thread = threading.Thread(target=self._spin, name="run-spinner", daemon=True)
            self._thread.start()

    # ---- events -------------------------------------------------------------------------------

    def event(self, event: Any) -> None:
        kind = event.type
        data = event.data if isinstance(event.data, dict) else {}
        if kind == "text_delta":
            self.text(str(data.get("text") or ""))
        elif kind == "tool_start":
            self._tool_start(event, data)
        elif kind == "tool_end":
            self._tool_end(event, data)
        elif kind == "model_retry":
            delay = data.get("delay_ms")
            self.note(f"model: {error_text(data.get('error_kind'))}; retrying in {delay} ms")

    def text(self, text: str) -> None:
        if not text:
            return
        if self._out_is_terminal:
            text = for_terminal(text)
        with self._lock:
            self._clear_status()
            self.out.write(text)
            self.out.flush()
            self._mid_line = not text.endswith("\n")
            self.text_shown = True

    def note(self, line: str) -> None:
        with self._lock:
            self._line(line)

    def _tool_start(self, event: Any, data: dict[str, Any]) -> None:
        depth = int(data.get("depth") or 0)
        preview = args_preview(data.get("args"))
        label = "  " * depth + event.tool + (f" {preview}" if preview else "")
        with self._lock:
            self._running[event.call_id] = (label, time.monotonic())

    def _tool_end(self, event: Any, data: dict[str, Any]) -> None:
        with self._lock:
            label, _ = self._running.pop(event.call_id, (event.tool, time.monotonic()))
            seconds = f"{int(data.get('duration_ms') or 0) / 1000:.2f}s"
            if data.get("exit_code") == 0:
                self._line(f"{self.ok_mark} {label} ({seconds})")
            else:
                why = error_text(data.get("error_kind"))
                if isinstance(data.get("exit_code"), int) and data.get("error_kind") is None:
                    why = f"exit code {data['exit_code']}"
                self._line(f"{self.bad_mark} {label} ({seconds}): {why}")

    def label(self, call_id: str, tool: str) -> str:
        """How a running call is shown (its tool and main argument)."""
        with self._lock:
            return self._running.get(call_id, (tool, 0.0))[0].strip()

    def ask(self, question: str) -> bool:
        """Ask y/N on the terminal; the spinner does not draw meanwhile."""
        import sys

        with self._lock:
            self._clear_status()
            if self._mid_line and self._same_terminal:
                self.out.write("\n")
                self.out.flush()
                self._mid_line = False
            self.err.write(for_terminal(question) if self.live else question)
            self.err.flush()
            try:
                answer = sys.stdin.readline()
            except (OSError, ValueError):
                answer = ""
            return answer.strip().lower() in ("y", "yes")

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            self._clear_status()
            if self._mid_line:
                self.out.write("\n")
                self.out.flush()
                self._mid_line = False

    # ---- drawing (under the lock) -------------------------------------------------------------

    def _line(self, line: str) -> None:
        self._clear_status()
        if self._mid_line and self._same_terminal:
            # On one terminal a tool line must not start in the middle of the model's text line;
            # a pipe's text is never altered.
            self.out.write("\n")
            self.out.flush()
            self._mid_line = False
        self.err.write((for_terminal(line) if self.live else line) + "\n")
        self.err.flush()

    def _clear_status(self) -> None:
        if self._status_shown:
            self.err.write("\r\x1b[K")
            self.err.flush()
            self._status_shown = False

    def _spin(self) -> None:
        frame = 0
        while not self._stop.wait(SPINNER_INTERVAL_S):
            with self._lock:
                now = time.monotonic()
                long = [
                    (label, now - t0) for label, t0 in self._running.values() if now - t0 >= SPINNER_AFTER_S
                ]
                if not long:
                    self._clear_status()
                    continue
                if self._same_terminal and self._mid_line:
                    self.out.write("\n")
                    self.out.flush()
                    self._mid_line = False
                label, elapsed = long[0]
                more = f" (+{len(long) - 1} more)" if len(long) > 1 else ""
                glyph = self.frames[frame % len(self.frames)]
                self.err.write(f"\r\x1b[K{glyph} {for_terminal(label)} {elapsed:.1f}s{more}")
                self.err.flush()
                self._status_shown = True
            frame += 1
