"""Children in this process: each a session on the parent's loop (SPEC X-3; embedded mode, F-1).

``InProcessChildren`` is a session's default ``task_children`` service (``SessionFactory.build``
makes one per session). A foreground call fans its children out with the shared fan-in rules
(``flows.fanout.fan_out``: the first failure cancels the rest unless ``allow_partial_failure``;
``min_success_count`` returns early; ``timeout_ms`` keeps finished children and reports the others
``timed_out``; cancelled children are settled before the result is published). A background call
(one item, ``background: true``) returns a handle at once; the child runs on, its result arrives as
the ``subagent_end`` event and through ``result(task_id)`` (``session.task_result``); closing the
session cancels it (K-6) and still ends it with one ``subagent_end``.
"""

from __future__ import annotations

import abc
import asyncio
import concurrent.futures
import contextlib
import functools
import logging
import time
from typing import Any

from flows.fanout import Branch, FanOutPolicy, fan_out
from flows.task.children import ChildSpec, run_child
from flows.task.result import TaskResult, task_outcome
from flows.task.settle import known_spend
from flows.task.tool import TaskCall
from kernel.context import ToolContext
from kernel.errors import NotFound, Timeout, error_from_exception
from kernel.redact import DefaultSecretRedactor, SecretRedactor
from kernel.result import ToolResult

log = logging.getLogger(__name__)

BACKGROUND_KEEP = 256
CLOSE_SETTLE_S = 5.0  # finished background results kept per session for task_result()


def emit(ctx: ToolContext, type_: str, data: dict[str, Any]) -> None:
    """A session event of the ``task`` call (``subagent_start`` / ``subagent_end``)."""
    emitter = getattr(ctx, "emit_event", None)
    if emitter is not None:
        emitter(type_, data)


def _redactor(ctx: ToolContext) -> SecretRedactor | None:
    """The session's secret redactor (``SessionOptions.secret_redactor``; None: the default)."""
    return getattr(getattr(ctx, "settings", None), "secret_redactor", None)


def start_data(spec: ChildSpec, session_id: str, background: bool = False) -> dict[str, Any]:
    return {
        "task_id": spec.task_id,
        "index": spec.index,
        "agent": spec.agent.name,
        "description": spec.description,
        "session_id": session_id,
        "background": background,
    }


@functools.lru_cache(maxsize=1)
def _default_redactor() -> SecretRedactor:
    return DefaultSecretRedactor()


def redacted_result(result: TaskResult, redactor: SecretRedactor | None = None) -> dict[str, Any]:
    """``result.to_json()`` with its text redacted as the kernel redacts the ``task`` call's own
    output (K-3 security provider): the event stream must not carry what the model is not shown."""
    r = redactor or _default_redactor()
    data = result.to_json()
    data["output"] = r.redact(data["output"])
    kind = data.get("error_kind")
    if isinstance(kind, dict):
        data["error_kind"] = {k: r.redact(v) if isinstance(v, str) else v for k, v in kind.items()}
    return data


def end_data(
    result: TaskResult, background: bool = False, redactor: SecretRedactor | None = None
) -> dict[str, Any]:
    """The ``subagent_end`` event's data; ``redactor`` is the session's (the default one without)."""
    return {
        "task_id": result.task_id,
        "index": result.index,
        "agent": result.agent,
        "description": result.description,
        "session_id": result.session_id,
        "background": background,
        "success": result.success,
        "completion": result.completion,
        "result": redacted_result(result, redactor),
    }


def as_tool_result(tool: str, result: TaskResult) -> ToolResult:
    """A child's result as a fan-out branch result (exit code 0 only for a success)."""
    return ToolResult(
        tool,
        result.output,
        0 if result.success else 1,
        {"task_result": result.to_json()},
        None if result.success else (result.error_kind or {"type": "internal_error"}),
    )


def collect(
    call: TaskCall, outcomes: list[Any], results: dict[int, TaskResult], sessions: dict[int, str]
) -> list[TaskResult]:
    """One ``TaskResult`` per child, in order: finished ones as reported, aborted ones synthesised."""
    out = []
    for spec, outcome in zip(call.specs, outcomes, strict=True):
        got = results.get(spec.index)
        if got is None:
            completion = "timed_out" if outcome.status == "timed_out" else "cancelled"
            got = spec.aborted(
                sessions.get(spec.index, ""), completion=completion, duration_ms=outcome.duration_ms
            )
        out.append(got)
    return out


class ChildFanOut(abc.ABC):
    """The fan-in, events and background handles of ``task`` children; ``run_one`` runs one child
    (here: a session on this loop; ``orchestrator.dispatch_agent``: an ``a3s.agent`` job)."""

    def __init__(self) -> None:
        self._background: dict[str, asyncio.Task[TaskResult]] = {}
        self._finished: dict[str, TaskResult] = {}

    def child_session_id(self, ctx: ToolContext, spec: ChildSpec) -> str:
        return f"{ctx.session_id}.{spec.task_id}"

    @abc.abstractmethod
    async def run_one(self, ctx: ToolContext, call: TaskCall, spec: ChildSpec, session_id: str) -> TaskResult:
        """Run one child to its end (never raises for the child's own failure)."""

    async def run_one_typed(
        self, ctx: ToolContext, call: TaskCall, spec: ChildSpec, session_id: str
    ) -> TaskResult:
        """``run_one``, and a runner that raises (a session that cannot be built, a defect) is that
        child's ``failed`` result with the typed error (K-8): the call still returns a result, a
        background handle still ends with one ``subagent_end`` and a ``task_result``."""
        started = time.monotonic()
        try:
            return await self.run_one(ctx, call, spec, session_id)
        except Exception as exc:
            log.error("task child %s (%s) runner raised", spec.task_id, spec.agent.name, exc_info=exc)
            return spec.aborted(
                session_id,
                completion="failed",
                error_kind=error_from_exception(exc, call.tool).to_kind(),
                duration_ms=int((time.monotonic() - started) * 1000),
            )

    async def run(self, ctx: ToolContext, call: TaskCall) -> ToolResult:
        if call.background:
            return self._start_background(ctx, call)
        results: dict[int, TaskResult] = {}
        sessions: dict[int, str] = {}
        ended: set[int] = set()

        children = self

        class _Runner:
            async def run_branch(self, run_id: str, index: int, branch: Branch) -> ToolResult:
                spec = call.specs[index]
                sid = children.child_session_id(ctx, spec)
                sessions[index] = sid
                call.started.add(index)  # from here on it may spend (flows.task.settle)
                emit(ctx, "subagent_start", start_data(spec, sid))
                result = await children.run_one_typed(ctx, call, spec, sid)
                results[index] = result
                spend = known_spend(result.usage)
                if spend is not None:
                    call.spent[index] = spend
                return as_tool_result(call.tool, result)

        branches = [Branch(call.tool, {}, s.description) for s in call.specs]
        policy = FanOutPolicy(call.allow_partial_failure, call.min_success_count, call.timeout_ms)
        try:
            fan = await fan_out(_Runner(), call.call_id, branches, policy)
        except asyncio.CancelledError:
            # The parent was cancelled (its caller, the session closing): every started child still
            # ends exactly once.
            for i, sid in sessions.items():
                if i not in ended:
                    spec = call.specs[i]
                    aborted = TaskResult.aborted(
                        task_id=spec.task_id,
                        index=i,
                        agent=spec.agent.name,
                        description=spec.description,
                        session_id=sid,
                    )
                    emit(ctx, "subagent_end", end_data(results.get(i) or aborted, False, _redactor(ctx)))
            raise
        final = collect(call, fan.outcomes, results, sessions)
        for result in final:
            if result.index in sessions:
                ended.add(result.index)
                emit(ctx, "subagent_end", end_data(result, False, _redactor(ctx)))
        return task_outcome(
            call.tool,
            final,
            allow_partial_failure=call.allow_partial_failure,
            min_success_count=call.min_success_count,
            timed_out=any(o.status == "timed_out" for o in fan.outcomes),
        )

    # ---- background ---------------------------------------------------------------------------

    def _start_background(self, ctx: ToolContext, call: TaskCall) -> ToolResult:
        spec = call.specs[0]
        sid = self.child_session_id(ctx, spec)
        emit(ctx, "subagent_start", start_data(spec, sid, background=True))
        task = asyncio.ensure_future(self._background_child(ctx, call, spec, sid))
        self._background[spec.task_id] = task
        handle = {
            "task_id": spec.task_id,
            "session_id": sid,
            "agent": spec.agent.name,
            "description": spec.description,
        }
        return ToolResult.success(
            call.tool,
            f"Started background task {spec.task_id} ({spec.agent.name}: {spec.description}). It runs on; "
            "its result arrives when it ends.",
            {"background_task": handle},
        )

    async def _background_child(
        self, ctx: ToolContext, call: TaskCall, spec: ChildSpec, sid: str
    ) -> TaskResult:
        result: TaskResult | None = None
        timeout_ms = call.timeout_ms
        try:
            child = self.run_one_typed(ctx, call, spec, sid)
            if timeout_ms is None:
                result = await child
            else:
                try:
                    result = await asyncio.wait_for(child, timeout_ms / 1000)
                except TimeoutError:
                    result = spec.aborted(sid, completion="timed_out", duration_ms=timeout_ms)
            return result
        finally:
            final = result or spec.aborted(sid)
            self._finish(spec.task_id, final)
            emit(ctx, "subagent_end", end_data(final, True, _redactor(ctx)))

    def _finish(self, task_id: str, result: TaskResult) -> None:
        self._background.pop(task_id, None)
        self._finished[task_id] = result
        while len(self._finished) > BACKGROUND_KEEP:
            self._finished.pop(next(iter(self._finished)))

    async def result(self, task_id: str, timeout_s: float | None = None) -> TaskResult:
        """A background child's result: at once when it ended, else after waiting for it."""
        done = self._finished.get(task_id)
        if done is not None:
            return done
        task = self._background.get(task_id)
        if task is None:
            raise NotFound(f"no background task {task_id!r} in this session", path=task_id)
        try:
            return await asyncio.wait_for(asyncio.shield(task), timeout_s)
        except TimeoutError:
            raise Timeout(
                f"background task {task_id} has not finished",
                op="task_result",
                duration_ms=int((timeout_s or 0) * 1000),
            ) from None

    def running(self) -> list[str]:
        return list(self._background)

    def close(self) -> None:
        """K-6: the session closes — its background children are cancelled and settled (each still
        ends with one ``subagent_end``) before this returns, unless called from their own loop."""
        tasks = list(self._background.values())
        if not tasks:
            return
        loop = tasks[0].get_loop()
        if loop.is_closed():
            return

        async def cancel_all() -> None:
            for task in tasks:
                task.cancel()
            await asyncio.wait(tasks, timeout=CLOSE_SETTLE_S)

        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            for task in tasks:
                task.cancel()
            return
        with contextlib.suppress(concurrent.futures.TimeoutError, RuntimeError):
            asyncio.run_coroutine_threadsafe(cancel_all(), loop).result(timeout=CLOSE_SETTLE_S + 1)


class InProcessChildren(ChildFanOut):
    """Children as sessions of this process, on the parent's loop (the embedded default)."""

    def __init__(self, factory: Any) -> None:
        super().__init__()
        self.factory = factory

    async def run_one(self, ctx: ToolContext, call: TaskCall, spec: ChildSpec, session_id: str) -> TaskResult:
        def spent(usage: dict[str, int]) -> None:  # cancelled too: the parent pays what it spent
            call.spent[spec.index] = usage

        return await run_child(
            self.factory, ctx.workspace, ctx.settings, spec, session_id=session_id, on_spent=spent
        )
