"""Starting a stdio MCP server as a child tied to this process (SPEC K-6).

TEMPORARY: a plain ``subprocess.Popen`` in its own session, killed as a group. It is replaced by
``tools._proc.spawn`` (supervised, dies with this process) when that helper lands on main.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from typing import IO


class Child:
    """The Popen-like handle the transport needs: pipes, ``poll``, ``kill``, ``close``."""

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self._popen = popen
        self.pid = popen.pid
        self.stdin: IO[bytes] | None = popen.stdin
        self.stdout: IO[bytes] | None = popen.stdout
        self.stderr: IO[bytes] | None = popen.stderr

    def poll(self) -> int | None:
        return self._popen.poll()

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)

    def wait_finished(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while self._popen.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        return self._popen.poll() is not None

    def close(self) -> None:
        self.kill()
        if self._popen.poll() is None:
            threading.Thread(target=self._popen.wait, daemon=True).start()


def spawn_tied(argv: Sequence[str], *, cwd: str | None, env: Mapping[str, str]) -> Child:
    popen = subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=dict(env),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    return Child(popen)
