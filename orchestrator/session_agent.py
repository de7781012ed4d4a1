"""The agent half of the SDK ``Session``: ``send`` / ``stream`` and their async twins (SPEC A-2, S-5).

Thin doors into ``flows.agent.run_agent`` on the session's loop thread:

- ``send(prompt) -> RunResult`` makes non-streaming model requests and waits;
- ``stream(prompt)`` streams the model and yields the session's events as they happen (``run_start``,
  ``text_delta``, ``tool_start`` / ``tool_output_delta`` / ``tool_end``…, ending with ``run_end``);
  its ``result`` is the ``RunResult`` once the iterator is exhausted;
- ``asend`` / ``astream`` are the same for an asyncio caller on any loop.

``cancel_run()`` stops the running prompt (the CLI's Ctrl-C); the run returns ``cancelled``.
Closing the session cancels it too (K-6). Cancelling an ``asend`` awaitable cancels the run.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import queue
from collections.abc import AsyncIterator, Iterator
from typing import Any

from flows.agent import RunResult, run_agent
from flows.agent.result import CANCELLED
from flows.loop import SIGNAL_POLL_S, LoopThread, wait_result
from flows.sessions import SessionCore
from kernel.errors import Cancelled, error_from_kind
from kernel.events import Event
from kernel.result import ToolResult

_DONE = object()


def _closed_result(core: SessionCore) -> RunResult:
    err = Cancelled("the session is closed", op="agent")
    return RunResult(
        "",
        False,
        0,
        error=err.to_kind(),
        stop_reason=CANCELLED,
        session_id=core.id,
        model=core.model or "",
        message=err.message,
    )


def _get_interruptibly(q: queue.SimpleQueue[Any]) -> Any:
    """``q.get()`` in slices, so Ctrl-C reaches the waiting main thread (see ``flows.loop``)."""
    while True:
        try:
            return q.get(timeout=SIGNAL_POLL_S)
        except queue.Empty:
            continue


class AgentStream:
    """Iterator over one run's events; ``result`` once exhausted; ``cancel()`` stops the run."""

    def __init__(self, core: SessionCore, loop: LoopThread, kwargs: dict[str, Any]) -> None:
        self.result: RunResult | None = None
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._loop = loop
        self._cancel = asyncio.Event()
        if core.closed:
            self.result = _closed_result(core)
            self._queue.put(_DONE)
            self._future: concurrent.futures.Future[RunResult] | None = None
            return
        self._future = loop.submit(
            run_agent(core, on_event=self._queue.put, cancel=self._cancel, stream=True, **kwargs)
        )
        self._future.add_done_callback(lambda _f: self._queue.put(_DONE))

    def __iter__(self) -> Iterator[Event]:
        return self

    def __next__(self) -> Event:
        item = _get_interruptibly(self._queue)
        if item is _DONE:
            self._queue.put(_DONE)  # later calls stop too
            if self.result is None and self._future is not None:
                try:
                    self.result = self._future.result()
                except concurrent.futures.CancelledError:
                    self.result = None
            raise StopIteration
        return item  # type: ignore[no-any-return]

    def cancel(self) -> None:
        """Stop the run (it ends with ``cancelled``; the iterator still ends with ``run_end``)."""
        if self._future is not None and not self._future.done():
            self._loop.call(self._cancel.set)

    def __enter__(self) -> AgentStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cancel()
        for _ in self:  # drain to the end so the run has settled
            pass


class AsyncAgentStream:
    """``async for`` twin of ``AgentStream`` (events cross from the session's loop thread)."""

    def __init__(self, core: SessionCore, loop: LoopThread, kwargs: dict[str, Any]) -> None:
        self.result: RunResult | None = None
        self._core = core
        self._loop = loop
        self._kwargs = kwargs
        self._cancel = asyncio.Event()
        self._queue: asyncio.Queue[Any] | None = None
        self._future: asyncio.Future[RunResult] | None = None

    def _start(self) -> None:
        caller = asyncio.get_running_loop()
        q: asyncio.Queue[Any] = asyncio.Queue()
        self._queue = q
        if self._core.closed:
            self.result = _closed_result(self._core)
            q.put_nowait(_DONE)
            return

        def on_event(event: Event) -> None:
            caller.call_soon_threadsafe(q.put_nowait, event)

        fut = self._loop.submit(
            run_agent(self._core, on_event=on_event, cancel=self._cancel, stream=True, **self._kwargs)
        )
        self._future = asyncio.wrap_future(fut)
        self._future.add_done_callback(lambda _f: q.put_nowait(_DONE))

    def __aiter__(self) -> AsyncIterator[Event]:
        return self

    async def __anext__(self) -> Event:
        if self._queue is None:
            self._start()
        assert self._queue is not None
        item = await self._queue.get()
        if item is _DONE:
            self._queue.put_nowait(_DONE)
            if self.result is None and self._future is not None and not self._future.cancelled():
                self.result = self._future.result()
            raise StopAsyncIteration
        return item  # type: ignore[no-any-return]

    def cancel(self) -> None:
        if self._future is not None and not self._future.done():
            self._loop.call(self._cancel.set)


class AgentRuns:
    """Mixed into ``orchestrator.session.Session``: the model-driven side of a session."""

    core: SessionCore
    _loop: LoopThread

    @property
    def model(self) -> str | None:
        """The session's model name (``provider:model``); stored in the snapshot, never a key."""
        return self.core.model

    @model.setter
    def model(self, name: str | None) -> None:
        self.core.model = name

    def _run_kwargs(
        self,
        prompt: str,
        model: str | None,
        max_steps: int | None,
        timeout_ms: int | None,
        system: str | None,
    ) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "prompt": prompt,
            "model": model,
            "timeout_ms": timeout_ms,
            "system": system,
        }
        if max_steps is not None:
            kwargs["max_steps"] = max_steps
        return kwargs

    def send(
        self,
        prompt: str,
        *,
        model: str | None = None,
        max_steps: int | None = None,
        timeout_ms: int | None = None,
        system: str | None = None,
    ) -> RunResult:
        """Run ``prompt`` to the end (non-streaming model requests); never raises for model or tool
        failures — ``RunResult.success`` / ``error`` say what happened."""
        if self.core.closed:
            return _closed_result(self.core)
        self._cancel = asyncio.Event()
        kwargs = self._run_kwargs(prompt, model, max_steps, timeout_ms, system)
        fut = self._loop.submit(run_agent(self.core, cancel=self._cancel, stream=False, **kwargs))
        try:
            return wait_result(fut)
        except concurrent.futures.CancelledError:
            return _closed_result(self.core)

    async def asend(
        self,
        prompt: str,
        *,
        model: str | None = None,
        max_steps: int | None = None,
        timeout_ms: int | None = None,
        system: str | None = None,
    ) -> RunResult:
        if self.core.closed:
            return _closed_result(self.core)
        kwargs = self._run_kwargs(prompt, model, max_steps, timeout_ms, system)
        return await asyncio.wrap_future(self._loop.submit(run_agent(self.core, stream=False, **kwargs)))

    def stream(
        self,
        prompt: str,
        *,
        model: str | None = None,
        max_steps: int | None = None,
        timeout_ms: int | None = None,
        system: str | None = None,
    ) -> AgentStream:
        return AgentStream(
            self.core, self._loop, self._run_kwargs(prompt, model, max_steps, timeout_ms, system)
        )

    def astream(
        self,
        prompt: str,
        *,
        model: str | None = None,
        max_steps: int | None = None,
        timeout_ms: int | None = None,
        system: str | None = None,
    ) -> AsyncAgentStream:
        return AsyncAgentStream(
            self.core, self._loop, self._run_kwargs(prompt, model, max_steps, timeout_ms, system)
        )

    def cancel_run(self) -> None:
        """Stop the prompt ``send`` is running (from another thread, e.g. a signal handler)."""
        cancel = getattr(self, "_cancel", None)
        if cancel is not None:
            self._loop.call(cancel.set)

    def generate_object(
        self,
        schema: dict[str, Any],
        prompt: str,
        *,
        schema_name: str = "result",
        schema_description: str | None = None,
        system: str | None = None,
        mode: str = "auto",
        max_repair_attempts: int = 2,
        include_raw_text: bool = False,
        timeout_ms: int = 120_000,
    ) -> dict[str, Any]:
        """G-1..G-5 as a trusted host-direct call of the ``generate_object`` tool with the session's
        model: ``{"object", "repair_rounds", "mode_used", "usage", "raw_text"?}``. Raises the typed
        ``ToolError`` (``invalid_argument`` — before any request for bad arguments —, ``timeout``,
        ``rate_limited``, ``transport``, ``cancelled``…) instead of returning a failure."""
        args: dict[str, Any] = {
            "schema": schema,
            "prompt": prompt,
            "schema_name": schema_name,
            "mode": mode,
            "max_repair_attempts": max_repair_attempts,
            "include_raw_text": include_raw_text,
            "timeout_ms": timeout_ms,
        }
        if schema_description is not None:
            args["schema_description"] = schema_description
        if system is not None:
            args["system"] = system
        result: ToolResult = self.tool("generate_object", args)  # type: ignore[attr-defined]
        if result.exit_code != 0:
            raise error_from_kind(result.error_kind, result.output)
        value: dict[str, Any] = json.loads(result.output)
        return value

    def conversation(self) -> list[dict[str, Any]]:
        """The conversation so far, as JSON messages (what the snapshot stores)."""
        return [m.to_json() for m in self.core.conversation.messages]
