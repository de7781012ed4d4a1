"""One asyncio event loop on a daemon thread, shared by the sessions of one host (an ``Agent``, a worker).

Sync SDK calls submit coroutines here and wait; closing a session cancels tasks *on this loop*,
so a host thread blocked in ``session.tool`` gets its cancelled result back (K-6).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
log = logging.getLogger(__name__)

# A process signal (Ctrl-C) may be delivered to any thread; a main thread blocked in a lock wait is
# only woken when the signal lands on it. Waiting in slices lets it run its handler within a slice.
SIGNAL_POLL_S = 0.2


def wait_result(fut: concurrent.futures.Future[T], timeout: float | None = None) -> T:
    """``fut.result(timeout)``, interruptible by Ctrl-C on the main thread wherever the signal lands."""
    if timeout is not None or threading.current_thread() is not threading.main_thread():
        return fut.result(timeout=timeout)
    while True:
        try:
            return fut.result(timeout=SIGNAL_POLL_S)
        except concurrent.futures.TimeoutError:
            if fut.done():  # finished meanwhile, or its own outcome is a TimeoutError
                return fut.result()


class LoopThread:
    def __init__(self, name: str = "a3s-fleet-loop") -> None:
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()
        self._ready.wait()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._ready.set)
        while True:
            try:
                self.loop.run_forever()
                return  # stop() asked for it
            except (SystemExit, KeyboardInterrupt) as exc:
                # The kernel turns these into failed results; anything that still gets here must
                # not take the loop (and every later call of every session) down with it.
                log.error("event loop survived %s raised by a task", type(exc).__name__, exc_info=exc)

    def on_loop_thread(self) -> bool:
        """True on the loop's own thread (where blocking SDK calls are refused)."""
        return threading.current_thread() is self._thread

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError(
                "blocking SDK call from inside the agent's event loop; use the *_async variant"
            )
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return wait_result(self.submit(coro), timeout)

    def call(self, fn: Callable[[], T]) -> concurrent.futures.Future[T]:
        fut: concurrent.futures.Future[T] = concurrent.futures.Future()

        def invoke() -> None:
            try:
                fut.set_result(fn())
            except BaseException as exc:  # handed to the waiting thread
                fut.set_exception(exc)

        self.loop.call_soon_threadsafe(invoke)
        return fut

    def stop(self) -> None:
        if self.loop.is_closed():
            return

        async def _cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks(self.loop) if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            if tasks:
                await asyncio.wait(tasks, timeout=2)

        if self._thread.is_alive():
            try:
                self.run(_cancel_all(), timeout=5)
            except (concurrent.futures.TimeoutError, RuntimeError):
                pass
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self.loop.close()
