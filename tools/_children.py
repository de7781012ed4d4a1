"""Ending a helper child process this process started (a QuickJS VM, an HTML converter).

Each child runs in its own session (``start_new_session``), so its process group is its own:
``kill`` ends the group — anything the child started too — then the child; ``discard`` closes our
ends of its pipes and reaps it, waiting at most ``REAP_TIMEOUT_S``.
"""

from __future__ import annotations

import contextlib
import os
import subprocess

REAP_TIMEOUT_S = 2.0


def kill(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, 9)
        with contextlib.suppress(ProcessLookupError):
            proc.kill()


def close_pipes(proc: subprocess.Popen[bytes]) -> None:
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()


def discard(proc: subprocess.Popen[bytes]) -> None:
    """Close our ends and reap (the caller killed it, or it is exiting)."""
    close_pipes(proc)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=REAP_TIMEOUT_S)
