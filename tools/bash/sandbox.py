"""The bash sandbox: a bubblewrap argv builder and a once-per-process availability probe (REFERENCE 4.7, §9.4).

Policy inside the sandbox (``bwrap_argv``):

- the whole root file system read-only (``--ro-bind / /``), a fresh ``/tmp`` (``--tmpfs /tmp``),
  a minimal ``/dev`` and a fresh ``/proc``;
- the workspace read-write at its own host path (``--bind root root``), so paths the command prints
  are the same paths the host sees; ``<root>/.a3s`` (artifacts, indexes) is re-bound read-only on top;
- no network (``--unshare-net``: only a downed loopback exists), its own PID namespace
  (``--unshare-pid``), ``--die-with-parent`` and ``--new-session`` (no TIOCSTI onto our terminal).

Order matters: the workspace bind comes *after* ``--tmpfs /tmp``, so a workspace under ``/tmp`` stays
visible. Killing the outer ``bwrap`` (our child, in our process group) tears down the namespace:
``--die-with-parent`` kills its PID 1, and the kernel kills every process of a PID namespace whose
init dies, including ones that left the session.

A sandbox is anything with ``available: bool`` and ``wrap(argv, workspace_root, cwd) -> argv``; a
session may hand one in as ``ctx.services["sandbox"]`` (tests use that to force "unavailable").
``default_sandbox()`` is the bubblewrap one; its probe runs the real policy once (``true`` inside it)
and remembers the flag set that worked (plain first, since we may be root; then ``--unshare-user``
for hosts where an unprivileged bwrap needs a user namespace).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

PROBE_TIMEOUT_S = 5.0
INTERNAL_DIR = ".a3s"
# Tried in order; the first that runs ``true`` under the full policy wins.
PROBE_VARIANTS: tuple[tuple[str, ...], ...] = ((), ("--unshare-user",))


@runtime_checkable
class Sandbox(Protocol):
    @property
    def available(self) -> bool: ...

    def wrap(
        self, argv: Sequence[str], workspace_root: str | os.PathLike[str], cwd: str | os.PathLike[str]
    ) -> list[str]: ...


def bwrap_argv(
    binary: str,
    argv: Sequence[str],
    workspace_root: str | os.PathLike[str] | None,
    cwd: str | os.PathLike[str],
    extra_flags: Sequence[str] = (),
) -> list[str]:
    """The bubblewrap command line that runs ``argv`` in ``cwd`` under the policy above.

    ``workspace_root=None`` gives the policy with no writable bind at all (the probe uses it).
    """
    out = [binary, *extra_flags, "--ro-bind", "/", "/", "--tmpfs", "/tmp", "--dev", "/dev", "--proc", "/proc"]
    if workspace_root is not None:
        root = os.fspath(workspace_root)
        out += ["--bind", root, root]
        internal = os.path.join(root, INTERNAL_DIR)
        if os.path.isdir(internal):
            out += ["--ro-bind", internal, internal]
    out += ["--unshare-net", "--unshare-pid", "--die-with-parent", "--new-session"]
    out += ["--chdir", os.fspath(cwd), "--", *argv]
    return out


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

    def wrap(
        self, argv: Sequence[str], workspace_root: str | os.PathLike[str], cwd: str | os.PathLike[str]
    ) -> list[str]:
        if not self.probe():
            raise RuntimeError(f"bubblewrap is not usable here: {self.probe_error}")
        return bwrap_argv(self.binary, argv, workspace_root, cwd, self._flags)


def _probe(binary: str) -> tuple[bool, tuple[str, ...], str | None]:
    if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
        return False, (), f"{binary} is not installed"
    error = "unknown"
    for flags in PROBE_VARIANTS:
        argv = bwrap_argv(binary, ["true"], None, "/", flags)
        try:
            done = subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                timeout=PROBE_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            error = f"{type(exc).__name__}: {exc}"
            continue
        if done.returncode == 0:
            return True, flags, None
        error = done.stderr.decode("utf-8", "replace").strip()[:500] or f"exit {done.returncode}"
    return False, (), error


class UnavailableSandbox:
    """No sandbox: governed calls fail closed (for hosts that configure none, and for tests)."""

    available = False

    def wrap(
        self, argv: Sequence[str], workspace_root: str | os.PathLike[str], cwd: str | os.PathLike[str]
    ) -> list[str]:
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
