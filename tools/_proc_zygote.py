"""The spawn helper process behind ``tools/_proc.py``: a small, single-threaded fork server.

Run as ``python -I -S _proc_zygote.py SOCKET_FD`` by ``tools/_proc.py``, never imported by the
application (standard library only, so it starts without site-packages). It keeps one
**supervisor** forked ahead of time and hands the requester a socket to it (over its own socket,
``SCM_RIGHTS``); each byte the requester sends asks for the next one. The requester sends its
spawn request straight to that supervisor, so neither a fork nor this process is on the hot path.
It exits when its socket reaches EOF, i.e. when the requester has died or let it go; a waiting,
unused supervisor then sees EOF on its own socket and exits too.

A supervisor owns one command:

1. it becomes a child subreaper (``PR_SET_CHILD_SUBREAPER``), so every process the command leaves
   behind — double forks and ``setsid`` daemons included — is re-parented to it, not to init;
2. it starts the command with ``posix_spawn`` (vfork-like: no page copying): new session (when
   asked), the requested fds at their numbers, signal dispositions restored, in the requested
   directory (by path, or by a directory descriptor sent along: ``fchdir``, never a path lookup). A failure is reported as ``E <errno> <step>``, success as ``S <pid>``;
3. it watches the command's pidfd and the **control pipe**, whose only write end lives in the
   requesting process. On the command's exit it reports ``X <returncode>`` (Popen convention,
   negative for a signal) *without reaping it*, so the command's pid — its process group id —
   stays reserved and a group kill can never hit a recycled id;
4. when the control pipe reaches EOF — the requester closed it (the call is over, killed or
   cancelled) or the requester died, however (SIGKILL included) — or on SIGTERM, it SIGKILLs the
   command's process group and then every remaining descendant, round after round until it has
   no child left, reaps them all, writes ``D`` and exits.

All reports go to the **status pipe** as lines. Every fd here is close-on-exec except those
placed for the command. No per-call state outlives the supervisor.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import gc
import json
import os
import resource
import select
import signal
import socket
import struct
import sys
import time

PR_SET_CHILD_SUBREAPER = 36
HEADER = struct.Struct("!II")  # payload length, fd count
MAX_FDS = 64
KILL_ROUND_PAUSE_S = 0.002

_libc = ctypes.CDLL(None, use_errno=True)
_prctl = _libc.prctl
_prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]


def prctl(option: int, value: int) -> None:
    if _prctl(option, value, 0, 0, 0) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


def _recv_exact(sock: socket.socket, size: int) -> bytes | None:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


def receive(sock: socket.socket) -> tuple[bytes, list[int]] | None:
    """One request: the header arrives with the fds, then the JSON body. None at EOF."""
    fds: list[int] = []
    space = socket.CMSG_SPACE(MAX_FDS * 4)
    data, ancdata, _flags, _addr = sock.recvmsg(HEADER.size, space, socket.MSG_CMSG_CLOEXEC)
    for level, kind, payload in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            usable = len(payload) - len(payload) % 4
            fds += list(struct.unpack(f"{usable // 4}i", payload[:usable]))
    if not data:
        return None
    if len(data) < HEADER.size:
        rest = _recv_exact(sock, HEADER.size - len(data))
        if rest is None:
            return None
        data += rest
    length, count = HEADER.unpack(data)
    body = _recv_exact(sock, length)
    if body is None or count != len(fds):
        for fd in fds:
            os.close(fd)
        return None
    return body, fds


def send(sock: socket.socket, body: bytes, fds: list[int]) -> None:
    header = HEADER.pack(len(body), len(fds))
    sent = sock.sendmsg([header], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack(f"{len(fds)}i", *fds))])
    if sent != len(header):
        sock.sendall(header[sent:])
    sock.sendall(body)


def fork_supervisor(listener: socket.socket) -> socket.socket:
    """Fork a supervisor that waits for its one request on the returned socket's peer."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    pid = os.fork()
    if pid == 0:
        try:
            listener.close()
            ours.close()
            _supervisor_main(theirs)
        finally:
            os._exit(70)
    theirs.close()
    return ours


def _supervisor_main(sock: socket.socket) -> None:
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # until it owns a command: nothing to clean up
    prctl(PR_SET_CHILD_SUBREAPER, 1)
    try:
        request = receive(sock)
    except (OSError, ValueError):
        request = None
    sock.close()
    if request is None:
        os._exit(0)  # the requester let this spare go (or died) without using it
    body, fds = request
    Supervisor(json.loads(body), fds).run()


def zygote(sock_fd: int) -> None:
    """Keep a forked supervisor ready for the requester: each byte it sends asks for another."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's ^C is for the requester to handle
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # supervisors are reaped by the kernel
    sock = socket.socket(fileno=sock_fd)
    # Supervisors are forks of this process: with every object frozen and the collector off, a
    # fork does not copy the pages the collector would otherwise touch (gc.freeze's purpose).
    gc.disable()
    gc.freeze()
    wanted = 1  # one ready ahead of time
    while True:
        while wanted:
            spare = fork_supervisor(sock)
            try:
                send(sock, b"", [spare.fileno()])
            except OSError:
                os._exit(0)
            finally:
                spare.close()
            wanted -= 1
        try:
            data = sock.recv(64)
        except OSError:
            data = b""
        if not data:
            os._exit(0)  # the requester is gone; waiting spares see EOF and exit too
        wanted += len(data)


class Supervisor:
    def __init__(self, spec: dict, fds: list[int]) -> None:
        self.spec = spec
        self.status_w, self.ctrl_r, *self.child_fds = fds
        # A directory descriptor to start in comes last (``spawn(cwd_fd=…)``): never a path.
        self.cwd_fd = self.child_fds.pop() if spec.get("cwd_fd") and self.child_fds else None
        self.pid = -1
        self.returncode: int | None = None
        self.stop = False

    def report(self, line: str) -> None:
        data = (line + "\n").encode()
        try:
            while data:
                data = data[os.write(self.status_w, data) :]
        except OSError:
            pass  # the requester is gone: keep cleaning up regardless

    def run(self) -> None:
        signal.signal(signal.SIGTERM, self._on_term)
        try:
            pid = _spawn_command(self.spec, self.child_fds, self.cwd_fd)
        except OSError as exc:
            self.report(f"E {exc.errno or errno.EINVAL} {getattr(exc, 'where', 'exec')}")
            self.report("D")
            os._exit(0)
        finally:
            for fd in [*self.child_fds, *([self.cwd_fd] if self.cwd_fd is not None else [])]:
                os.close(fd)
        self.pid = pid
        self.report(f"S {pid}")
        self.watch()
        self.kill_all()
        if self.returncode is None:
            self.returncode = _returncode(os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT))
            self.report(f"X {self.returncode}")
        self.reap_all()
        self.report("D")
        os._exit(0)

    def _on_term(self, signum: int, frame: object) -> None:
        self.stop = True

    def watch(self) -> None:
        """Until the control pipe closes (or SIGTERM): report the command's exit, reap orphans."""
        wake_r, wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so the wakeup fd is written
        pidfd = os.pidfd_open(self.pid)
        poller = select.poll()
        poller.register(self.ctrl_r, select.POLLIN)
        poller.register(pidfd, select.POLLIN)
        poller.register(wake_r, select.POLLIN)
        while not self.stop:
            try:
                events = poller.poll()
            except InterruptedError:
                continue
            for fd, _mask in events:
                if fd == self.ctrl_r:
                    return
                if fd == pidfd and self.returncode is None:
                    info = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOWAIT | os.WNOHANG)
                    if info is not None:
                        self.returncode = _returncode(info)
                        self.report(f"X {self.returncode}")
                        poller.unregister(pidfd)
                if fd == wake_r:
                    with _suppress_os():
                        while os.read(wake_r, 512):
                            pass
                    self.reap_orphans()

    def reap_orphans(self) -> None:
        for child in children():
            if child != self.pid:
                with _suppress_os():
                    os.waitpid(child, os.WNOHANG)

    def kill_all(self) -> None:
        if self.spec.get("new_session"):
            with _suppress_os():
                os.killpg(self.pid, signal.SIGKILL)
        while True:
            alive = [c for c in children() if c != self.pid or self.returncode is None]
            if not alive:
                return
            for child in alive:
                with _suppress_os():
                    os.kill(child, signal.SIGKILL)
            self.reap_orphans()
            time.sleep(KILL_ROUND_PAUSE_S)
            if self.returncode is None:
                info = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOWAIT | os.WNOHANG)
                if info is not None:
                    self.returncode = _returncode(info)
                    self.report(f"X {self.returncode}")

    def reap_all(self) -> None:
        while True:
            try:
                os.waitpid(-1, 0)
            except ChildProcessError:
                return
            except InterruptedError:
                continue


def _returncode(info: os.waitid_result | None) -> int:
    if info is None:
        return -signal.SIGKILL
    if info.si_code == os.CLD_EXITED:
        return info.si_status
    return -info.si_status


def children() -> list[int]:
    """Our direct children (re-parented orphans included), zombies included."""
    me = os.getpid()
    try:
        with open(f"/proc/{me}/task/{me}/children", encoding="ascii") as fh:
            return [int(p) for p in fh.read().split()]
    except OSError:
        pass
    found = []  # no CONFIG_PROC_CHILDREN: scan every process's parent
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as fh:
                    stat = fh.read()
            except OSError:
                continue
            fields = stat[stat.rfind(b")") + 2 :].split()
            if len(fields) > 1 and int(fields[1]) == me:
                found.append(int(entry))
    return found


class _suppress_os:
    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: object, tb: object) -> bool:
        return isinstance(exc, OSError)


def _read_all(fd: int) -> str:
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 256)
        except InterruptedError:
            continue
        if not chunk:
            return b"".join(chunks).decode("ascii", "replace")
        chunks.append(chunk)


def _spawn_command(spec: dict, fds: list[int], cwd_fd: int | None = None) -> int:
    """``posix_spawn`` (vfork-like: no page copying) with the fds placed, signals reset, a new session."""
    targets = [int(t) for t in spec["targets"]]
    floor = max([*targets, *fds, 2]) + 1
    # Two steps, so a received fd whose number is another's target is never overwritten early.
    moved = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, floor) for fd in fds]
    try:
        actions = [(os.POSIX_SPAWN_DUP2, fd, target) for fd, target in zip(moved, targets, strict=True)]
        try:
            # Inherited by the command (posix_spawn has no chdir action). By descriptor when given:
            # the directory the requester checked, whatever its path names now.
            if cwd_fd is not None:
                os.fchdir(cwd_fd)
            else:
                os.chdir(spec["cwd"])
        except OSError as exc:
            exc.where = "chdir"  # type: ignore[attr-defined]
            raise
        for resource_id, limit in spec.get("rlimits") or ():
            # This supervisor serves one command and uses little memory: the command inherits them.
            resource.setrlimit(resource_id, (limit, limit))
        return os.posix_spawn(
            spec["exe"],
            spec["argv"],
            spec["env"],
            file_actions=actions,
            setsid=bool(spec.get("new_session")),
            setsigdef=(signal.SIGPIPE, signal.SIGXFSZ, signal.SIGTERM, signal.SIGINT, signal.SIGCHLD),
            setsigmask=(),
        )
    finally:
        for fd in moved:
            os.close(fd)


if __name__ == "__main__":
    zygote(int(sys.argv[1]))
