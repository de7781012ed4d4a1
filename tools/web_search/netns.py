"""Chromium with no network of its own: a network namespace of its own (SPEC D-3, W-1).

Request interception (``BrowserPool._route``) covers what a page's HTTP stack asks for. WebRTC is
not part of it: a page's ``RTCPeerConnection`` sent STUN datagrams to 127.0.0.2 straight from
Chromium's network service, past ``--host-resolver-rules`` and with
``--force-webrtc-ip-handling-policy=disable_non_proxied_udp`` too. So Chromium runs under
``bwrap --unshare-net``: a namespace whose only interface is a loopback that is down. Nothing else
needs a network — Playwright drives Chromium over a pipe and fulfils every page request itself.

Where bubblewrap cannot make the namespace (not installed, no user namespaces, a container's
seccomp profile), ``launcher`` raises ``Unsupported``: the headless tier fails closed, like
model-side ``bash``. The probe runs once per bwrap binary.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import threading

from kernel.errors import Unsupported

PROBE_TIMEOUT_S = 10.0
LAUNCHER_NAME = "chromium-netns"
_probes: dict[str, str | None] = {}  # bwrap binary → None when it works, else why not
_lock = threading.Lock()


def bwrap_prefix(bwrap: str) -> list[str]:
    """The command that runs a program with the whole file system but no network."""
    return [bwrap, "--dev-bind", "/", "/", "--unshare-net", "--die-with-parent", "--"]


def _probe(bwrap: str) -> str | None:
    if not (os.path.isfile(bwrap) and os.access(bwrap, os.X_OK)):
        return f"{bwrap} is not installed (apt-get install bubblewrap)"
    try:
        done = subprocess.run(
            [*bwrap_prefix(bwrap), "/bin/true"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=PROBE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{bwrap} did not run: {exc}"
    if done.returncode != 0:
        tail = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or [f"exit {done.returncode}"]
        return f"bwrap --unshare-net failed: {tail[0][:200]}"
    return None


def netns_error(bwrap: str | None = None) -> str | None:
    """Why Chromium cannot be given a network namespace here, or None when it can (probed once)."""
    binary = bwrap or shutil.which("bwrap") or "/usr/bin/bwrap"
    with _lock:
        if binary not in _probes:
            _probes[binary] = _probe(binary)
        return _probes[binary]


def launcher(directory: str, chromium_path: str, bwrap: str | None = None) -> str:
    """An executable in ``directory`` that starts ``chromium_path`` (with Playwright's arguments)
    in a network namespace of its own; ``Unsupported`` where that cannot be done."""
    binary = bwrap or shutil.which("bwrap") or "/usr/bin/bwrap"
    error = netns_error(binary)
    if error is not None:
        raise Unsupported(
            f"the headless tier runs Chromium without a network of its own and cannot here: {error}"
        )
    path = os.path.join(directory, LAUNCHER_NAME)
    command = " ".join(shlex.quote(part) for part in [*bwrap_prefix(binary), chromium_path])
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o700)
    with os.fdopen(fd, "w") as fh:
        fh.write(f'#!/bin/sh\nexec {command} "$@"\n')
    return path
