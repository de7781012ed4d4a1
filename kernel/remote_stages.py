"""The stages of a call that executes elsewhere — a fleet job on a worker — that must still run in
the session's own kernel (SPEC K-3, S-5, F-1): the pre-tool hooks (host callables a worker does not
have), the budget hold (the session's one budget), and the post-tool hooks. ``Kernel.admit_host``,
``hold_remote`` and ``post_remote`` call these; each emits the events an embedded call emits.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from kernel.budget import Reservation
from kernel.call_args import event_args
from kernel.errors import BudgetExhausted, bound_error_kind, error_from_exception
from kernel.hooks import PostToolInput, call_maybe_async, freeze
from kernel.invocation import CONTAINED, Invocation
from kernel.lifecycle import Lifecycle, terminal_state
from kernel.origin import ControlPlane, Origin, event_label
from kernel.result import ToolResult
from kernel.spec import ToolSpec

if TYPE_CHECKING:
    from kernel.kernel import Kernel

log = logging.getLogger("kernel.kernel")


async def admit_host(kernel: Kernel, name: str, args: Any) -> Any:
    """The stages of a trusted host-direct call that must run *here* when it executes elsewhere.

    A fleet branch runs on a worker whose kernel has the session's JSON policy but not its host
    callables, so the pre-tool hooks (which no origin skips, K-3) run here first: resolve,
    validate, pre-hooks (a rewrite is validated again). Returns the admitted arguments, or the
    released failure ``ToolResult`` of a call that was refused (its events emitted here).
    """
    if not kernel.options.pre_tool_hooks:
        return args  # nothing host-side to run; the worker's kernel resolves and validates
    inv = Invocation(
        name, args, Origin.HOST_DIRECT, ControlPlane.TRUSTED, kernel.ids("call"), kernel.registry.scoped()
    )
    label = event_label(inv.origin, inv.plane)
    t0 = kernel.clock.monotonic()
    spec: ToolSpec | None = None
    try:
        spec = inv.scope.resolve(name)
        params = spec.validate(args)
        await kernel._pre_hooks(inv, spec, params, label)
        return inv.args
    except CONTAINED as exc:
        err = kernel._typed(inv, exc)
        kernel._emit("tool_start", inv, label, {"args": event_args(spec, args), "depth": 0})
        return kernel._release(
            inv, spec, ToolResult.failure(name, err), Lifecycle(), terminal_state(err), label, t0
        )


def hold_remote(kernel: Kernel, name: str, args: Any) -> Reservation | ToolResult:
    """The budget stage of a call that executes elsewhere (a fleet job): held on this session's
    budget (``BudgetTracker.hold_call``; a tool that ``spends_beyond_call`` is allotted what is
    left), with the ``budget_threshold`` events an embedded call emits; a refused call is
    released here as embedded releases it (``tool_start``, ``budget_threshold``, ``tool_error``,
    ``tool_end``; its output charged) and returned."""
    inv = Invocation(
        name, args, Origin.HOST_DIRECT, ControlPlane.TRUSTED, kernel.ids("call"), kernel.registry.scoped()
    )
    label = event_label(inv.origin, inv.plane)
    spec = kernel.registry.get(name)
    try:
        held = kernel.budget.hold_call(
            kernel.clock.now_ms(), delegates=spec is not None and spec.spends_beyond_call
        )
    except BudgetExhausted as err:
        kernel._emit("tool_start", inv, label, {"args": event_args(spec, args), "depth": 0})
        kernel._emit("budget_threshold", inv, label, {"kind": "hard", **err.data, "message": err.message})
        return kernel._release(
            inv,
            spec,
            ToolResult.failure(name, err),
            Lifecycle(),
            terminal_state(err),
            label,
            kernel.clock.monotonic(),
        )
    for th in held.crossed:
        kernel._emit("budget_threshold", inv, label, th.event_data())
    return held


async def post_remote(kernel: Kernel, name: str, args: Any, result: ToolResult) -> ToolResult:
    """Post-tool hooks for a call that executed elsewhere; a replacement is sanitised and projected here."""
    replaced = False
    for hook in kernel.options.post_tool_hooks:
        post = PostToolInput(
            kernel.session_id,
            "",
            None,
            name,
            freeze(args),
            event_label(Origin.HOST_DIRECT, ControlPlane.TRUSTED),
            result,
            int(result.metadata.get("a3s_fleet", {}).get("duration_ms", 0) or 0),
        )
        try:
            out = await call_maybe_async(hook, post)
        except CONTAINED as exc:
            err = error_from_exception(exc, name)
            log.error("post-tool hook failed for %s", name, exc_info=exc)
            out = ToolResult.failure(name, err)
            out.error_kind = bound_error_kind(out.error_kind)
        if isinstance(out, ToolResult):
            result, replaced = out, True
    if replaced:
        result.output = kernel.redactor.redact(result.output)
        result.output, result.metadata = kernel.projector.project(name, result.output, result.metadata)
    return result
