"""The bash process runtime: one ``bash -c`` under one deadline, killed as a whole group (SPEC B-2, K-6).

``run_shell`` starts ``bash -c <script>`` (optionally inside a sandbox, see ``prepare``) with:

- its own session and process group, started through ``tools._proc.spawn``: a supervisor process
  (a child subreaper) owns it, so when the call ends — or this process dies, SIGKILL included —
  the group *and every other descendant* (``setsid`` daemons, double forks) is killed;
- stdin on ``/dev/null``; stdout and stderr on two pipes we read ourselves, non-blocking, in
  ``READ_CHUNK_BYTES`` pieces, straight into a bounded ``OutputCapture``;
- a side pipe (a high fd, ``CWD_REPORT_FD_MIN`` or above) on which an ``EXIT`` trap writes
  ``pwd -P``: that is how the session learns where the shell ended up, without touching output.

One deadline covers draining both pipes *and* the exit of the shell. A background grandchild that
keeps a pipe open cannot extend it: after the shell exits we keep draining until EOF, but only up
to the deadline; then the tree is killed and the call reports a timeout (``timed_out``). We chose
this over a short post-exit grace period because a process still writing into our pipe is still
part of the command's observable work; model-facing callers that want a server should redirect
its output (it is then killed when the call ends, see below) — ``job_action:"detach"`` is not
implemented.

Cleanup always runs, on success, timeout, error and asyncio cancellation, in this order: kill the
process group (the supervisor keeps the shell unreaped until we let go, so the group id cannot
have been recycled) and let go, upon which the supervisor kills every remaining descendant and
reaps them all → stop reading and close our pipe ends (never wait for EOF) → up to ``SETTLE_S``
(500 ms) for the shell's exit. Consequence, documented on purpose: no process the command started
outlives the call, even after a normal exit (``sleep 300 >/dev/null &`` dies with the call; a
``setsid sleep 300 &`` dies a moment later, when its supervisor gets to it).
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kernel.errors import Transport, Unsupported
from tools._proc import DEVNULL, PIPE, Child, spawn
from tools.bash.capture import READ_CHUNK_BYTES, OutputCapture, Stream
from tools.bash.sandbox import SandboxCommand

SETTLE_S = 0.5
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
    cwd_fd: int | None = None,
    capture: OutputCapture,
    prepare: Prepare | None = None,
    on_output: OnOutput | None = None,
) -> ShellOutcome:
    """Run ``command``; return when it finished or the deadline passed. Re-raises cancellation.

    ``cwd`` is the directory's path (for the sandbox's own ``--chdir``); with ``cwd_fd`` the
    process is started in that descriptor's directory (``fchdir``), never by looking ``cwd`` up.
    """
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
        # Not asyncio's subprocess: we own the pipe fds (add_reader, close without EOF), pass the
        # cwd-report fd, and tie the whole process tree to this process (tools/_proc.py).
        proc = spawn(
            argv,
            cwd=cwd if cwd_fd is None else None,
            cwd_fd=cwd_fd,
            env=env,
            stdin=DEVNULL,
            stdout=PIPE,
            stderr=PIPE,
            pass_fds=pass_fds,
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
        proc.kill()
        proc.close()
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
            capture.end()  # no more output: finish the stream digest (ends its thread)

    return ShellOutcome(
        returncode=proc.returncode,
        timed_out=timed_out,
        duration_ms=int((time.monotonic() - started) * 1000),
        final_cwd=final_cwd,
    )


class _ProcessWatch:
    """Event-loop readers for the two pipes plus the exit notification; ``close()`` is the cleanup."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        proc: Child,
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
        self._status_fd: int | None = None
        assert proc.stdout is not None and proc.stderr is not None
        for pipe, stream in ((proc.stdout, "stdout"), (proc.stderr, "stderr")):
            fd = pipe.fileno()
            os.set_blocking(fd, False)
            self._eof[fd] = loop.create_future()
            loop.add_reader(fd, self._on_readable, fd, stream)
            self._readers.append(fd)
        self._status_fd = proc.exit_fd
        loop.add_reader(self._status_fd, self._on_status)

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

    def _on_status(self) -> None:
        # The shell exited (its supervisor keeps it unreaped until we let go, so its process
        # group id stays reserved): stop listening until close() waits for the clean-up.
        if self._proc.poll() is not None:
            self._stop_status()
            if not self.exited.done():
                self.exited.set_result(None)

    def _stop_status(self) -> None:
        if self._status_fd is not None:
            self._loop.remove_reader(self._status_fd)
            self._status_fd = None

    async def close(self) -> None:
        """Kill the group now (the supervisor then kills every other descendant), stop reading,
        settle ≤ ``SETTLE_S`` for the shell's exit. Cancel-safe."""
        proc = self._proc
        proc.kill()
        for fd in list(self._readers):
            self._stop_reading(fd)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
        self._stop_status()
        cancelled = False
        if proc.poll() is None:
            gone: asyncio.Future[None] = self._loop.create_future()

            def check() -> None:
                if proc.poll() is not None and not gone.done():
                    gone.set_result(None)

            fd = proc.exit_fd
            self._loop.add_reader(fd, check)
            try:
                await asyncio.wait_for(asyncio.shield(gone), SETTLE_S)
            except TimeoutError:
                pass
            except asyncio.CancelledError:
                # Cancelled again while settling: the supervisor finishes the clean-up alone.
                cancelled = True
            finally:
                self._loop.remove_reader(fd)
        proc.poll()
        if not self.exited.done():
            self.exited.cancel()
        proc.close()
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
