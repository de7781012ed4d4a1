"""The invocation kernel: one call path for every origin (SPEC K-1..K-8, S-4, S-5).

``Kernel.invoke`` runs the stages of K-3 in this order, over one ``Invocation``::

    resolve (scoped registry) → validate (cached schema) → skill restriction → permission policy
    → confirmation → pre-hooks (rewrite ⇒ validate + gate again) → budget → slots + deadline
    → cancel scope → recursion guard → execute → post-hooks → sanitise → project (+ evidence)

Only the policy stages (skill restriction, permission, confirmation: ``kernel.gate``) look at the
origin; trusted host-direct calls and trusted built-in nesting skip them, nothing skips the
pre-hooks. Arguments are depth-checked and shown in events by ``kernel.call_args``. A stage
stops the chain by raising a ``ToolError``; every outcome — success, denial, invalid arguments,
unknown tool, timeout, cancellation — comes back as a projected ``ToolResult`` with evidence, and
the lifecycle records exactly one terminal state. Nested calls re-enter here through the
``NestedInvoker`` bound to their parent: same scope, deadline, cancellation, budget and hooks;
their origin is decided by ``_child_origin``, never by the caller.

Inline calls (``invoke_host_inline``): a trusted host-direct call of a tool with a synchronous body
(``ToolSpec.run_inline``, a plain host-tool handler) made from a synchronous thread runs this same
``invoke`` coroutine on the caller's thread instead of handing it to the loop — every stage above,
in the same order, with the same events. The coroutine never suspends there: the slots are taken
up front with ``try_acquire`` (or the call goes to the loop as usual), the body is called directly,
and a hook that returns an awaitable has it run on the loop while the caller waits. What differs:
the body cannot be abandoned at its deadline (the deadline is checked when it returns), and
``close()`` marks the call cancelled through its ``ctx.cancelled`` flag instead of a task.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

from kernel import remote_stages
from kernel.artifacts import ArtifactStore
from kernel.budget import Budget, BudgetTracker, Reservation
from kernel.call_args import MAX_ARGS_DEPTH, check_depth, depth_within, event_args
from kernel.capabilities import ToolCapabilities
from kernel.clock import Clock, IdFactory
from kernel.context import CancelFlag, NestedInvoker, ToolContext
from kernel.errors import (
    BudgetExhausted,
    Cancelled,
    HookDenied,
    InternalError,
    InvalidArgument,
    RecursionLimit,
    Timeout,
    ToolError,
    bound_error_kind,
    error_from_exception,
)
from kernel.events import Event, EventSink
from kernel.gate import PolicyGate
from kernel.hooks import PostToolInput, PreToolInput, freeze, is_async_callable
from kernel.invocation import CONTAINED, Invocation, RunOnLoop
from kernel.lifecycle import Lifecycle, State, terminal_state
from kernel.options import SessionOptions
from kernel.origin import ControlPlane, Origin, event_label
from kernel.policy import Deny, PermissionPolicy
from kernel.redact import DefaultSecretRedactor, SecretRedactor
from kernel.registry import Registry, ScopedRegistry
from kernel.result import ToolResult
from kernel.slots import Slots
from kernel.spec import ToolSpec
from kernel.workspace import Workspace

RECURSION_GUARDED = frozenset({"batch", "program", "dynamic_workflow"})

log = logging.getLogger(__name__)


class ResultProjector(Protocol):
    def project(self, tool_name: str, output: str, metadata: Any) -> tuple[str, dict[str, Any]]: ...


ChangeCompactor = Callable[[dict[str, Any], ArtifactStore, str], dict[str, Any]]


class Kernel:
    def __init__(
        self,
        *,
        session_id: str,
        registry: Registry,
        workspace: Workspace,
        options: SessionOptions,
        projector: ResultProjector,
        artifacts: ArtifactStore,
        sink: EventSink,
        clock: Clock,
        ids: IdFactory,
        compact_change: ChangeCompactor | None = None,
        services: dict[str, Any] | None = None,
        session_state: dict[str, Any] | None = None,
        budget_used: dict[str, Any] | None = None,
        started_ms: int | None = None,
    ) -> None:
        self.session_id = session_id
        self.registry = registry
        self.workspace = workspace
        self.options = options
        self.projector = projector
        self.artifacts = artifacts
        self.sink = sink
        self.clock = clock
        self.ids = ids
        self.compact_change = compact_change
        self.services = services if services is not None else {}
        self.session_state = session_state if session_state is not None else {}
        self.policy = options.permission_policy or PermissionPolicy()
        self.redactor: SecretRedactor = options.secret_redactor or DefaultSecretRedactor()
        self.started_ms = started_ms if started_ms is not None else clock.now_ms()
        self.budget = BudgetTracker(options.budget or Budget(), self.started_ms, budget_used)
        self.active: dict[str, dict[str, Any]] = {}
        self.closed = False
        self._tasks: set[asyncio.Task[Any]] = set()
        self._inline_flags: set[Any] = set()  # ctx.cancelled of the inline calls running now
        self._session_slots = Slots(options.max_concurrent_calls)
        self._tool_slots: dict[str, Slots] = {}
        self._gate = PolicyGate(
            session_id=session_id,
            options=options,
            policy=self.policy,
            workspace=workspace,
            session_state=self.session_state,
            emit=self._emit,
        )

    # ---- public entry points (the only places an origin is chosen) ----------------------------

    async def invoke_host(self, name: str, args: Any, *, governed: bool = False) -> ToolResult:
        """``session.tool`` (trusted) / ``session.governed_tool`` (governed control plane)."""
        plane = ControlPlane.GOVERNED if governed else ControlPlane.TRUSTED
        return await self._top_level(name, args, Origin.HOST_DIRECT, plane)

    async def invoke_agent(
        self,
        name: str,
        args: Any,
        *,
        call_id: str | None = None,
        deadline: float | None = None,
        tags: dict[str, Any] | None = None,
        scope: Iterable[str] | None = None,
    ) -> ToolResult:
        """A model tool call: full policy and confirmation. The agent loop passes the run's
        ``deadline`` (event-loop time) and ``tags`` that ``tool_start`` carries (model call id, step);
        ``scope`` restricts the names the call may resolve (a sub-agent's tools: anything else is
        ``not_found``, K-3), nested calls included."""
        return await self._top_level(
            name, args, Origin.AGENT, None, call_id=call_id, deadline=deadline, tags=tags, scope=scope
        )

    async def _top_level(
        self,
        name: str,
        args: Any,
        origin: Origin,
        plane: ControlPlane | None,
        *,
        call_id: str | None = None,
        deadline: float | None = None,
        tags: dict[str, Any] | None = None,
        scope: Iterable[str] | None = None,
    ) -> ToolResult:
        inv = Invocation(
            name,
            args,
            origin,
            plane,
            call_id or self.ids("call"),
            self.registry.scoped(scope),
            deadline=deadline,
            tags=tags,
        )
        with self.cancel_scope():
            await self._session_slots.acquire()
            try:
                return await self.invoke(inv)
            finally:
                self._session_slots.release()

    def invoke_host_inline(self, name: str, args: Any, run_on_loop: RunOnLoop) -> ToolResult | None:
        """``session.tool`` on the calling (synchronous, non-loop) thread; ``None`` when this call
        must go to the loop instead: the tool has no synchronous body, a hook is async, or a slot is
        not free right now (queued calls keep their turn). Nothing has happened when ``None`` comes back.
        """
        spec = self.registry.get(name)
        if spec is None or spec.run_inline is None or self.closed or not self._hooks_are_plain():
            return None
        tool_slot = self._tool_slot(name)
        if not self._session_slots.try_acquire():
            return None
        if not tool_slot.try_acquire():
            self._session_slots.release()
            return None
        try:
            inv = Invocation(
                name,
                args,
                Origin.HOST_DIRECT,
                ControlPlane.TRUSTED,
                self.ids("call"),
                self.registry.scoped(),
                inline=run_on_loop,
            )
            coro = self.invoke(inv)
            try:
                coro.send(None)
            except StopIteration as done:
                result: ToolResult = done.value
                return result
            # Unreachable: in inline mode no stage awaits anything that suspends (module docstring).
            coro.close()
            raise RuntimeError(f"inline call of {name!r} suspended")
        finally:
            tool_slot.release()
            self._session_slots.release()

    def _hooks_are_plain(self) -> bool:
        """No hook is an ``async def`` (an inline call would have to hand each one to the loop)."""
        return not any(
            is_async_callable(h) for h in (*self.options.pre_tool_hooks, *self.options.post_tool_hooks)
        )

    def _tool_slot(self, name: str) -> Slots:
        slot = self._tool_slots.get(name)
        if slot is None:
            limit = self.options.tool_slots.get(name, self.options.default_tool_slots)
            slot = self._tool_slots.setdefault(name, Slots(limit))
        return slot

    # ---- stages of a call that executes elsewhere (a fleet job): ``kernel.remote_stages`` ----------

    async def admit_host(self, name: str, args: Any) -> Any:
        """Resolve, validate and pre-hooks here, for a trusted host-direct call run on a worker."""
        return await remote_stages.admit_host(self, name, args)

    def hold_remote(self, name: str, args: Any) -> Reservation | ToolResult:
        """The budget stage here, for a call run on a worker (held, or released refused)."""
        return remote_stages.hold_remote(self, name, args)

    async def post_remote(self, name: str, args: Any, result: ToolResult) -> ToolResult:
        """Post-tool hooks here, for a call that ran on a worker."""
        return await remote_stages.post_remote(self, name, args, result)

    @contextlib.contextmanager
    def cancel_scope(self) -> Iterator[None]:
        """Put the current task in the session's cancel scope (work driven from outside the
        pipeline, e.g. a direct call the fleet runs on a worker): ``close()`` cancels it too."""
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            yield
        finally:
            if task is not None:
                self._tasks.discard(task)

    def close(self) -> None:
        """K-6: cancel every running call through the session's cancel scope."""
        self.closed = True
        for task in list(self._tasks):
            task.cancel()
        for flag in list(self._inline_flags):  # inline calls: the body sees it; the result says cancelled
            flag.set()

    def capabilities_of(self, scope: ScopedRegistry, name: str, args: Any) -> ToolCapabilities | None:
        try:
            if not depth_within(args, MAX_ARGS_DEPTH):
                return None
            spec = scope.resolve(name)
            return spec.capabilities(spec.validate(args))
        except CONTAINED:
            return None

    # ---- the pipeline -----------------------------------------------------------------------

    async def invoke(self, inv: Invocation) -> ToolResult:
        lc = Lifecycle()
        t0 = self.clock.monotonic()
        label = event_label(inv.origin, inv.plane)
        self.active[inv.call_id] = {
            "call_id": inv.call_id,
            "tool": inv.name,
            "origin": label,
            "parent_call_id": inv.parent_call_id,
            "started_ms": self.clock.now_ms(),
        }
        shown = event_args(self.registry.get(inv.name), inv.args)
        start: dict[str, Any] = {"args": shown, "depth": inv.depth}
        if inv.tags:
            start.update(inv.tags)
        self._emit("tool_start", inv, label, start)
        spec: ToolSpec | None = None
        try:
            spec = inv.scope.resolve(inv.name)
            lc.to(State.ADMITTED)
            check_depth(inv.args)
            params = spec.validate(inv.args)  # K-4: before confirmation or any side effect
            lc.to(State.GATE_PENDING)
            await self._gate.check(inv, spec, params, label)
            params = await self._pre_hooks(inv, spec, params, label)
            self._charge_call(inv, label)
            result = await self._run(inv, spec, params, lc, label)
            state = State.COMPLETED if result.exit_code == 0 else State.FAILED
        except asyncio.CancelledError:
            if inv.parent_call_id is not None or not self.closed:
                # Nested: the parent owns the cancellation. Top level not closed: a caller's cancel.
                self._finish_cancelled(inv, lc, label, t0)
                raise
            result = ToolResult.failure(
                inv.name, Cancelled(f"Tool '{inv.name}' cancelled: session closed", op=inv.name)
            )
            state = State.CANCELLED
        except CONTAINED as exc:
            # K-8: whatever a stage or the tool raised is a failed, typed result; the loop goes on.
            err = self._typed(inv, exc)
            result = ToolResult.failure(inv.name, err)
            state = terminal_state(err)
        try:
            return self._release(inv, spec, result, lc, state, label, t0)
        except CONTAINED as exc:  # a broken projector/redactor/sink must not strand the call
            return self._release_bare(inv, lc, label, t0, self._typed(inv, exc))

    def _typed(self, inv: Invocation, exc: BaseException) -> ToolError:
        """The typed error for ``exc``; an untyped one is logged with its traceback (never shown)."""
        if not isinstance(exc, ToolError):
            log.error("tool %s (call %s) raised %s", inv.name, inv.call_id, type(exc).__name__, exc_info=exc)
        return error_from_exception(exc, inv.name)

    def _release_bare(
        self, inv: Invocation, lc: Lifecycle, label: str, t0: float, err: ToolError
    ) -> ToolResult:
        """Release without projection: the last resort when ``_release`` itself failed."""
        result = ToolResult.failure(inv.name, err)
        if not lc.terminal:
            lc.to(State.FAILED)
        self.active.pop(inv.call_id, None)
        with contextlib.suppress(*CONTAINED):
            self._emit(
                "tool_end",
                inv,
                label,
                {
                    "exit_code": 1,
                    "state": State.FAILED.value,
                    "duration_ms": int((self.clock.monotonic() - t0) * 1000),
                    "error_kind": result.error_kind,
                    "output": result.output,
                },
            )
        return result

    async def _pre_hooks(self, inv: Invocation, spec: ToolSpec, params: Any, label: str) -> Any:
        for hook in self.options.pre_tool_hooks:
            hook_input = PreToolInput(
                self.session_id, inv.call_id, inv.parent_call_id, inv.name, freeze(inv.args), label
            )
            outcome = await self._call_hook(inv, hook, hook_input)
            if outcome is None:
                continue
            if isinstance(outcome, Deny):
                raise HookDenied(
                    f"Tool '{inv.name}' blocked by hook: {outcome.reason}",
                    reason=outcome.reason,
                    retryable=outcome.retryable,
                    retry_after_ms=outcome.retry_after_ms,
                )
            if isinstance(outcome, dict):
                # Rewritten arguments are validated again, and gated again: a hook can never
                # turn a call into one the policy would have refused.
                inv.args = outcome
                params = spec.validate(outcome)
                await self._gate.check(inv, spec, params, label)
                continue
            raise InvalidArgument(
                f"pre-tool hook returned {type(outcome).__name__}; expected None, dict or Deny"
            )
        return params

    def _charge_call(self, inv: Invocation, label: str) -> None:
        try:
            crossed = self.budget.check_before_call(self.clock.now_ms())
        except BudgetExhausted as err:
            self._emit("budget_threshold", inv, label, {"kind": "hard", **err.data, "message": err.message})
            raise
        for th in crossed:
            self._emit("budget_threshold", inv, label, th.event_data())

    async def _run(
        self, inv: Invocation, spec: ToolSpec, params: Any, lc: Lifecycle, label: str
    ) -> ToolResult:
        # Deadlines are on the loop's clock; asyncio's loop.time() is time.monotonic(), which an
        # inline call (no running loop on its thread) reads directly.
        now = time.monotonic if inv.inline is not None else asyncio.get_running_loop().time
        timeout_ms = (
            self.options.tool_timeouts_ms.get(inv.name)
            or spec.timeout_ms
            or self.options.default_tool_timeout_ms
        )
        deadline = now() + timeout_ms / 1000
        if inv.deadline is not None:
            deadline = min(deadline, inv.deadline)
        # The wall-time budget bounds what runs, not only what starts (a nested workflow's own
        # timeout is 24 h): past it the call ends as budget_exhausted, not as the tool's timeout.
        wall_left_ms = self.budget.wall_time_left_ms(self.clock.now_ms())
        wall_deadline = None if wall_left_ms is None else now() + max(0, wall_left_ms) / 1000
        if wall_deadline is not None:
            deadline = min(deadline, wall_deadline)
        # An inline body gets the parameters only: its context is just the cancellation flag.
        ctx: Any = _InlineContext() if inv.inline is not None else self._context(inv, spec, deadline, label)
        started = now()
        try:
            if inv.inline is not None:
                raw = self._run_inline(inv, spec, params, lc, ctx, deadline)
            else:
                slot = self._tool_slot(inv.name)
                async with asyncio.timeout_at(deadline):
                    await slot.acquire()
                    try:
                        if self.closed:
                            raise Cancelled(f"Tool '{inv.name}' cancelled: session closed", op=inv.name)
                        lc.to(State.RUNNING)
                        self._recursion_guard(inv)
                        raw = await spec.run(ctx, params)
                    finally:
                        slot.release()
        except TimeoutError:
            ctx.cancelled.set()
            duration_ms = int((now() - started) * 1000)
            if wall_deadline is not None and deadline >= wall_deadline and now() >= wall_deadline:
                limit = self.budget.budget.max_wall_time_ms or 0
                raise BudgetExhausted(
                    f"Budget exhausted: wall_time_ms {limit} of {limit} used while '{inv.name}' ran",
                    resource="wall_time_ms",
                    reason=f"wall_time_ms limit {limit} reached",
                    consumed=limit,
                    limit=limit,
                ) from None
            raise Timeout(
                f"Tool '{inv.name}' timed out after {timeout_ms}ms", op=inv.name, duration_ms=duration_ms
            ) from None
        except asyncio.CancelledError:
            ctx.cancelled.set()
            raise
        result = _as_result(inv.name, raw, spec)
        for hook in self.options.post_tool_hooks:
            post = PostToolInput(
                self.session_id,
                inv.call_id,
                inv.parent_call_id,
                inv.name,
                freeze(inv.args),
                label,
                result,
                int((now() - started) * 1000),
            )
            replaced = await self._call_hook(inv, hook, post)
            if isinstance(replaced, ToolResult):
                result = replaced
        return result

    def _run_inline(
        self,
        inv: Invocation,
        spec: ToolSpec,
        params: Any,
        lc: Lifecycle,
        ctx: _InlineContext,
        deadline: float,
    ) -> Any:
        """The body of an inline call, on the caller's thread (its slots were taken up front)."""
        body = spec.run_inline
        if body is None:  # the tool was replaced by one without a synchronous body meanwhile
            raise InternalError(f"tool '{inv.name}' can no longer run inline; call it again")
        self._inline_flags.add(ctx.cancelled)
        try:
            if self.closed:
                raise Cancelled(f"Tool '{inv.name}' cancelled: session closed", op=inv.name)
            lc.to(State.RUNNING)
            self._recursion_guard(inv)
            raw = body(params)
        finally:
            self._inline_flags.discard(ctx.cancelled)
        if ctx.cancelled.is_set() or self.closed:  # closed while the body ran: its result is dropped
            raise Cancelled(f"Tool '{inv.name}' cancelled: session closed", op=inv.name)
        if time.monotonic() > deadline:
            raise TimeoutError  # the body overran: a timeout, as if it had been abandoned on time
        return raw

    async def _call_hook(self, inv: Invocation, hook: Callable[..., Any], arg: Any) -> Any:
        """A hook's answer; an awaitable one is awaited (inline: on the loop, this thread waiting)."""
        out = hook(arg)
        if inspect.isawaitable(out):
            out = inv.inline(out) if inv.inline is not None else await out
        return out

    def _recursion_guard(self, inv: Invocation) -> None:
        if inv.name in RECURSION_GUARDED and inv.name in inv.stack:
            raise RecursionLimit(
                f"recursive {inv.name} calls are not allowed", tool=inv.name, depth=inv.depth
            )
        if inv.depth > self.options.max_nesting_depth:
            raise RecursionLimit(
                f"nesting depth {inv.depth} exceeds the limit of {self.options.max_nesting_depth}",
                tool=inv.name,
                depth=inv.depth,
            )

    def _context(self, inv: Invocation, spec: ToolSpec, deadline: float, label: str) -> ToolContext:
        child_origin = _child_origin(inv, spec)

        def make_invoker(scope: ScopedRegistry) -> NestedInvoker:
            async def nested(name: str, args: dict[str, Any]) -> ToolResult:
                child = Invocation(
                    name,
                    args,
                    child_origin,
                    None,
                    self.ids("call"),
                    scope,
                    parent_call_id=inv.call_id,
                    depth=inv.depth + 1,
                    stack=(*inv.stack, inv.name),
                    deadline=deadline,
                )
                return await self.invoke(child)

            return NestedInvoker(
                nested,
                scope.names,
                lambda n, a: self.capabilities_of(scope, n, a),
                narrow=lambda allowed: make_invoker(scope.narrow(allowed)),
            )

        def emit_delta(delta: Any) -> None:
            self._emit("tool_output_delta", inv, label, {"delta": delta})

        def emit_event(type_: str, data: dict[str, Any]) -> None:
            self._emit(type_, inv, label, data)

        return ToolContext(
            session_id=self.session_id,
            call_id=inv.call_id,
            tool_name=inv.name,
            origin=inv.origin,
            control_plane=inv.plane,
            workspace=self.workspace,
            artifacts=self.artifacts,
            clock=self.clock,
            new_id=self.ids,
            deadline=deadline,
            invoker=make_invoker(inv.scope),
            emit_delta=emit_delta,
            session_state=self.session_state,
            services=self.services,
            settings=self.options,
            parent_call_id=inv.parent_call_id,
            depth=inv.depth,
            emit_event=emit_event,
            budget=self.budget,
        )

    # ---- release: sanitise, project, account, emit ------------------------------------------

    def _release(
        self,
        inv: Invocation,
        spec: ToolSpec | None,
        result: ToolResult,
        lc: Lifecycle,
        state: State,
        label: str,
        t0: float,
    ) -> ToolResult:
        result.output = self.redactor.redact(result.output)
        if result.error_kind:
            bounded = bound_error_kind(result.error_kind) or {}
            result.error_kind = {
                k: self.redactor.redact(v) if isinstance(v, str) else v for k, v in bounded.items()
            }
        metadata: Any = result.metadata
        if (
            isinstance(metadata, dict)
            and self.compact_change is not None
            and "before" in metadata
            and "after" in metadata
        ):
            metadata = self.compact_change(metadata, self.artifacts, inv.name)
        result.output, result.metadata = self.projector.project(inv.name, result.output, metadata)
        if spec is not None:
            result.trust = spec.trust
        self.budget.charge_output(len(result.output.encode("utf-8", "surrogatepass")))
        lc.to(state)
        duration_ms = int((self.clock.monotonic() - t0) * 1000)
        if result.exit_code != 0:
            self._emit(
                "tool_error", inv, label, {"error_kind": result.error_kind, "message": result.output[:2048]}
            )
        self._emit(
            "tool_end",
            inv,
            label,
            {
                "exit_code": result.exit_code,
                "state": state.value,
                "duration_ms": duration_ms,
                "error_kind": result.error_kind,
                "output": result.output,
            },
        )
        self.active.pop(inv.call_id, None)
        return result

    def _finish_cancelled(self, inv: Invocation, lc: Lifecycle, label: str, t0: float) -> None:
        if not lc.terminal:
            lc.to(State.CANCELLED)
        kind = {"type": "cancelled", "op": inv.name}
        self._emit(
            "tool_error",
            inv,
            label,
            {"error_kind": kind, "message": f"Tool '{inv.name}' cancelled by caller"},
        )
        self._emit(
            "tool_end",
            inv,
            label,
            {
                "exit_code": 1,
                "state": "cancelled",
                "duration_ms": int((self.clock.monotonic() - t0) * 1000),
                "error_kind": kind,
            },
        )
        self.active.pop(inv.call_id, None)

    def _emit(self, type_: str, inv: Invocation, label: str, data: dict[str, Any]) -> None:
        self.sink.emit(
            Event(type_, inv.call_id, inv.name, label, self.clock.now_ms(), inv.parent_call_id, data)
        )


class _InlineContext:
    """What an inline call's body needs of a ``ToolContext``: only the cancellation flag ``close()`` sets."""

    __slots__ = ("cancelled",)

    def __init__(self) -> None:
        self.cancelled = CancelFlag()


def _child_origin(inv: Invocation, spec: ToolSpec) -> Origin:
    """K-1/K-2: only a *built-in* orchestrator invoked with host-direct trust passes that trust on."""
    trusted_parent = (inv.origin is Origin.HOST_DIRECT and inv.plane is ControlPlane.TRUSTED) or (
        inv.origin is Origin.TRUSTED_HOST_NESTED
    )
    if trusted_parent and spec.builtin and spec.orchestrator:
        return Origin.TRUSTED_HOST_NESTED
    return Origin.GOVERNED_NESTED


def _as_result(name: str, raw: Any, spec: ToolSpec) -> ToolResult:
    if isinstance(raw, ToolResult):
        raw.name = name
        return raw
    if isinstance(raw, str):
        return ToolResult.success(name, raw)
    raise InvalidArgument(f"tool '{name}' returned {type(raw).__name__}; expected str or ToolResult")
