"""QuickJS in a child process: one script's run, from its job to its outcome.

``run_script(job, handle, deadline)`` runs one script in a fresh child (``vm_child.py``) and returns
its ``VmOutcome``. While the script waits on host requests, ``handle(calls)`` answers them (the
program bridge or the workflow driver). Invariants:

- **one script per child**: a child is never reused after it ran code; the pool only holds children
  that have loaded the bridge and wait for their first (and only) job;
- **the session outlives the VM**: a crash, a native hang or a memory blow-up ends the child, never
  this process. At ``deadline`` a pending host request is cancelled; the child gets ``GRACE_S``
  (the reference's 500 ms settle) to report, then it is killed (SIGKILL) and the run is a timeout.
  Cancelling the caller kills the child at once;
- **no orphans**: children come from ``pool.py`` (spawned by one long-lived thread, tied to this
  process with ``PR_SET_PDEATHSIG``) and are reaped after they exit — off the caller's path when
  they ended on their own, before returning when they had to be killed;
- every line a child sends is bounded (``MAX_LINE_BYTES``); a longer one ends the run, and so does
  JSON nested too deeply for the host to parse, and a line whose parse would cost more than
  ``MAX_LINE_COST`` (``linevalues.py``: values, containers and floats weighed before parsing,
  ``budget_exhausted{resource: "vm_message_values"}``). Lone UTF-16 surrogates in what the child sends (a
  script's ``'ab😀'.slice(0, 3)``) become U+FFFD, as JavaScript's ``toWellFormed()`` does — the host
  cannot encode them as UTF-8;
- host memory per run is bounded whatever the script queues: at most ``MAX_PENDING_REQUESTS``
  requests are outstanding at once (more ends the run, ``budget_exhausted{resource:
  "pending_requests"}``) and ``MAX_REQUESTS`` are sent in all (``resource: "requests"``), and
  replies are written in lines of about ``REPLY_LINE_BYTES`` with the
  pipe's flow control — a script awaiting one large step ten thousand times never has ten thousand
  copies of its output serialised at once.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import gc
import json
import re
import signal
import subprocess
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from kernel.errors import BudgetExhausted
from tools._children import REAP_TIMEOUT_S, close_pipes, discard, kill
from tools.program.linevalues import MAX_LINE_COST, needs_count, within_cost_cap
from tools.program.pool import VmPool, pool

GRACE_S = 0.5
MAX_LINE_BYTES = 8 * 1024 * 1024
# Requests a script may have outstanding at once: a workflow's Promise.all of every step it may
# create (``MAX_STEPS``). Each costs the host a task (~KiBs) and, when answered, a reply.
MAX_PENDING_REQUESTS = 10_000
# Requests in one run, answered or not. A program makes at most 1000 tool calls and a workflow
# asks for at most 10 000 distinct steps; a loop re-asking the host (a rejected request caught, a
# finished step asked for again) costs the host ~0.4 s of CPU per 1000 round trips and used to
# run until the deadline (a workflow's is up to 24 h).
MAX_REQUESTS = 100_000
REPLY_LINE_BYTES = 1024 * 1024  # replies are grouped into lines of about this size
WRITE_HIGH_WATER = 4 * 1024 * 1024  # bytes queued to the child's stdin before the host waits
# A JSON escape of a UTF-16 surrogate, or one encoded in CESU/WTF-8 bytes: the only ways a lone
# surrogate reaches a Python string from a line (checked before walking the parsed value).
_SURROGATE_HINT = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")
STDERR_TAIL_BYTES = 4096
GC_FREE_PARSE_BYTES = 64 * 1024  # longer lines are parsed with the cyclic collector paused

# Pids of children running a script now (diagnostics and tests: ``active_pids()``).
_ACTIVE: set[int] = set()
_KILL_AFTER = frozenset({"timeout", "protocol", "aborted", "crash"})

Handler = Callable[[list[dict[str, Any]]], Awaitable[list[dict[str, Any]]]]


@dataclass
class VmOutcome:
    """How a script ended: ``ok`` + ``value``, or ``kind`` (timeout, memory, stack, syntax, script,
    no_entry, deadlock, crash, protocol, cancelled-by-handler) + ``error``; ``logs`` from console."""

    ok: bool
    value: Any = None
    kind: str = ""
    error: str = ""
    error_kind: dict[str, Any] | None = None
    logs: list[str] = field(default_factory=list)
    step_id: str | None = None  # a workflow step's rejection that ended the script
    duration_ms: int = 0


class LineTooManyValues(Exception):
    """Parsing a line from the child would cost more than ``MAX_LINE_COST``: not parsed."""


class HandlerAbort(Exception):
    """Raised by a handler to end the run at once (allow-list, maxToolCalls): the child is killed."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


class _FlowControl(asyncio.Protocol):
    """The write side's flow control: ``can_write`` is clear while the pipe's buffer is full."""

    def __init__(self) -> None:
        self.can_write = asyncio.Event()
        self.can_write.set()

    def pause_writing(self) -> None:
        self.can_write.clear()

    def resume_writing(self) -> None:
        self.can_write.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self.can_write.set()  # a dead child: writes are dropped, nobody may wait forever


class _Channel:
    """The child's pipes attached to the running event loop for one run."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.reader = asyncio.StreamReader(limit=MAX_LINE_BYTES)
        self.writer: asyncio.WriteTransport | None = None
        self.flow = _FlowControl()
        self.requests = 0  # every request the child sent in this run (MAX_REQUESTS)
        self._transports: list[asyncio.BaseTransport] = []
        self.stderr = bytearray()

    async def open(self) -> None:
        loop = asyncio.get_running_loop()
        assert self.proc.stdout is not None and self.proc.stdin is not None and self.proc.stderr is not None
        rt, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(self.reader), self.proc.stdout
        )
        self._transports.append(rt)
        wt, _ = await loop.connect_write_pipe(lambda: self.flow, self.proc.stdin)
        wt.set_write_buffer_limits(high=WRITE_HIGH_WATER)
        self.writer = wt
        self._transports.append(wt)
        tail = self.stderr

        class _Tail(asyncio.Protocol):
            def data_received(self, data: bytes) -> None:
                tail.extend(data)
                del tail[:-STDERR_TAIL_BYTES]

        et, _ = await loop.connect_read_pipe(_Tail, self.proc.stderr)
        self._transports.append(et)

    def send(self, obj: Any) -> None:
        assert self.writer is not None
        self.writer.write(_encode(obj) + b"\n")

    async def send_replies(self, replies: list[dict[str, Any]]) -> None:
        """Replies in lines of about ``REPLY_LINE_BYTES``, each written only once the pipe has room:
        the host holds one line's serialisation (plus the pipe's buffer), however many replies."""
        assert self.writer is not None
        line: list[bytes] = []
        size = 0
        for reply in replies:
            if self.writer.is_closing():
                return
            data = _encode(reply)
            if line and size + len(data) > REPLY_LINE_BYTES:
                await self._write_line(line)
                line, size = [], 0
            line.append(data)
            size += len(data) + 1
        if line:
            await self._write_line(line)

    async def _write_line(self, items: list[bytes]) -> None:
        await self.flow.can_write.wait()
        assert self.writer is not None
        if not self.writer.is_closing():  # the child is gone: its end of the run is read next
            self.writer.write(b"[" + b",".join(items) + b"]\n")

    async def receive(self) -> dict[str, Any] | None:
        line = await self.reader.readline()
        if not line:
            return None
        data: bytes | str = line
        surrogates: bool | None = None
        if needs_count(line):
            # Parsing makes an object per value (8 MiB of `[]`: ~180 MB, ~0.2 s holding the
            # GIL): weighed first, off the loop, and refused past the cap (linevalues.py). The
            # line's surrogate scan runs there too: a regex holds the GIL, ~40 ms over 8 MiB.
            text, surrogates = await asyncio.to_thread(_weigh_line, line)
            if text is None:
                raise LineTooManyValues
            data = text
        try:
            msg = _parse(data)
            if _has_surrogate(line) if surrogates is None else surrogates:
                # A Python walk of every value: off the loop for a long line (a million of them).
                long = len(line) > GC_FREE_PARSE_BYTES
                msg = await asyncio.to_thread(_well_formed, msg) if long else _well_formed(msg)
        except RecursionError:
            raise ValueError("JSON nested too deeply") from None
        return msg if isinstance(msg, dict) else None

    def close(self) -> None:
        for t in self._transports:
            t.close()


def _has_surrogate(line: bytes) -> bool:
    """Whether ``line`` may hold a lone surrogate: the regex only when a ``\\u`` escape or a
    surrogate's UTF-8 lead byte is there at all (two C searches, ~1 ms over 8 MiB, vs ~40 ms)."""
    return (b"\\u" in line or b"\xed" in line) and _SURROGATE_HINT.search(line) is not None


def _weigh_line(line: bytes) -> tuple[str | None, bool]:
    """``within_cost_cap(line)`` and, when within, whether it may hold a lone surrogate."""
    text = within_cost_cap(line)
    return text, text is not None and _has_surrogate(line)


def _parse(data: bytes | str) -> Any:
    """``json.loads``; a long line without the cyclic collector. Its up to ~260,000 new
    containers set off collections of the host's whole heap mid-parse (8,000 arrays nested 12
    deep, a 200 kB line: 0.12 s on the event loop in a session); JSON makes no cycles to find."""
    if len(data) <= GC_FREE_PARSE_BYTES or not gc.isenabled():
        return json.loads(data)
    gc.disable()
    try:
        return json.loads(data)
    finally:
        gc.enable()


def _encode(obj: Any) -> bytes:
    text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
    try:
        return text.encode()
    except UnicodeEncodeError:
        # A lone surrogate (a file name's undecodable byte): escaped, JSON.parse in the VM reads it.
        return json.dumps(obj, separators=(",", ":")).encode()


def _well_formed(value: Any) -> Any:
    """``value`` with every lone surrogate replaced by U+FFFD (``String.prototype.toWellFormed``)."""
    if isinstance(value, str):
        # UTF-16 round trip: a surrogate pair becomes its character, each lone one a single U+FFFD.
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace") if _lone(value) else value
    if isinstance(value, list):
        return [_well_formed(v) for v in value]
    if isinstance(value, dict):
        return {_well_formed(k): _well_formed(v) for k, v in value.items()}
    return value


def _lone(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return True
    return False


def _admit(channel: _Channel, pending: int, new: int) -> VmOutcome | None:
    """``None`` when ``new`` more requests fit the run's caps, else the outcome that ends it."""
    channel.requests += new
    if pending + new > MAX_PENDING_REQUESTS:
        err = BudgetExhausted(
            f"the script has more than {MAX_PENDING_REQUESTS} host requests outstanding at once",
            resource="pending_requests",
            reason="max_pending_requests",
        )
    elif channel.requests > MAX_REQUESTS:
        err = BudgetExhausted(
            f"the script sent more than {MAX_REQUESTS} host requests (a loop re-asking the host "
            "instead of computing)",
            resource="requests",
            reason="max_requests",
        )
    else:
        return None
    return VmOutcome(False, kind="aborted", error=err.message, value=err)


async def run_script(
    job: dict[str, Any],
    handle: Handler,
    deadline: float,
    *,
    per_call: bool = False,
    vm_pool: VmPool | None = None,
) -> VmOutcome:
    """Run one script to its end (see the module docstring). ``deadline`` is in ``loop.time()``.

    ``handle`` answers the requests of one ``calls`` message together (``per_call=False``: a program's
    batch, checked as a whole before any call runs) or each request on its own as soon as it is done
    (``per_call=True``: workflow steps, which finish independently). Replies go back as they come.
    """
    loop = asyncio.get_running_loop()
    started = loop.time()
    timeout_ms = max(1, int((deadline - started) * 1000))
    fut = (vm_pool or pool()).take()
    try:
        proc = await asyncio.shield(asyncio.wrap_future(fut))
    except asyncio.CancelledError:
        fut.add_done_callback(_drop_started)  # a child still starting must not be left behind
        raise
    channel = _Channel(proc)
    outcome: VmOutcome | None = None
    handlers: set[asyncio.Task[list[dict[str, Any]]]] = set()
    receiver: asyncio.Task[dict[str, Any] | None] | None = None
    _ACTIVE.add(proc.pid)
    try:
        await channel.open()
        ready = await _receive_by(channel, deadline + GRACE_S)
        if ready is None or ready.get("t") != "ready":
            outcome = _crashed(proc, channel, "the QuickJS child did not start")
            return outcome
        channel.send({**job, "timeoutMs": timeout_ms})
        if not per_call:
            outcome = await _run_batches(channel, proc, handle, deadline)
            return outcome
        receiver = asyncio.ensure_future(channel.receive())
        while outcome is None:
            # Host calls are cut at the deadline; the child gets the grace to report on its own.
            limit = (deadline if handlers else deadline + GRACE_S) - loop.time()
            done, _ = await asyncio.wait(
                {receiver, *handlers}, timeout=max(0.0, limit), return_when=asyncio.FIRST_COMPLETED
            )
            if not done:
                outcome = VmOutcome(False, kind="timeout", error="program script timed out")
                break
            replies: list[dict[str, Any]] = []
            for task in done:
                if task is receiver:
                    continue
                handlers.discard(task)  # type: ignore[arg-type]
                try:
                    replies.extend(task.result())  # type: ignore[arg-type]
                except HandlerAbort as abort:
                    outcome = VmOutcome(False, kind="aborted", error=str(abort.error), value=abort.error)
                    break
            if outcome is None and replies:
                async with asyncio.timeout_at(deadline):
                    await channel.send_replies(replies)  # finished together: settled together
            if outcome is None and receiver in done:
                outcome = _on_message(receiver.result(), proc, channel, handle, handlers, per_call)
                receiver = asyncio.ensure_future(channel.receive())
        return outcome
    except LineTooManyValues:
        err = BudgetExhausted(
            f"the script sent the host a message costing more than {MAX_LINE_COST} units to parse "
            "(each value or key 1, each array or object 4, each fraction 2, each exponent 4: arguments "
            "or a result this large cost the host far more memory than its bytes); return a summary",
            resource="vm_message_values",
            reason="max_message_values",
        )
        outcome = VmOutcome(False, kind="aborted", error=err.message, value=err)
        return outcome
    except (ValueError, asyncio.LimitOverrunError, asyncio.IncompleteReadError) as exc:
        outcome = VmOutcome(
            False,
            kind="protocol",
            error=f"the VM sent a message over {MAX_LINE_BYTES} bytes or bad JSON: {exc}",
        )
        return outcome
    except TimeoutError:
        outcome = VmOutcome(False, kind="timeout", error="program script timed out")
        return outcome
    finally:
        if outcome is None or outcome.kind in _KILL_AFTER:
            kill(proc)  # cancelled, past the deadline, or misbehaving: no settle beyond the grace
        pending = [t for t in (receiver, *handlers) if t is not None and not t.done()]
        for task in pending:
            task.cancel()  # a host call still running when the script ended is cancelled, and awaited
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        channel.close()
        if outcome is not None:
            if outcome.kind == "crash" and job.get("sliceMs") and proc.returncode == -signal.SIGXCPU:
                outcome.kind = "runaway"  # the child's CPU fence: native work past the slice cap
            if outcome.kind == "timeout" and loop.time() < deadline - 0.05:
                # The VM was interrupted before the deadline: the per-slice cap (a runaway loop
                # between host requests), or a script throwing its own "interrupted" error.
                outcome.kind = "runaway" if job.get("sliceMs") else "script"
            outcome.duration_ms = int((loop.time() - started) * 1000)
        if outcome is not None and outcome.kind not in _KILL_AFTER:
            # It reported and is exiting on its own: reap it off the caller's path.
            threading.Thread(
                target=_reap_blocking, args=(proc,), name="a3s-quickjs-reaper", daemon=True
            ).start()
        else:
            await _reap(proc)
            _ACTIVE.discard(proc.pid)


def _reap_blocking(proc: subprocess.Popen[bytes]) -> None:
    try:
        proc.wait(REAP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        kill(proc)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(REAP_TIMEOUT_S)
    close_pipes(proc)
    _ACTIVE.discard(proc.pid)


async def _run_batches(
    channel: _Channel, proc: subprocess.Popen[bytes], handle: Handler, deadline: float
) -> VmOutcome:
    """A program: the child waits for the answer to each batch, so batches and its turns alternate
    (no concurrent reading needed — the cheap path for the many small calls a script makes)."""
    while True:
        msg = await _receive_by(channel, deadline + GRACE_S)
        if msg is None:
            return _crashed(proc, channel, "the QuickJS child exited unexpectedly")
        if msg.get("t") == "done":
            return _finished(msg)
        calls = msg.get("calls")
        if msg.get("t") != "calls" or not isinstance(calls, list):
            return VmOutcome(False, kind="protocol", error="unexpected message from the VM")
        refused = _admit(channel, 0, len(calls))
        if refused is not None:
            return refused
        try:
            async with asyncio.timeout_at(deadline):
                replies = await handle(calls)
                await channel.send_replies(replies)
        except TimeoutError:
            return VmOutcome(False, kind="timeout", error="program script timed out")
        except HandlerAbort as abort:
            return VmOutcome(False, kind="aborted", error=str(abort.error), value=abort.error)


def _on_message(
    msg: dict[str, Any] | None,
    proc: subprocess.Popen[bytes],
    channel: _Channel,
    handle: Handler,
    handlers: set[asyncio.Task[list[dict[str, Any]]]],
    per_call: bool,
) -> VmOutcome | None:
    """One message from the child: start its requests' handlers, or the run's outcome."""
    if msg is None:
        return _crashed(proc, channel, "the QuickJS child exited unexpectedly")
    kind = msg.get("t")
    if kind == "done":
        return _finished(msg)
    if kind != "calls" or not isinstance(msg.get("calls"), list):
        return VmOutcome(False, kind="protocol", error="unexpected message from the VM")
    calls = msg["calls"]
    refused = _admit(channel, len(handlers), len(calls))  # each holds a host task until answered
    if refused is not None:
        return refused
    batches = [[c] for c in calls] if per_call else [calls]
    for batch in batches:
        handlers.add(asyncio.ensure_future(handle(batch)))
    return None


def _drop_started(fut: concurrent.futures.Future[subprocess.Popen[bytes]]) -> None:
    if not fut.cancelled() and fut.exception() is None:
        proc = fut.result()
        kill(proc)
        threading.Thread(target=discard, args=(proc,), daemon=True).start()


def active_pids() -> set[int]:
    """Children running a script right now."""
    return set(_ACTIVE)


async def _receive_by(channel: _Channel, when: float) -> dict[str, Any] | None:
    async with asyncio.timeout_at(when):
        return await channel.receive()


async def _reap(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        close_pipes(proc)
        return
    try:
        await asyncio.to_thread(proc.wait, REAP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        kill(proc)
        await asyncio.to_thread(proc.wait, REAP_TIMEOUT_S)
    close_pipes(proc)


def _crashed(proc: subprocess.Popen[bytes], channel: _Channel, what: str) -> VmOutcome:
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=0.2)
    code = proc.returncode
    how = f" (signal {-code})" if code is not None and code < 0 else f" (exit {code})" if code else ""
    tail = bytes(channel.stderr).decode("utf-8", "replace").strip().splitlines()[-3:]
    detail = f": {' | '.join(tail)}" if tail else ""
    return VmOutcome(False, kind="crash", error=f"{what}{how}{detail}")


def _finished(msg: dict[str, Any]) -> VmOutcome:
    raw_logs = msg.get("logs")  # untrusted: a script's JSON.stringify may have made it anything
    logs = [str(x) for x in raw_logs[:1000]] if isinstance(raw_logs, list) else []
    result = msg.get("result")
    if isinstance(result, dict):
        if result.get("ok"):
            return VmOutcome(True, value=result.get("value"), logs=logs)
        error = str(result.get("error", ""))
        kind = _rejection_kind(error)
        ek, step = result.get("errorKind"), result.get("stepId")
        return VmOutcome(
            False,
            kind=kind,
            error=_trim_stack(error),
            error_kind=ek if isinstance(ek, dict) else None,
            logs=logs,
            step_id=step if isinstance(step, str) else None,
        )
    return VmOutcome(False, kind=str(msg.get("kind") or "script"), error=str(msg.get("error", "")), logs=logs)


def _rejection_kind(error: str) -> str:
    """A rejected entry promise: the VM's own limits surface as InternalErrors."""
    if error.startswith("InternalError: out of memory"):
        return "memory"
    if error.startswith("InternalError: stack overflow"):
        return "stack"
    if error.startswith("InternalError: interrupted"):
        return "timeout"
    return "script"


# Frames of the bridge itself (prelude.js), not of the script.
_BRIDGE_NAMES = ("start", "settle", "hostError", "toolResult", "request", "next", "job")
_BRIDGE_FRAMES = (*(f"at {name} (" for name in _BRIDGE_NAMES), "at <eval>")


def _trim_stack(error: str) -> str:
    """Drop the bridge's own frames (``start``, ``<eval>``) and collapse repeated frames."""
    out: list[str] = []
    repeats = 0
    for line in error.splitlines():
        s = line.strip()
        if s.startswith(_BRIDGE_FRAMES):
            continue
        if out and line == out[-1]:
            repeats += 1
            continue
        if repeats:
            out.append(f"    ... ({repeats} more identical frames)")
            repeats = 0
        out.append(line)
    if repeats:
        out.append(f"    ... ({repeats} more identical frames)")
    text = "\n".join(out).strip()
    return text[:4096]
