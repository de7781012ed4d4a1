"""Warm QuickJS children: who spawns them, and a small pool of them per process.

Invariants:

- **one long-lived spawner thread** forks every child, so ``PR_SET_PDEATHSIG`` — which follows the
  *thread* that forked a process, not the process — fires only when this process ends, never when a
  short-lived thread exits;
- a child holds no inherited descriptors (``close_fds``), gets an empty environment and ``/`` as its
  working directory, and runs ``python -I -S vm_child.py`` (isolated: no site, no user paths);
- the pool holds only children that have loaded the bridge and wait for their first — and only —
  job; ``take()`` hands one out and starts a replacement; a child that died while idle is dropped;
- a fork of this process (a Celery prefork child) starts a pool of its own and closes its copies of
  the parent's pipes; ``atexit`` kills the idle children (``tools/_child_pool.py``, shared with
  the HTML converters).
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import importlib.util
import os
import subprocess
import sys
import threading
from pathlib import Path

from tools._child_pool import PerProcess, disown
from tools._children import REAP_TIMEOUT_S, discard, kill

HERE = Path(__file__).resolve().parent
CHILD = HERE / "vm_child.py"
PRELUDE = HERE / "prelude.js"
DEFAULT_POOL_SIZE = 2


class VmUnavailable(Exception):
    """The QuickJS binding is not installed, or a child could not be started."""


def _site_dir() -> str:
    spec = importlib.util.find_spec("_quickjs")
    if spec is None or spec.origin is None:
        raise VmUnavailable("the program tool needs the `quickjs` package (pip install quickjs==1.19.4)")
    return str(Path(spec.origin).parent)


class _Spawner:
    """One long-lived thread that forks every child, so ``PR_SET_PDEATHSIG`` (which follows the
    forking thread) fires only when this process ends, never when some short-lived thread does."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self._jobs: collections.deque[concurrent.futures.Future[subprocess.Popen[bytes]]] = (
            collections.deque()
        )
        self._wake = threading.Condition()
        self._thread = threading.Thread(target=self._loop, name="a3s-quickjs-spawner", daemon=True)
        self._thread.start()

    def spawn(self) -> concurrent.futures.Future[subprocess.Popen[bytes]]:
        fut: concurrent.futures.Future[subprocess.Popen[bytes]] = concurrent.futures.Future()
        with self._wake:
            self._jobs.append(fut)
            self._wake.notify()
        return fut

    def _loop(self) -> None:
        site = _site_dir_or_none()
        while True:
            with self._wake:
                while not self._jobs:
                    self._wake.wait()
                fut = self._jobs.popleft()
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                if site is None:
                    raise VmUnavailable(
                        "the program tool needs the `quickjs` package (pip install quickjs==1.19.4)"
                    )
                proc = subprocess.Popen(
                    [sys.executable, "-I", "-S", str(CHILD), site, str(PRELUDE), str(os.getpid())],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    env={},
                    cwd="/",
                    close_fds=True,
                    start_new_session=True,
                )
            except Exception as exc:
                fut.set_exception(VmUnavailable(f"cannot start the QuickJS child: {exc}"))
            else:
                fut.set_result(proc)


def _site_dir_or_none() -> str | None:
    try:
        return _site_dir()
    except VmUnavailable:
        return None


class VmPool:
    """Up to ``size`` warm children (bridge loaded, waiting for a job); refilled in the background."""

    def __init__(self, size: int = DEFAULT_POOL_SIZE) -> None:
        self.size = size
        self.pid = os.getpid()
        self._spawner = _Spawner()
        self._idle: collections.deque[concurrent.futures.Future[subprocess.Popen[bytes]]] = (
            collections.deque()
        )
        self._lock = threading.Lock()
        self.spawned = 0

    def take(self) -> concurrent.futures.Future[subprocess.Popen[bytes]]:
        """A started child (perhaps still loading); the pool starts a replacement."""
        with self._lock:
            fut = None
            while self._idle:
                cand = self._idle.popleft()
                if cand.done() and (cand.exception() is not None or cand.result().poll() is not None):
                    if cand.exception() is None:
                        discard(cand.result())
                    continue
                fut = cand
                break
            if fut is None:
                fut = self._spawner.spawn()
                self.spawned += 1
            while len(self._idle) < self.size:
                self._idle.append(self._spawner.spawn())
                self.spawned += 1
        return fut

    def shutdown(self) -> None:
        with self._lock:
            idle, self._idle = list(self._idle), collections.deque()
        for fut in idle:
            with contextlib.suppress(Exception):
                proc = fut.result(timeout=REAP_TIMEOUT_S)
                kill(proc)
                discard(proc)

    def forget_after_fork(self) -> None:
        """In a forked child: the parent's warm children are not ours; close our copies of their pipes."""
        for fut in self._idle:
            if fut.done() and fut.exception() is None:
                disown(fut.result())
        self._idle.clear()


pool = PerProcess(VmPool).get  # a fork's child starts its own; atexit kills the idle children
