"""HTML conversion in a child process the call can kill (SPEC W-6, K-6; docs/network.md).

trafilatura, lxml and html2text run on bytes a hostile server chose, and some of their paths are
quadratic: one table row of 100,000 cells (1 MiB) took trafilatura 82 s of CPU, a 5 MiB one (extrapolated) about
half an hour. In a thread, a timed-out ``web_fetch`` walked away and the conversion went on —
burning a core and holding a default-executor thread, which every ``getaddrinfo`` and
``to_thread`` of the process shares: a few such calls starved the whole host. Here the
conversion runs in ``convert_child.py``, and a call that ends (deadline, cancel) kills its child.

Invariants:

- at most ``MAX_CONCURRENT`` conversions of this process run at once (``slots.py``); the next
  ``MAX_WAITING`` wait in order, honouring their deadline and cancel while queued (a waiter owns
  no child), and one more fails at once with ``transport{op}``. Each child may take 2 GiB of
  address space: 32 concurrent calls (a ``batch``, 32 sub-agents) had started 32 of them;
- ``convert`` takes an idle child or starts one, sends one job and waits for the answer in the
  default executor (that thread waits only on the child's pipe, so killing the child frees it);
  a pooled child found dead on the way (the OOM killer, say) is replaced by a fresh one, once;
- a child that answered goes back to the pool (at most ``MAX_IDLE``) unless it retires (its heap
  grew past ``convert_child.RETIRE_RSS_BYTES``: it exits and is reaped); a child whose call was
  cancelled, timed out or failed is killed (its process group) and reaped, never reused;
- a child that died or answered garbage is ``transport{op}``; a conversion error is a failure
  naming it; nothing raised here is untyped;
- a fork of this process (a Celery prefork child) starts with an empty pool and closes its copies
  of the parent's pipes; ``atexit`` kills the idle children (``tools/_child_pool.py``, shared
  with the QuickJS pool).
"""

from __future__ import annotations

import asyncio
import json
import os
import struct
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, Any

from kernel.errors import ToolError, Transport
from tools._child_pool import PerProcess, disown
from tools._children import discard, kill
from tools._offthread import abandon
from tools.web_fetch.slots import Slots

CHILD = Path(__file__).resolve().parent / "convert_child.py"
ROOT = Path(__file__).resolve().parents[2]
HEADER = struct.Struct("!I")
MAX_IDLE = 2
MAX_CONCURRENT = 3  # children converting at once, per process (each may take 2 GiB, 150 s of CPU)
MAX_WAITING = 64  # conversions queued for a slot; one more is refused (transport)
# What a conversion may hand back, in characters: converters amplify (nested <ol> or <blockquote>
# indent every line by the depth: a 3 MB page became 185 M characters of markdown, +380 MB in the
# host and cached per session). Twice the body limit is room for any real page; the child cuts.
MAX_CONVERTED_CHARS = 10 * 1024 * 1024
CUT_NOTICE = "\n\n[... the converted page was cut at {n} characters]"
# JSON escapes a character in at most 12 bytes (an astral one as two \uXXXX), plus the title.
MAX_REPLY_BYTES = 12 * MAX_CONVERTED_CHARS + 64 * 1024


class _Pool:
    def __init__(self) -> None:
        self.pid = os.getpid()
        self.idle: list[subprocess.Popen[bytes]] = []
        self.lock = threading.Lock()
        self.started = 0
        self.slots = Slots(MAX_CONCURRENT, MAX_WAITING)

    def take(self, fresh: bool = False) -> subprocess.Popen[bytes]:
        """An idle child that is still alive (unless ``fresh``), else a new one (blocking: call it
        off the loop)."""
        with self.lock:
            while self.idle and not fresh:
                proc = self.idle.pop()
                if proc.poll() is None:
                    return proc
                discard(proc)
            self.started += 1
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
        return subprocess.Popen(
            [sys.executable, "-I", str(CHILD), str(ROOT)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            cwd="/",
            close_fds=True,
            start_new_session=True,
        )

    def give_back(self, proc: subprocess.Popen[bytes]) -> None:
        with self.lock:
            if os.getpid() == self.pid and len(self.idle) < MAX_IDLE and proc.poll() is None:
                self.idle.append(proc)
                return
        kill(proc)
        discard(proc)

    def shutdown(self) -> None:
        with self.lock:
            idle, self.idle = self.idle, []
        for proc in idle:
            kill(proc)
            discard(proc)

    def forget_after_fork(self) -> None:
        for proc in self.idle:  # the parent's children: close our copies, never wait on them
            disown(proc)
        self.idle = []


pool = PerProcess(_Pool).get  # a fork's child starts empty; atexit kills the idle children


def _read_exact(pipe: IO[bytes], n: int) -> bytes:
    data = pipe.read(n)
    if data is None or len(data) != n:
        raise EOFError("the conversion process ended without an answer")
    return data


def _exchange(proc: subprocess.Popen[bytes], job: bytes) -> dict[str, Any]:
    """Send one job, read its answer (blocking; ends with an error when the child is killed)."""
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(HEADER.pack(len(job)) + job)
    proc.stdin.flush()
    (size,) = HEADER.unpack(_read_exact(proc.stdout, HEADER.size))
    if size > MAX_REPLY_BYTES:
        raise ValueError(f"an answer of {size} bytes")
    reply = json.loads(_read_exact(proc.stdout, size))
    if not isinstance(reply, dict):
        raise ValueError("an answer that is not an object")
    return reply


async def convert(
    html: str, fmt: str, body_only: bool, url: str, op: str, max_chars: int = MAX_CONVERTED_CHARS
) -> tuple[str, str | None]:
    """``html`` as ``fmt`` (``extract.render``) and its title, converted in a killable child; a text
    longer than ``max_chars`` (at most ``MAX_CONVERTED_CHARS``) is cut there, in the child."""
    shared = pool()
    max_chars = max(1, min(max_chars, MAX_CONVERTED_CHARS))
    job = {"html": html, "fmt": fmt, "body_only": body_only, "url": url, "max_chars": max_chars}
    async with shared.slots.hold(op):  # queued here, a call owns no child: its deadline just ends it
        proc, reply = await _exchange_once_or_twice(shared, json.dumps(job).encode("utf-8"), op)
        if not reply.get("ok"):
            _stop(proc, None)
            raise ToolError(f"{op}: could not convert the page: {reply.get('error')}")
        text, title = reply.get("text"), reply.get("title")
        if not isinstance(text, str) or not (title is None or isinstance(title, str)):
            _stop(proc, None)
            raise Transport(f"{op}: the conversion process answered garbage", op=op)
        if len(text) > max_chars + len(CUT_NOTICE) + 20:  # the child cuts; never trust it blindly
            text = text[:max_chars] + CUT_NOTICE.format(n=max_chars)
        if reply.get("retire"):  # it exits after a big page rather than idle on a grown heap
            threading.Thread(target=discard, args=(proc,), daemon=True).start()
        else:
            shared.give_back(proc)
        return text, title


async def _exchange_once_or_twice(
    shared: _Pool, job: bytes, op: str
) -> tuple[subprocess.Popen[bytes], dict[str, Any]]:
    try:
        return await _run(shared, job, fresh=False)
    except (OSError, EOFError):  # an idle child may have died (OOM killer) since it was pooled
        try:
            return await _run(shared, job, fresh=True)
        except (OSError, ValueError, EOFError) as exc:
            raise Transport(f"{op}: converting the page failed: {exc}", op=op) from None
    except ValueError as exc:
        raise Transport(f"{op}: converting the page failed: {exc}", op=op) from None


async def _run(shared: _Pool, job: bytes, fresh: bool) -> tuple[subprocess.Popen[bytes], dict[str, Any]]:
    """One exchange with a child; on any failure or cancel the child is killed and reaped."""
    loop = asyncio.get_running_loop()
    proc: subprocess.Popen[bytes] | None = None
    fut: asyncio.Future[dict[str, Any]] | None = None
    try:
        started = loop.run_in_executor(None, shared.take, fresh)
        try:
            proc = await asyncio.shield(started)
        except asyncio.CancelledError:
            started.add_done_callback(_kill_started)
            raise
        fut = loop.run_in_executor(None, _exchange, proc, job)
        return proc, await asyncio.shield(fut)
    except BaseException:  # failed, cancelled or timed out: the conversion must not go on
        _stop(proc, fut)
        raise


def _stop(proc: subprocess.Popen[bytes] | None, fut: asyncio.Future[Any] | None) -> None:
    """Kill the child now; its exchange thread then ends on EOF and its outcome is retrieved."""
    if fut is not None:
        abandon(fut)
    if proc is not None:
        kill(proc)
        threading.Thread(target=discard, args=(proc,), daemon=True).start()


def _kill_started(fut: asyncio.Future[subprocess.Popen[bytes]]) -> None:
    if not fut.cancelled() and fut.exception() is None:
        _stop(fut.result(), None)
