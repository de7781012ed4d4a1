"""The handles ``tools._proc.spawn`` returns: ``TiedProcess`` (under a supervisor) and ``UntiedProcess``.

Both follow the ``Child`` protocol: Popen-like (``pid``, pipes, ``poll``/``wait``), plus
``exit_fd`` (readable when there is news about the exit, for event loops), ``kill`` (the whole
tree, or the group for the untied fallback), ``release`` (let go: the supervisor then kills what
is left) and ``finished``. Neither reaps the command before the group kill, so the group id a kill
names can never have been recycled.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import threading
import time
import weakref
from typing import IO, Protocol


class Child(Protocol):
    """What ``spawn`` returns: a Popen-like handle whose ``exit_fd`` turns readable on exit."""

    pid: int
    returncode: int | None
    stdin: IO[bytes] | None
    stdout: IO[bytes] | None
    stderr: IO[bytes] | None

    @property
    def exit_fd(self) -> int: ...

    @property
    def finished(self) -> bool: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def wait_finished(self, timeout: float) -> bool: ...

    def kill(self) -> None: ...

    def release(self) -> None: ...

    def close(self) -> None: ...


class TiedProcess:
    """A running command owned by a supervisor. Popen-like: ``pid``, ``stdout``, ``poll()``, ``wait()``.

    ``kill()`` SIGKILLs the command's group and (through the supervisor) every descendant;
    ``release()`` does the same without the immediate group kill — call it when done with the
    process; ``close()`` releases and closes every fd. ``exit_fd`` becomes readable when the
    command exits (and again when the supervisor finished cleaning up).
    """

    def __init__(self, pid: int, status_r: int, ctrl_w: int, new_session: bool) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self.stdin: IO[bytes] | None = None
        self.stdout: IO[bytes] | None = None
        self.stderr: IO[bytes] | None = None
        self._status_r = status_r
        self._ctrl_w = ctrl_w
        self._new_session = new_session
        self._buffer = b""
        self._done = False
        self._eof = False
        self._lock = threading.Lock()
        _live.add(self)

    @property
    def exit_fd(self) -> int:
        return self._status_r

    @property
    def finished(self) -> bool:
        """The supervisor reported that the command and all its descendants are gone."""
        self._pump()
        return self._done

    def poll(self) -> int | None:
        self._pump()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if self._status_r < 0:  # closed before the exit was reported: it was killed
                self.returncode = -signal.SIGKILL
                break
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise subprocess.TimeoutExpired("spawned command", timeout or 0.0)
            select.select([self._status_r], [], [], remaining)
        assert self.returncode is not None
        return self.returncode

    def wait_finished(self, timeout: float) -> bool:
        """Wait until every process of the command is gone (after ``release``/``kill``)."""
        deadline = time.monotonic() + timeout
        while not self.finished:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self._status_r < 0:
                return False
            select.select([self._status_r], [], [], remaining)
        return True

    def kill(self) -> None:
        with self._lock:
            if self._new_session and self._ctrl_w >= 0:
                # Synchronous group kill. Safe until we release (under the same lock): the
                # supervisor reaps the command only after that, so its pid — the group id —
                # cannot have been recycled.
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.pid, signal.SIGKILL)
        self.release()

    def release(self) -> None:
        with self._lock:
            if self._ctrl_w >= 0:
                with contextlib.suppress(OSError):
                    os.close(self._ctrl_w)
                self._ctrl_w = -1

    def close(self) -> None:
        self.release()
        for pipe in (self.stdin, self.stdout, self.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        with self._lock:
            if self._status_r >= 0:
                with contextlib.suppress(OSError):
                    os.close(self._status_r)
                self._status_r = -1
        _live.discard(self)

    def __enter__(self) -> TiedProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        # A handle dropped without close() must still let its supervisor finish.
        with contextlib.suppress(Exception):
            self.close()

    def _pump(self) -> None:
        """Read whatever status lines arrived, without blocking."""
        with self._lock:
            while not self._eof and self._status_r >= 0:
                if not select.select([self._status_r], [], [], 0)[0]:
                    return
                try:
                    data = os.read(self._status_r, 4096)
                except InterruptedError:
                    continue
                except OSError:
                    data = b""
                if not data:
                    self._eof = self._done = True
                    if self.returncode is None:
                        self.returncode = -signal.SIGKILL  # the supervisor vanished mid-run
                    return
                self._buffer += data
                *lines, self._buffer = self._buffer.split(b"\n")
                for line in lines:
                    self._on_line(line.decode("ascii", "replace"))

    def _on_line(self, line: str) -> None:
        kind, _, value = line.partition(" ")
        if kind == "X" and self.returncode is None:
            self.returncode = int(value)
        elif kind == "D":
            self._done = True

    def _close_control_in_child(self) -> None:
        # After fork: the child must not keep our children alive by holding their control pipe.
        if self._ctrl_w >= 0:
            with contextlib.suppress(OSError):
                os.close(self._ctrl_w)
            self._ctrl_w = -1


_live: weakref.WeakSet[TiedProcess] = weakref.WeakSet()


def live_processes() -> list[TiedProcess]:
    """Handles not yet closed (``tools._proc`` closes their control pipes in a forked child)."""
    return list(_live)


class UntiedProcess:
    """The fallback when no helper can run: a Popen with the same surface, tied to nothing.

    Like the supervisor, it observes the exit without reaping (``waitid(WNOWAIT)``) so the group
    kill in ``release()`` cannot hit a recycled group id; it reaps afterwards.
    """

    def __init__(self, popen: subprocess.Popen[bytes], new_session: bool) -> None:
        self._popen = popen
        self._new_session = new_session
        self.pid = popen.pid
        self.returncode: int | None = None
        self.stdin, self.stdout, self.stderr = popen.stdin, popen.stdout, popen.stderr
        self._pidfd = os.pidfd_open(popen.pid) if hasattr(os, "pidfd_open") else -1
        self._released = False

    @property
    def exit_fd(self) -> int:
        return self._pidfd

    @property
    def finished(self) -> bool:
        return self._released and self.poll() is not None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                info = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                info = None
                self.returncode = (
                    self._popen.returncode if self._popen.returncode is not None else -signal.SIGKILL
                )
            if info is not None:
                self.returncode = info.si_status if info.si_code == os.CLD_EXITED else -info.si_status
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise subprocess.TimeoutExpired("spawned command", timeout or 0.0)
            if self._pidfd >= 0:
                select.select([self._pidfd], [], [], remaining)
            else:
                time.sleep(0.01)
        assert self.returncode is not None
        return self.returncode

    def wait_finished(self, timeout: float) -> bool:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.wait(timeout)
        return self.finished

    def kill(self) -> None:
        self.release()

    def release(self) -> None:
        if not self._released:
            if self._new_session:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.pid, signal.SIGKILL)
            else:
                with contextlib.suppress(ProcessLookupError):
                    self._popen.kill()
        self._released = True

    def close(self) -> None:
        self.release()
        for pipe in (self.stdin, self.stdout, self.stderr):
            if pipe is not None:
                pipe.close()
        if self._pidfd >= 0:
            os.close(self._pidfd)
            self._pidfd = -1
        if self._popen.poll() is None:
            # SIGKILLed but not yet gone (uninterruptible sleep): finish the reap off this thread.
            threading.Thread(target=self._popen.wait, name=f"reap-{self.pid}", daemon=True).start()
