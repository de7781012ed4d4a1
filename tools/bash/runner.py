"""The bash process runtime: one ``bash -c`` under one deadline, killed as a whole group (SPEC B-2, K-6).

``run_shell`` starts ``bash -c <script>`` (optionally inside a sandbox, see ``prepare``) with:

- its own session and process group (``start_new_session=True``), so ``killpg(pid, SIGKILL)``
  reaches every process it started that did not leave the group itself;
- stdin on ``/dev/null``; stdout and stderr on two pipes we read ourselves, non-blocking, in
  ``READ_CHUNK_BYTES`` pieces, straight into a bounded ``OutputCapture``;
- a side pipe (a high fd, ``CWD_REPORT_FD_MIN`` or above) on which an ``EXIT`` trap writes
  ``pwd -P``: that is how the session learns where the shell ended up, without touching output.

One deadline covers draining both pipes *and* the exit of the shell. A background grandchild that
keeps a pipe open cannot extend it: after the shell exits we keep draining until EOF, but only up
to the deadline; then the group is killed and the call reports a timeout (``timed_out``). We chose
this over a short post-exit grace period because a process still writing into our pipe is still
part of the command's observable work; model-facing callers that want a server should redirect
its output (it is then killed when the call ends, see below) — ``job_action:"detach"`` is not
implemented.

Cleanup always runs, on success, timeout, error and asyncio cancellation, in this order:
``killpg(SIGKILL)`` *before* the shell is reaped (a zombie keeps its pid reserved, so the group id
cannot be recycled under us) → stop reading and close our pipe ends (never wait for EOF) → up to
``SETTLE_S`` (500 ms) for the shell to exit → reap it (a daemon thread finishes the reap if the
settle was cut short). Consequence, documented on purpose: no process of the group outlives the
call, even after a normal exit (``sleep 300 >/dev/null &`` dies with the call). A process that
called ``setsid`` itself escapes the group; inside the sandbox the PID namespace still kills it.

Exit is observed with a pidfd (Linux ≥ 5.3), else by polling ``waitid(WNOWAIT)``; neither reaps,
so the kill-before-reap order holds in both.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kernel.errors import Transport, Unsupported
from tools.bash.capture import READ_CHUNK_BYTES, OutputCapture, Stream
from tools.bash.sandbox import SandboxCommand

SETTLE_S = 0.5
EXIT_POLL_S = 0.02
CWD_REPORT_FD_MIN = 200
MAX_CWD_REPORT_BYTES = 64 * 1024
SHELL = "bash"

Prepare = Callable[[list[str]], SandboxCommand]
OnOutput = Callable[[Stream, bytes], None]


@dataclass(frozen=True, slots=True)
class ShellOutcome:
    """How the shell ended. ``returncode`` is negative for a signal (Popen convention)."""

    returncode: int | None
    timed_out: bool
    duration_ms: int
    final_cwd: str | None  # the physical cwd the shell reported at exit; None if it did not report

    @property
    def exit_code(self) -> int | None:
        """Shell convention: 128 + signal number for a signalled process."""
        if self.returncode is None:
            return None
        return self.returncode if self.returncode >= 0 else 128 - self.returncode


def shell_script(command: str, report_fd: int) -> str:
    """``command`` preceded by one line arming the cwd report.

    The trap line is a complete line of its own, so nothing in ``command`` (heredocs, a trailing
    backslash, syntax errors) can change how it parses; bash parses ``-c`` text command by command,
    so the trap is armed before any of ``command`` runs. A command that replaces the ``EXIT`` trap
    or ``exec``s away simply does not report, and the session keeps its previous cwd.
    """
    return f"trap 'pwd -P 2>/dev/null >&{report_fd}' EXIT\n{command}"


async def run_shell(
    command: str,
    *,
    cwd: str,
    env: Mapping[str, str],
    timeout_s: float,
    capture: OutputCapture,
    prepare: Prepare | None = None,
    on_output: OnOutput | None = None,
) -> ShellOutcome:
    """Run ``command``; return when it finished or the deadline passed. Re-raises cancellation."""
    loop = asyncio.get_running_loop()
    started = time.monotonic()
    deadline = loop.time() + max(0.0, timeout_s)

    report_r, report_w0 = os.pipe()
    # Move the write end high so it does not collide with fds 3-9 that scripts use themselves.
    report_w = fcntl.fcntl(report_w0, fcntl.F_DUPFD_CLOEXEC, CWD_REPORT_FD_MIN)
    os.close(report_w0)
    os.set_blocking(report_r, False)

    prepared: SandboxCommand | None = None
    try:
        argv = [SHELL, "-c", shell_script(command, report_w)]
        pass_fds: tuple[int, ...] = (report_w,)
        if prepare is not None:
            try:
                prepared = prepare(argv)
            except (OSError, RuntimeError, ValueError) as exc:
                # The sandbox refused to build its command line: nothing ran.
                raise Unsupported(f"the sandbox could not prepare the command: {exc}") from exc
            argv, pass_fds = prepared.argv, pass_fds + prepared.pass_fds
        # Popen, not asyncio's subprocess: we own the pipe fds (add_reader, close without EOF) and
        # pass the cwd-report fd. fork/exec itself does not block the loop for long.
        proc = subprocess.Popen(  # noqa: ASYNC220
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=dict(env),
            start_new_session=True,
            pass_fds=pass_fds,
            bufsize=0,
        )
    except OSError as exc:
        os.close(report_r)
        raise Transport(f"could not start {SHELL}: {exc}", op="bash") from exc
    except BaseException:
        os.close(report_r)
        raise
    finally:
        # Only the child keeps the write end; once it (and its descendants) exit, the pipe is done.
        os.close(report_w)
        if prepared is not None:
            prepared.close()

    try:
        watch = _ProcessWatch(loop, proc, capture, on_output)
    except BaseException:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
        os.close(report_r)
        raise
    timed_out = False
    exited_on_its_own = False
    try:
        async with asyncio.timeout_at(deadline):
            # asyncio.wait (unlike gather) never cancels the futures it waits on, so after a
            # timeout ``watch.exited`` still tells whether the shell itself had finished.
            await asyncio.wait(watch.waiters())
        exited_on_its_own = True
    except TimeoutError:
        timed_out = True
        exited_on_its_own = watch.exited.done()
    finally:
        try:
            await watch.close()
        finally:
            final_cwd = _read_cwd_report(report_r) if exited_on_its_own else None
            os.close(report_r)

    return ShellOutcome(
        returncode=proc.returncode,
        timed_out=timed_out,
        duration_ms=int((time.monotonic() - started) * 1000),
        final_cwd=final_cwd,
    )


class _ProcessWatch:
    """Event-loop readers for the two pipes plus an exit watcher; ``close()`` is the cleanup."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        proc: subprocess.Popen[bytes],
        capture: OutputCapture,
        on_output: OnOutput | None,
    ) -> None:
        self._loop = loop
        self._proc = proc
        self._capture = capture
        self._on_output = on_output
        self.exited: asyncio.Future[None] = loop.create_future()
        self._eof: dict[int, asyncio.Future[None]] = {}
        self._readers: list[int] = []
        self._pidfd: int | None = None
        self._poller: asyncio.Task[None] | None = None
        assert proc.stdout is not None and proc.stderr is not None
        for pipe, stream in ((proc.stdout, "stdout"), (proc.stderr, "stderr")):
            fd = pipe.fileno()
            os.set_blocking(fd, False)
            self._eof[fd] = loop.create_future()
            loop.add_reader(fd, self._on_readable, fd, stream)
            self._readers.append(fd)
        try:
            self._pidfd = os.pidfd_open(proc.pid)
        except (AttributeError, OSError):
            self._poller = loop.create_task(self._poll_exit())
        else:
            loop.add_reader(self._pidfd, self._on_exit)

    def waiters(self) -> list[asyncio.Future[None]]:
        return [*self._eof.values(), self.exited]

    def _on_readable(self, fd: int, stream: Stream) -> None:
        try:
            data = os.read(fd, READ_CHUNK_BYTES)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._stop_reading(fd)
            return
        head_part = self._capture.feed(stream, data)
        if head_part and self._on_output is not None:
            self._on_output(stream, head_part)

    def _stop_reading(self, fd: int) -> None:
        if fd in self._readers:
            self._loop.remove_reader(fd)
            self._readers.remove(fd)
        fut = self._eof.get(fd)
        if fut is not None and not fut.done():
            fut.set_result(None)

    def _on_exit(self) -> None:
        if self._pidfd is not None:
            self._loop.remove_reader(self._pidfd)
        if not self.exited.done():
            self.exited.set_result(None)

    async def _poll_exit(self) -> None:
        # waitid(WNOWAIT) observes the exit without reaping, keeping the pid (= pgid) reserved.
        while True:
            try:
                flags = os.WEXITED | os.WNOHANG | os.WNOWAIT  # WNOHANG: never blocks
                info = os.waitid(os.P_PID, self._proc.pid, flags)  # noqa: ASYNC222
            except ChildProcessError:
                info = True  # already reaped elsewhere: treat as exited
            if info is not None:
                if not self.exited.done():
                    self.exited.set_result(None)
                return
            await asyncio.sleep(EXIT_POLL_S)

    async def close(self) -> None:
        """Kill the group, stop reading, settle ≤ ``SETTLE_S``, reap. Safe under cancellation."""
        proc = self._proc
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        for fd in list(self._readers):
            self._stop_reading(fd)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
        cancelled = False
        if not self.exited.done():
            try:
                await asyncio.wait_for(asyncio.shield(self.exited), SETTLE_S)
            except TimeoutError:
                pass
            except asyncio.CancelledError:
                # Cancelled again while settling: finish the cleanup synchronously, then re-raise.
                cancelled = True
        if self._poller is not None:
            self._poller.cancel()
        if self._pidfd is not None:
            if not self.exited.done():
                self._loop.remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None
        if not self.exited.done():
            self.exited.cancel()
        if proc.poll() is None:
            # SIGKILLed but not yet gone (e.g. in uninterruptible sleep): finish the reap off-loop.
            threading.Thread(target=proc.wait, name=f"bash-reap-{proc.pid}", daemon=True).start()
        if cancelled:
            raise asyncio.CancelledError


def _read_cwd_report(fd: int) -> str | None:
    """The last line the EXIT trap wrote, without waiting (a grandchild may hold the write end)."""
    try:
        data = os.read(fd, MAX_CWD_REPORT_BYTES)
    except (BlockingIOError, OSError):
        return None
    lines = [line for line in data.split(b"\n") if line]
    if not lines:
        return None
    return os.fsdecode(lines[-1])
