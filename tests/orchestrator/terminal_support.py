"""Running the CLI on a real pseudo-terminal: what a user sees (escape sequences included)."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

BIN = [sys.executable, "-m", "orchestrator.cli"]


def run_on_terminal(
    args: list[str], cwd: Path, env: dict[str, str], answers: list[str], timeout_s: float = 60.0
) -> tuple[str, int]:
    """Run the CLI with stdin/stdout/stderr on a pseudo-terminal; answer each [y/N] question in turn."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("A3S_", "OPENAI_"))}
    environ.update(env, LANG="C.UTF-8", PYTHONIOENCODING="utf-8")
    master, slave = pty.openpty()
    proc = subprocess.Popen([*BIN, *args], cwd=cwd, env=environ, stdin=slave, stdout=slave, stderr=slave)
    os.close(slave)
    screen = b""
    pending = list(answers)
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.1)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: the child closed the terminal
                    break
                if not chunk:
                    break
                screen += chunk
                if pending and screen.count(b"[y/N] ") > len(answers) - len(pending):
                    os.write(master, pending.pop(0).encode() + b"\n")
            elif proc.poll() is not None:
                break
        code = proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    return screen.decode("utf-8", "replace"), code
