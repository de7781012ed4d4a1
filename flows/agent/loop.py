"""The agent loop: a prompt becomes model turns whose tool calls go through the kernel (SPEC A-2, K-3).

``run_agent(core, prompt, ...)`` appends the prompt to the session's conversation and alternates:
model turn (``model_turn``: bounded visible retries) → the turn's tool calls (``tool_turn``: origin
``agent``, the one kernel path, K-5 scheduling) → their projected results back to the model — until
the model answers without tool calls (success), ``max_steps`` model requests were made, the
deadline passes, the caller cancels, the session closes (K-6), or a failure no retry can fix. It
never raises for any of those: the ``RunResult`` says what happened (``error`` is a typed
``error_kind``), and ``run_end`` carries the same JSON.

Invariants:
- The conversation stays valid for any provider: every assistant tool call gets exactly one tool
  message — its result, or "not run" when the run stopped first (max_steps, cancel, timeout). Only
  a suspension (``a3s_suspend``) leaves calls pending on purpose; ``prompt=None`` answers them.
- One run per session at a time (``SessionCore.agent_lock``): a second prompt waits its turn.
- Model usage is charged to the session ``Budget`` before the next request is admitted.
- At most ``MAX_TOOL_CALLS_PER_TURN`` calls of one model turn run: a model (or a hostile server)
  answering with thousands of calls in one message has the rest answered ``budget_exhausted``
  ("not run") before any runs, so a suspension never leaves them pending.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection
from typing import Any

from flows.agent.conversation import Conversation
from flows.agent.model_turn import model_turn
from flows.agent.prompt import default_system_prompt
from flows.agent.result import (
    CANCELLED,
    END_TURN,
    ERROR,
    MAX_STEPS,
    SUSPENDED,
    TIMEOUT,
    RunResult,
    ToolCallRecord,
)
from flows.agent.tool_turn import run_tool_calls, tool_message
from flows.providers import Message, ModelRequest, Provider, ToolCall, ToolDef, Usage, provider_for
from kernel.errors import (
    BudgetExhausted,
    Cancelled,
    InvalidArgument,
    Timeout,
    ToolError,
    error_from_exception,
)
from kernel.events import Event
from kernel.result import ToolResult

log = logging.getLogger(__name__)
DEFAULT_MAX_STEPS = 50
MAX_MAX_STEPS = 10_000
MAX_PROMPT_BYTES = 4 * 1024 * 1024
# The calls of one model turn that run; the rest are answered "not run" (module docstring). Models
# ask for a handful at a time; a server may send any number within its 64 MiB answer.
MAX_TOOL_CALLS_PER_TURN = 64

EventListener = Callable[[Event], None]


class _Stop(Exception):
    """Ends a run early with a prepared result (max_steps, suspension)."""

    def __init__(self, result: RunResult) -> None:
        super().__init__(result.stop_reason)
        self.result = result


class _Run:
    def __init__(
        self,
        core: Any,
        provider: Provider,
        run_id: str,
        max_steps: int,
        deadline: float | None,
        stream: bool,
        system: str | None,
        tools: Collection[str] | None = None,
    ) -> None:
        self.core = core
        # The run's surface: the tools offered to the model and the only ones its calls resolve.
        self.tools = frozenset(tools) if tools is not None else None
        self.kernel = core.kernel
        self.conversation: Conversation = core.conversation
        self.provider = provider
        self.run_id = run_id
        self.max_steps = max_steps
        self.deadline = deadline
        self.stream = stream
        self.system = system if system is not None else default_system_prompt(core.workspace_name)
        self.steps = 0
        self.usage = Usage()
        self.records: list[ToolCallRecord] = []
        self.text = ""

    # ---- events --------------------------------------------------------------------------------

    def emit(self, type_: str, data: dict[str, Any]) -> None:
        k = self.kernel
        k.sink.emit(Event(type_, self.run_id, "", "agent", k.clock.now_ms(), None, data))

    def result(self, success: bool, stop: str, error: ToolError | None = None) -> RunResult:
        return RunResult(
            text=self.text,
            success=success,
            steps=self.steps,
            tool_calls=list(self.records),
            usage=self.usage,
            error=error.to_kind() if error is not None else None,
            stop_reason=stop,
            session_id=self.kernel.session_id,
            run_id=self.run_id,
            model=self.provider.name,
            message=error.message if error is not None else "",
        )

    # ---- the loop ------------------------------------------------------------------------------

    async def execute(self, prompt: str | None, tool_results: dict[str, ToolResult] | None) -> RunResult:
        pending = self.conversation.pending_calls()
        if prompt is not None:
            # A new prompt supersedes calls a previous run left pending: they are answered "not run".
            self._close_pending(pending, "not run: a new prompt was sent before this call finished")
            self.conversation.append(Message("user", prompt))
        elif pending:
            await self._answer_pending(pending, tool_results or {})
        elif not self.conversation.messages:
            raise InvalidArgument("nothing to continue: the conversation is empty (send a prompt)")
        while True:
            self.steps += 1
            completion = await self._model_turn()
            message = completion.message
            self.conversation.append(message)
            self.text = message.content
            if not message.tool_calls:
                return self.result(True, END_TURN)
            if self.steps >= self.max_steps:
                self._close_pending(list(message.tool_calls), "not run: the run reached max_steps")
                err = BudgetExhausted(
                    f"the run reached max_steps={self.max_steps} while the model still asked for tools",
                    resource="max_steps",
                    reason=f"max_steps limit {self.max_steps} reached",
                    consumed=self.steps,
                    limit=self.max_steps,
                )
                raise _Stop(self.result(False, MAX_STEPS, err))
            await self._tool_turn(self._within_turn_cap(list(message.tool_calls)))

    async def _model_turn(self) -> Any:
        k = self.kernel
        for th in k.budget.check_before_model(k.clock.now_ms()):
            self.emit(
                "budget_threshold",
                {
                    "kind": th.kind,
                    "resource": th.resource,
                    "consumed": th.consumed,
                    "limit": th.limit,
                    "message": th.message,
                },
            )
        request = ModelRequest(
            messages=self.conversation.messages,
            system=self.system,
            tools=[
                ToolDef(d["name"], d["description"], d["parameters"])
                for d in k.registry.definitions()
                if self.tools is None or d["name"] in self.tools
            ],
            stream=self.stream,
            deadline=self.deadline,
        )
        completion = await model_turn(self.provider, request, self.steps, self.emit)
        u = completion.usage
        self.usage = self.usage + u
        self.conversation.usage = self.conversation.usage + u
        k.budget.charge_model(u.prompt_tokens, u.completion_tokens, u.cached_tokens)
        self.emit(
            "model_response",
            {
                "step": self.steps,
                "stop_reason": completion.stop_reason,
                "usage": u.to_json(),
                "tool_calls": [
                    {"model_call_id": c.id, "tool": c.name} for c in completion.message.tool_calls
                ],
            },
        )
        return completion

    async def _tool_turn(self, calls: list[ToolCall], given: dict[str, ToolResult] | None = None) -> None:
        given = given or {}
        to_run = [c for c in calls if c.id not in given]
        outcomes = {
            o.call.id: o
            for o in await run_tool_calls(self.kernel, to_run, self.steps, self.deadline, self.tools)
        }
        suspended = False
        for call in calls:  # results go back in the order the model asked
            if call.id in given:
                self.conversation.append(tool_message(call, given[call.id]))
                continue
            outcome = outcomes[call.id]
            self.records.append(outcome.record)
            if outcome.suspended:
                suspended = True  # stays pending in the conversation
                continue
            self.conversation.append(tool_message(call, outcome.result))
        if suspended:
            raise _Stop(self.result(False, SUSPENDED))

    def _within_turn_cap(self, calls: list[ToolCall]) -> list[ToolCall]:
        """The calls of this turn that may run; the rest are answered ``budget_exhausted`` now."""
        if len(calls) <= MAX_TOOL_CALLS_PER_TURN:
            return calls
        for call in calls[MAX_TOOL_CALLS_PER_TURN:]:
            refusal = BudgetExhausted(
                f"not run: the model asked for {len(calls)} tool calls in one turn and at most "
                f"{MAX_TOOL_CALLS_PER_TURN} run per turn; ask for the rest in the next turn",
                resource="tool_calls_per_turn",
                reason=f"tool calls per turn limit {MAX_TOOL_CALLS_PER_TURN} reached",
            )
            self.conversation.append(tool_message(call, ToolResult.failure(call.name, refusal)))
        return calls[:MAX_TOOL_CALLS_PER_TURN]

    async def _answer_pending(self, pending: list[ToolCall], given: dict[str, ToolResult]) -> None:
        await self._tool_turn(pending, {k: v for k, v in given.items() if k in {c.id for c in pending}})

    def _close_pending(self, calls: list[ToolCall], why: str) -> None:
        for call in calls:
            self.conversation.append(
                Message("tool", f"Error (cancelled): {why}", tool_call_id=call.id, name=call.name)
            )

    def close_interrupted(self, why: str) -> None:
        """After a cancel/timeout/failure: answer whatever the last turn left without a result."""
        self._close_pending(self.conversation.pending_calls(), why)


def _resolve_provider(core: Any, model: str | Provider | None) -> Provider:
    if model is not None and not isinstance(model, str):
        return model
    name = model if model is not None else core.model
    if not name:
        raise InvalidArgument(
            "no model: pass --model, set A3S_MODEL, or Agent(model=...) (e.g. openai:gpt-4o-mini)"
        )
    return provider_for(name)


def _check_arguments(prompt: str | None, max_steps: int, timeout_ms: int | None) -> None:
    if prompt is not None:
        if not isinstance(prompt, str) or not prompt.strip():
            raise InvalidArgument("prompt: must be a non-blank string")
        if len(prompt.encode("utf-8", "surrogatepass")) > MAX_PROMPT_BYTES:
            raise InvalidArgument(f"prompt: larger than {MAX_PROMPT_BYTES} bytes")
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or not 1 <= max_steps <= MAX_MAX_STEPS:
        raise InvalidArgument(f"max_steps: an integer from 1 to {MAX_MAX_STEPS}")
    if timeout_ms is not None and (
        isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int) or timeout_ms < 1
    ):
        raise InvalidArgument("timeout_ms: a positive integer")


async def run_agent(
    core: Any,
    prompt: str | None,
    *,
    model: str | Provider | None = None,
    max_steps: int = DEFAULT_MAX_STEPS,
    on_event: EventListener | None = None,
    cancel: asyncio.Event | None = None,
    timeout_ms: int | None = None,
    stream: bool = True,
    system: str | None = None,
    tool_results: dict[str, ToolResult] | None = None,
    tools: Collection[str] | None = None,
) -> RunResult:
    """Run one prompt (or, with ``prompt=None``, continue the stored conversation) on ``core``
    (a ``flows.sessions.SessionCore``); must run on the session's loop. See the module docstring."""
    kernel = core.kernel
    run_id = kernel.ids("run")
    async with core.agent_lock:
        # Subscribed once the run owns the conversation: a waiting run never sees another's events.
        unsubscribe = core.memory.subscribe(on_event) if on_event is not None else None
        try:
            with kernel.cancel_scope():  # K-6: closing the session cancels the run
                return await _supervise(
                    core,
                    run_id,
                    prompt,
                    model,
                    max_steps,
                    cancel,
                    timeout_ms,
                    stream,
                    system,
                    tool_results,
                    tools,
                )
        finally:
            if unsubscribe is not None:
                unsubscribe()


async def _supervise(
    core: Any,
    run_id: str,
    prompt: str | None,
    model: str | Provider | None,
    max_steps: int,
    cancel: asyncio.Event | None,
    timeout_ms: int | None,
    stream: bool,
    system: str | None,
    tool_results: dict[str, ToolResult] | None,
    tools: Collection[str] | None = None,
) -> RunResult:
    kernel = core.kernel
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_ms / 1000 if timeout_ms is not None else None
    try:
        if kernel.closed:  # closed while this run waited for the conversation
            raise Cancelled("the session is closed", op="agent")
        _check_arguments(prompt, max_steps, timeout_ms)
        provider = _resolve_provider(core, model)
    except ToolError as err:  # bad arguments, closed session: before any request, nothing appended
        name = model if isinstance(model, str) else (core.model or "")
        failed = RunResult(
            "",
            False,
            0,
            error=err.to_kind(),
            stop_reason=CANCELLED if isinstance(err, Cancelled) else ERROR,
            session_id=kernel.session_id,
            run_id=run_id,
            model=name or "",
            message=err.message,
        )
        _emit_end(kernel, run_id, failed)
        return failed
    run = _Run(core, provider, run_id, max_steps, deadline, stream, system, tools)
    run.emit(
        "run_start", {"run_id": run_id, "model": provider.name, "max_steps": max_steps, "stream": stream}
    )
    body = asyncio.ensure_future(run.execute(prompt, tool_results))
    waiters: set[asyncio.Future[Any]] = {body}
    cancel_wait = asyncio.ensure_future(cancel.wait()) if cancel is not None else None
    if cancel_wait is not None:
        waiters.add(cancel_wait)
    result: RunResult
    try:
        left = None if deadline is None else max(0.0, deadline - loop.time())
        done, _ = await asyncio.wait(waiters, timeout=left, return_when=asyncio.FIRST_COMPLETED)
        if body in done:
            result = _outcome(run, body)
        else:
            await _stop(body)
            if cancel_wait is not None and cancel_wait in done:
                run.close_interrupted("interrupted: the run was cancelled")
                result = run.result(False, CANCELLED, Cancelled("the run was cancelled", op="agent"))
            else:
                run.close_interrupted("interrupted: the run timed out")
                ms = timeout_ms or 0
                result = run.result(
                    False, TIMEOUT, Timeout(f"the run timed out after {ms}ms", op="agent", duration_ms=ms)
                )
    except asyncio.CancelledError:
        await _stop(body)
        run.close_interrupted("interrupted: the run was cancelled")
        if not kernel.closed:
            _emit_end(
                kernel, run_id, run.result(False, CANCELLED, Cancelled("the run was cancelled", op="agent"))
            )
            raise  # the caller's own cancellation keeps its meaning
        result = run.result(False, CANCELLED, Cancelled("the run was cancelled: session closed", op="agent"))
    finally:
        if cancel_wait is not None:
            cancel_wait.cancel()
    _emit_end(kernel, run_id, result)
    return result


def _outcome(run: _Run, body: asyncio.Future[RunResult]) -> RunResult:
    try:
        return body.result()
    except _Stop as stop:
        return stop.result
    except asyncio.CancelledError:  # cancelled from below (a tool's scope): treat as a cancel
        run.close_interrupted("interrupted: the run was cancelled")
        return run.result(False, CANCELLED, Cancelled("the run was cancelled", op="agent"))
    except ToolError as err:
        run.close_interrupted(f"interrupted: the run failed ({err.kind})")
        reason = TIMEOUT if isinstance(err, Timeout) else (CANCELLED if isinstance(err, Cancelled) else ERROR)
        return run.result(False, reason, err)
    except Exception as exc:  # a bug below (provider, kernel): a typed failure, the traceback logged
        log.error("agent run %s failed", run.run_id, exc_info=exc)
        run.close_interrupted("interrupted: the run failed (internal_error)")
        return run.result(False, ERROR, error_from_exception(exc, "agent"))


async def _stop(task: asyncio.Future[Any]) -> None:
    task.cancel()
    try:
        await task
    except (asyncio.CancelledError, Exception):  # the caller decides the outcome
        pass


def _emit_end(kernel: Any, run_id: str, result: RunResult) -> None:
    kernel.sink.emit(
        Event("run_end", run_id, "", "agent", kernel.clock.now_ms(), None, {"result": result.to_json()})
    )
