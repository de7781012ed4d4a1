"""One pool of helper children per process (the QuickJS VMs, the HTML converters).

Each pool module holds a ``PerProcess(make)`` and exposes its ``get`` as ``pool()``.

Invariants:

- ``get`` makes the pool on first use, and anew in a process whose pid differs from the pool's
  (a pool is never shared across a fork);
- in a forked child (a Celery prefork worker) the parent's pool is forgotten: its
  ``forget_after_fork`` closes the child's copies of the parent's pipes and never waits on the
  parent's children; the next ``get`` makes a pool of the child's own. The lock is made anew
  there too, since a thread of the parent may have held it when the fork happened;
- ``atexit`` shuts down the pool of the process that made it (its idle children are killed).
"""

from __future__ import annotations

import atexit
import os
import subprocess
import threading
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

from tools._children import close_pipes


class ChildPool(Protocol):
    pid: int

    def shutdown(self) -> None: ...

    def forget_after_fork(self) -> None: ...


P = TypeVar("P", bound=ChildPool)


def disown(proc: subprocess.Popen[bytes]) -> None:
    """In a forked child: a child of the parent is not ours — close our copies of its pipes and
    mark it done so nothing here ever waits on it."""
    close_pipes(proc)
    proc.returncode = 0


class PerProcess(Generic[P]):
    def __init__(self, make: Callable[[], P]) -> None:
        self._make = make
        self._pool: P | None = None
        self._lock = threading.Lock()
        os.register_at_fork(after_in_child=self._after_fork)
        atexit.register(self._at_exit)

    def get(self) -> P:
        with self._lock:
            if self._pool is None or self._pool.pid != os.getpid():
                self._pool = self._make()
            return self._pool

    def _after_fork(self) -> None:
        self._lock = threading.Lock()
        inherited, self._pool = self._pool, None
        if inherited is not None:
            inherited.forget_after_fork()

    def _at_exit(self) -> None:
        if self._pool is not None and self._pool.pid == os.getpid():
            self._pool.shutdown()
