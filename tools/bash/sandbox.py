"""The bash sandbox: bubblewrap's command line and a once-per-process probe (REFERENCE 4.7, §9.4; issue 15).

What runs inside (``BwrapSandbox.prepare``), the same whether the host runs as root or not:

- **identity**: a new user namespace; as root on the host the command runs as ``nobody``
  (65534:65534) inside, otherwise as the host's own uid. Either way the inside uid maps to the
  host's uid, so files it writes in the workspace are owned, seen from the host, by the host
  user, exactly as if the host had written them. Every capability is dropped (``--cap-drop ALL``,
  empty bounding set), ``no_new_privs`` is set (bubblewrap always sets it: setuid binaries gain
  nothing), and the namespace cannot create further user namespaces (``--disable-userns``, when
  this bubblewrap supports it);
- **namespaces**: user, PID, network, IPC, UTS and (when possible) cgroup are all new
  (``--unshare-all``): no host process is visible, the only network is the sandbox's own
  loopback, SysV IPC and POSIX message queues are private, the hostname is ``a3s-sandbox``;
- **file system**: see ``tools/bash/mounts.py`` (read-only root, private /tmp /var/tmp /run, a
  minimal /dev, a fresh /proc with read-only /proc/sys, the workspace read-write, ``.a3s`` and
  ``.git`` read-only, host credential stores masked);
- **system calls**: see ``tools/bash/seccomp.py`` (no Unix/vsock/… sockets — "no network" means
  no IP *and* no Unix sockets, filesystem or abstract — no setuid/setgid bits, no io_uring,
  keyrings, bpf, perf, userfaultfd);
- **process**: ``--die-with-parent`` (the sandbox dies with the process that started it) and
  ``--new-session`` (no TIOCSTI onto our terminal); the environment comes from
  ``tools/bash/environment.py``;
- **OOM ranking**: bubblewrap is started through ``/bin/sh`` that first sets its own
  ``oom_score_adj`` to 1000 (``OOM_SCORE_ADJ``), which every sandboxed process inherits, so a
  memory-hungry command is the kernel OOM killer's first choice, before the worker or agent. The
  kernel lets an unprivileged process lower its score back to its floor (0 unless a privileged
  process set another), never below: a command that does so on purpose only gets back on equal
  footing with the host. A failed write (a /proc that refuses it) leaves the host's value: this
  ranks victims, it is not confinement (cgroup memory limits are not configured by us).

A sandbox is anything with ``available: bool`` and ``prepare(argv, workspace_root, cwd) ->
SandboxCommand``; a session may hand one in as ``ctx.services["sandbox"]`` (tests use that to
force "unavailable"). ``default_sandbox()`` is the bubblewrap one; its probe runs the real policy
once and checks from inside that no capability survived, ``NoNewPrivs`` is 1 and the filter is
loaded — otherwise the sandbox is unavailable and governed calls fail closed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from tools.bash import seccomp
from tools.bash.mounts import SandboxRefused, system_args, workspace_mounts

PROBE_TIMEOUT_S = 10.0
HOSTNAME = "a3s-sandbox"
NOBODY_UID = 65534
NOBODY_GID = 65534
# Tried in order; the first that passes the probe wins.
PROBE_VARIANTS: tuple[tuple[str, ...], ...] = (("--disable-userns",), ())
OOM_SCORE_ADJ = 1000  # the maximum: "kill this first"
# Runs on the host, before bubblewrap: a process may always raise its own score, and the value is
# inherited across fork and exec by the whole sandbox (module docstring).
_OOM_PRELUDE = f'{{ echo {OOM_SCORE_ADJ} > /proc/self/oom_score_adj; }} 2>/dev/null; exec "$0" "$@"'
_PROBE_SCRIPT = "grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status"

__all__ = [
    "BwrapSandbox",
    "Sandbox",
    "SandboxCommand",
    "SandboxRefused",
    "UnavailableSandbox",
    "bwrap_argv",
    "default_sandbox",
]


@dataclass
class SandboxCommand:
    """The argv to run and the fds it names (pass them to the child, then ``close()``)."""

    argv: list[str]
    pass_fds: tuple[int, ...] = ()
    _closers: list[Callable[[], None]] = field(default_factory=list)

    def close(self) -> None:
        for closer in self._closers:
            with contextlib.suppress(OSError):
                closer()
        self._closers.clear()


@runtime_checkable
class Sandbox(Protocol):
    @property
    def available(self) -> bool: ...

    def prepare(
        self, argv: Sequence[str], workspace_root: str | os.PathLike[str], cwd: str | os.PathLike[str]
    ) -> SandboxCommand: ...


def identity_args(host_uid: int) -> list[str]:
    args = ["--unshare-all", "--unshare-user", "--cap-drop", "ALL"]
    if host_uid == 0:
        args += ["--uid", str(NOBODY_UID), "--gid", str(NOBODY_GID)]
    return args


def bwrap_argv(
    binary: str,
    argv: Sequence[str],
    cwd: str | os.PathLike[str],
    *,
    seccomp_fd: int,
    workspace_args: Sequence[str] = (),
    extra_flags: Sequence[str] = (),
    host_uid: int | None = None,
) -> list[str]:
    """The bubblewrap command line that runs ``argv`` in ``cwd`` under the policy above."""
    uid = os.getuid() if host_uid is None else host_uid
    out = ["/bin/sh", "-c", _OOM_PRELUDE, binary, *identity_args(uid), *extra_flags, "--hostname", HOSTNAME]
    out += system_args()
    out += list(workspace_args)
    out += ["--seccomp", str(seccomp_fd), "--die-with-parent", "--new-session"]
    out += ["--chdir", os.fspath(cwd), "--", *argv]
    return out


def _filter_fd() -> int:
    fd = os.memfd_create("a3s-seccomp", os.MFD_CLOEXEC)
    try:
        os.write(fd, seccomp.program())
        os.lseek(fd, 0, os.SEEK_SET)
        os.set_inheritable(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


class BwrapSandbox:
    """Bubblewrap, probed lazily once; ``probe()`` blocks (run it in a thread from async code)."""

    def __init__(self, binary: str | None = None) -> None:
        self.binary = binary if binary is not None else (shutil.which("bwrap") or "/usr/bin/bwrap")
        self._lock = threading.Lock()
        self._probed = False
        self._available = False
        self._flags: tuple[str, ...] = ()
        self.probe_error: str | None = None

    @property
    def probed(self) -> bool:
        return self._probed

    @property
    def available(self) -> bool:
        return self.probe()

    def probe(self) -> bool:
        with self._lock:
            if not self._probed:
                self._available, self._flags, self.probe_error = _probe(self.binary)
                self._probed = True
            return self._available

    def prepare(
        self, argv: Sequence[str], workspace_root: str | os.PathLike[str], cwd: str | os.PathLike[str]
    ) -> SandboxCommand:
        """Open the workspace's binds and the filter; raises ``SandboxRefused``/``OSError``/``RuntimeError``."""
        if not self.probe():
            raise RuntimeError(f"bubblewrap is not usable here: {self.probe_error}")
        home = os.environ.get("HOME")
        mounts = workspace_mounts(os.fspath(workspace_root), home)
        try:
            filter_fd = _filter_fd()
        except BaseException:
            mounts.close()
            raise
        full = bwrap_argv(
            self.binary,
            argv,
            cwd,
            seccomp_fd=filter_fd,
            workspace_args=mounts.args,
            extra_flags=self._flags,
        )
        fds = (*mounts.fds, filter_fd)
        return SandboxCommand(full, fds, [mounts.close, lambda: os.close(filter_fd)])


def _probe(binary: str) -> tuple[bool, tuple[str, ...], str | None]:
    if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
        return False, (), f"{binary} is not installed"
    try:
        filter_fd = _filter_fd()
    except (OSError, seccomp.UnsupportedArchitecture) as exc:
        return False, (), f"no seccomp filter: {exc}"
    error = "unknown"
    try:
        for flags in PROBE_VARIANTS:
            argv = bwrap_argv(
                binary, ["bash", "-c", _PROBE_SCRIPT], "/", seccomp_fd=filter_fd, extra_flags=flags
            )
            os.lseek(filter_fd, 0, os.SEEK_SET)
            try:
                done = subprocess.run(
                    argv,
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    timeout=PROBE_TIMEOUT_S,
                    check=False,
                    pass_fds=(filter_fd,),
                    env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
                )
            except (OSError, subprocess.SubprocessError) as exc:
                error = f"{type(exc).__name__}: {exc}"
                continue
            if done.returncode != 0:
                error = done.stderr.decode("utf-8", "replace").strip()[:500] or f"exit {done.returncode}"
                continue
            problem = _confinement_problem(done.stdout.decode("ascii", "replace"))
            if problem is None:
                return True, flags, None
            error = problem
    finally:
        os.close(filter_fd)
    return False, (), error


def _confinement_problem(status: str) -> str | None:
    """What the probe's ``/proc/self/status`` lines show is missing, or None when fully confined."""
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    values = {k.strip(): v.strip() for k, v in fields.items()}
    for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        if values.get(cap) is None or int(values[cap], 16) != 0:
            return f"the sandbox would keep capabilities ({cap}={values.get(cap)})"
    if values.get("NoNewPrivs") != "1":
        return "the sandbox would not set no_new_privs"
    if values.get("Seccomp") != "2":
        return "the sandbox's seccomp filter is not in force"
    return None


class UnavailableSandbox:
    """No sandbox: governed calls fail closed (for hosts that configure none, and for tests)."""

    available = False

    def prepare(
        self, argv: Sequence[str], workspace_root: str | os.PathLike[str], cwd: str | os.PathLike[str]
    ) -> SandboxCommand:
        raise RuntimeError("no sandbox is configured")


_default: BwrapSandbox | None = None
_default_lock = threading.Lock()


def default_sandbox() -> BwrapSandbox:
    """The process-wide bubblewrap sandbox (constructed without I/O; probed on first use)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = BwrapSandbox()
        return _default
