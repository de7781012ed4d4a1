"""Child processes tied to this process's life: ``spawn()`` (issue 15 item 7; SPEC K-6).

Tools that run programs (``bash``, ripgrep, later the ``program`` VM) start them with ``spawn``,
never with a bare ``subprocess.Popen``. The guarantee: **when this process dies — SIGKILL
included — or lets go of a child, the child and every process it started die too**, the ones
that called ``setsid`` or double-forked included. So a job redelivered after its worker was
killed never runs beside the orphan of its first attempt, and a host-direct ``bash`` call can no
longer leave a ``setsid`` daemon behind.

How (see ``tools/_proc_zygote.py`` for the other side):

- one small helper process per process that spawns (started on first use with ``python -I -S``;
  a forked child starts its own), reached over a socket pair. It keeps one *supervisor* forked
  ahead of time and hands us a socket to it; we send the spawn request (argv, env, cwd and the
  fds, by ``SCM_RIGHTS``) straight to that supervisor, a child subreaper, which starts the
  command with ``posix_spawn``;
- each command gets a **control pipe** whose only write end is held here (close-on-exec, and
  closed in forked children). Its EOF — ``TiedProcess.release()`` or this process dying — makes
  the supervisor kill the command's process group and then every remaining descendant;
- exit statuses and "all gone" come back on a **status pipe** (``exit_fd`` is readable when
  something arrived), so callers poll it or register it with an event loop.

Why not ``PR_SET_PDEATHSIG`` in a ``preexec_fn``: ``preexec_fn`` is unsafe in a threaded process,
and the death signal fires when the *thread* that forked exits — tools spawn from worker threads
(``asyncio.to_thread``), so the child would die early, or outlive us when the thread lingers. It
also ties only the direct child, not its descendants. Here no code runs between fork and exec in
this (threaded) process; the helper and supervisors are single-threaded.

What remains: nothing cleans up after a supervisor that is itself SIGKILLed (by an operator or
the OOM killer); a process cannot leave its supervisor's subtree without privileges. When the
helper cannot start (no ``pidfd``, not Linux) ``spawn`` falls back to an untied ``Popen``
(``UntiedProcess``: group kill only) and ``tied()`` is False.
"""

from __future__ import annotations

import array
import atexit
import contextlib
import errno
import json
import os
import resource
import select
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Final

from tools._proc_handles import Child, TiedProcess, UntiedProcess, live_processes

__all__ = ["DEVNULL", "PIPE", "Child", "SpawnError", "TiedProcess", "UntiedProcess", "spawn", "tied"]

PIPE: Final = subprocess.PIPE
DEVNULL: Final = subprocess.DEVNULL
ZYGOTE_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_proc_zygote.py")
SPAWN_TIMEOUT_S = 30.0
SEND_ATTEMPTS = 2  # a helper found dead is replaced once
_HEADER = struct.Struct("!II")  # payload length, fd count (the helper's ``HEADER``)


class SpawnError(OSError):
    """The spawn helper failed (not the program: a missing program is ``FileNotFoundError``)."""


class _Helper:
    """The per-process spawn helper (``_proc_zygote.py``) and the socket to it."""

    def __init__(self) -> None:
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-I", "-S", ZYGOTE_PATH, str(child.fileno())],
                stdin=subprocess.DEVNULL,
                pass_fds=(child.fileno(),),
                start_new_session=True,
            )
        except BaseException:
            parent.close()
            raise
        finally:
            child.close()
        self.sock = parent
        self.owner = os.getpid()
        self.lock = threading.Lock()

    def send(self, spec: dict[str, object], fds: Sequence[int]) -> None:
        """Hand the request to a supervisor the helper forked ahead of time (one retry if it died)."""
        body = json.dumps(spec).encode("utf-8", "surrogateescape")
        header = _HEADER.pack(len(body), len(fds))
        ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, _fd_array(fds))]
        for attempt in range(SEND_ATTEMPTS):
            supervisor = self._next_supervisor()
            try:
                sent = supervisor.sendmsg([header], ancillary)
                if sent != len(header):
                    supervisor.sendall(header[sent:])
                supervisor.sendall(body)
                return
            except OSError:
                if attempt + 1 == SEND_ATTEMPTS:
                    raise
            finally:
                supervisor.close()

    def _next_supervisor(self) -> socket.socket:
        with self.lock:
            self.sock.settimeout(SPAWN_TIMEOUT_S)
            try:
                data, ancdata, _flags, _addr = self.sock.recvmsg(
                    _HEADER.size, socket.CMSG_SPACE(4), socket.MSG_CMSG_CLOEXEC
                )
                while data and len(data) < _HEADER.size:  # the rest of a split header
                    more = self.sock.recv(_HEADER.size - len(data))
                    data += more
                    if not more:
                        break
            except TimeoutError as exc:
                raise SpawnError(errno.ETIMEDOUT, "the spawn helper did not answer") from exc
            fds = [
                fd
                for level, kind, payload in ancdata
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS
                for fd in array.array("i", payload[: len(payload) - len(payload) % 4])
            ]
            if not fds:
                raise SpawnError(errno.EPIPE, "the spawn helper is gone")
            self.sock.sendall(b"+")  # ask for the next one now, so it is ready by the next spawn
        for extra in fds[1:]:
            os.close(extra)
        return socket.socket(fileno=fds[0])

    def alive(self) -> bool:
        return self.proc.poll() is None

    def forget(self) -> None:
        """In a forked child: drop the parent's helper without touching the parent's socket state."""
        with contextlib.suppress(OSError):
            os.close(self.sock.detach())


def _fd_array(fds: Sequence[int]) -> bytes:
    return array.array("i", fds).tobytes()


_helper: _Helper | None = None
_helper_lock = threading.Lock()
_helper_failed: str | None = None


def _get_helper() -> _Helper | None:
    global _helper, _helper_failed
    with _helper_lock:
        if _helper is not None and _helper.owner == os.getpid() and _helper.alive():
            return _helper
        if _helper is not None and _helper.owner == os.getpid():
            with contextlib.suppress(OSError):
                _helper.sock.close()
            _helper.proc.wait()
        _helper = None
        if not hasattr(os, "pidfd_open") or not sys.platform.startswith("linux"):
            _helper_failed = "needs Linux with pidfd_open"
            return None
        try:
            _helper = _Helper()
        except OSError as exc:
            _helper_failed = f"{type(exc).__name__}: {exc}"
            return None
        _helper_failed = None
        return _helper


@atexit.register
def _stop_helper() -> None:
    """At exit: let the helper go (EOF on its socket) and reap it, so nothing is left unreaped."""
    global _helper
    helper, _helper = _helper, None
    if helper is not None and helper.owner == os.getpid():
        helper.sock.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            helper.proc.wait(timeout=2)


def _after_fork_in_child() -> None:
    global _helper
    if _helper is not None:
        _helper.forget()
        _helper = None
    for proc in live_processes():
        proc._close_control_in_child()


os.register_at_fork(after_in_child=_after_fork_in_child)


def tied() -> bool:
    """Whether ``spawn`` ties children to this process here (the helper could start)."""
    return _get_helper() is not None


def _resolve(program: str, env: Mapping[str, str] | None) -> str:
    if os.sep in program:
        return program
    path = (env or os.environ).get("PATH", os.defpath)
    found = shutil.which(program, path=path)
    if found is None:
        raise FileNotFoundError(errno.ENOENT, f"No such file or directory: {program!r}", program)
    return found


def spawn(
    argv: Sequence[str],
    *,
    cwd: str | os.PathLike[str] | None = None,
    cwd_fd: int | None = None,
    env: Mapping[str, str] | None = None,
    stdin: int = DEVNULL,
    stdout: int = PIPE,
    stderr: int = PIPE,
    pass_fds: Sequence[int] = (),
    new_session: bool = True,
    rlimits: Mapping[int, int] | None = None,
) -> Child:
    """Start ``argv`` tied to this process (see the module docstring). Raises ``OSError`` like Popen.

    ``stdin``/``stdout``/``stderr`` take ``PIPE``, ``DEVNULL`` or an fd; ``pass_fds`` keep their
    numbers in the child. ``rlimits`` maps ``resource.RLIMIT_*`` to a limit (soft and hard) set in
    the single-use supervisor just before it starts the command, which inherits it (without the
    spawn helper they are applied with ``prlimit(2)`` right after the start). The caller must
    ``close()`` the result (or ``release()`` it and close its pipes) when done: that is what lets
    the supervisor finish.

    ``cwd_fd`` (instead of ``cwd``) is a directory descriptor the command starts in: the supervisor
    ``fchdir``s to it, so a directory checked by the caller cannot be swapped for a symlink between
    the check and the start (the path is never resolved again). The caller keeps and closes it.
    """
    if cwd_fd is not None and cwd is not None:
        raise ValueError("spawn takes cwd or cwd_fd, not both")
    helper = _get_helper()
    if helper is None:
        if cwd_fd is not None:
            # Popen's child chdirs before it closes fds: /proc/self/fd/N is the descriptor's own
            # directory (a magic link), not a path looked up again.
            cwd = f"/proc/self/fd/{cwd_fd}"
        popen = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=None if env is None else dict(env),
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            pass_fds=tuple(pass_fds),
            start_new_session=new_session,
        )
        for resource_id, limit in (rlimits or {}).items():
            with contextlib.suppress(ProcessLookupError):
                resource.prlimit(popen.pid, resource_id, (limit, limit))
        return UntiedProcess(popen, new_session)
    exe = _resolve(argv[0], env)
    opened: list[int] = []  # every fd we created: ours are kept, the child's ends closed below
    child_ends: list[int] = []
    ours: dict[str, int] = {}
    try:
        for name, how in (("stdin", stdin), ("stdout", stdout), ("stderr", stderr)):
            if how == PIPE:
                r, w = os.pipe2(os.O_CLOEXEC)
                opened += [r, w]
                ours[name], end = (w, r) if name == "stdin" else (r, w)
                child_ends.append(end)
            elif how == DEVNULL:
                fd = os.open(os.devnull, (os.O_RDONLY if name == "stdin" else os.O_WRONLY) | os.O_CLOEXEC)
                opened.append(fd)
                child_ends.append(fd)
            else:
                child_ends.append(int(how))
        status_r, status_w = os.pipe2(os.O_CLOEXEC)
        ctrl_r, ctrl_w = os.pipe2(os.O_CLOEXEC)
        opened += [status_r, status_w, ctrl_r, ctrl_w]
        spec = {
            "exe": exe,
            "argv": [os.fsdecode(a) for a in argv],
            "env": dict(env if env is not None else os.environ),
            "cwd": os.fspath(cwd) if cwd is not None else ("" if cwd_fd is not None else os.getcwd()),
            "cwd_fd": cwd_fd is not None,  # then the last fd sent is the directory to fchdir to
            "targets": [0, 1, 2, *pass_fds],
            "new_session": new_session,
            "rlimits": [[int(k), int(v)] for k, v in (rlimits or {}).items()],
        }
        fds = [status_w, ctrl_r, *child_ends, *pass_fds, *([cwd_fd] if cwd_fd is not None else [])]
        for attempt in range(SEND_ATTEMPTS):
            try:
                helper.send(spec, fds)
                break
            except OSError as exc:
                replacement = _get_helper() if attempt + 1 < SEND_ATTEMPTS else None
                if replacement is None or replacement is helper:
                    raise SpawnError(exc.errno or errno.EPIPE, f"the spawn helper is gone: {exc}") from exc
                helper = replacement
        keep = {status_r, ctrl_w, *ours.values()}
        for fd in opened:
            if fd not in keep:
                os.close(fd)
        opened = [fd for fd in opened if fd in keep]
        pid = _await_start(status_r)
    except BaseException:
        for fd in opened:
            with contextlib.suppress(OSError):
                os.close(fd)
        raise
    proc = TiedProcess(pid, status_r, ctrl_w, new_session)
    if "stdin" in ours:
        proc.stdin = os.fdopen(ours["stdin"], "wb", buffering=0)
    if "stdout" in ours:
        proc.stdout = os.fdopen(ours["stdout"], "rb", buffering=0)
    if "stderr" in ours:
        proc.stderr = os.fdopen(ours["stderr"], "rb", buffering=0)
    return proc


def _await_start(status_r: int) -> int:
    """The command's pid from the supervisor's first line, or the exec error it reported."""
    buffer = b""
    deadline = time.monotonic() + SPAWN_TIMEOUT_S
    while b"\n" not in buffer:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([status_r], [], [], remaining)[0]:
            raise SpawnError(errno.ETIMEDOUT, "the spawn helper did not answer")
        chunk = os.read(status_r, 1)  # one byte at a time: leave later lines for the process object
        if not chunk:
            raise SpawnError(errno.EPIPE, "the spawn helper died before starting the command")
        buffer += chunk
    kind, _, value = buffer.decode("ascii", "replace").strip().partition(" ")
    if kind == "S":
        return int(value)
    code_text, _, where = value.partition(" ")
    code = int(code_text) if code_text.isdigit() else errno.EINVAL
    raise OSError(code, f"{os.strerror(code)} ({where or 'exec'})")
