"""The tool calls of one model turn, through the kernel with origin ``agent`` (SPEC K-3, K-5, A-2).

There is no second path: every call the model chose — including one whose arguments are not even
JSON, or that names no tool — goes to ``Kernel.invoke_agent`` (skill restriction, permission,
confirmation, hooks, budget, timeouts, cancellation, recursion guard, projection), which answers
with a projected ``ToolResult``. A denied or unconfirmable call therefore never runs, and the model
reads the denial as that call's result.

Scheduling (K-5): the calls of a turn run concurrently only when *every* one is declared safe
(``read_only``, ``idempotent``, ``cancel_safe``, ``max_parallelism > 1`` for its arguments), at most
the smallest declared parallelism at once; otherwise in the order the model gave them. Results go
back to the model in that order either way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from flows.agent.result import ToolCallRecord
from flows.providers.types import Message, ToolCall
from kernel.call_args import UnparsedArguments, parse_json_arguments
from kernel.errors import InvalidArgument
from kernel.kernel import Kernel
from kernel.result import ToolResult

# A tool result with this metadata key asks the run to stop and wait (the call stays pending).
SUSPEND_KEY = "a3s_suspend"
EMPTY_OUTPUT = "(no output)"


@dataclass(slots=True)
class CallOutcome:
    call: ToolCall
    result: ToolResult
    record: ToolCallRecord
    suspended: bool


def parse_arguments(raw: str) -> Any:
    """The call's arguments as JSON, or the raw text as ``UnparsedArguments``: the kernel refuses
    the call with the reason (invalid_argument), the run goes on."""
    try:
        return parse_json_arguments(raw)
    except InvalidArgument as exc:
        return UnparsedArguments(raw, str(exc))


def tool_message(call: ToolCall, result: ToolResult) -> Message:
    """What the model reads: the projected output (which names the artifact URI when cut), or the
    typed failure."""
    if result.exit_code == 0:
        content = result.output or EMPTY_OUTPUT
    else:
        kind = (result.error_kind or {}).get("type", "error")
        content = f"Error ({kind}): {result.output or 'failed'}"
    return Message("tool", content, tool_call_id=call.id, name=call.name)


def _safe_together(
    kernel: Kernel, calls: list[tuple[ToolCall, Any]], tools: Collection[str] | None = None
) -> int:
    """How many calls may run at once: >1 only when every call is declared parallel-safe (K-5)."""
    if len(calls) < 2:
        return 1
    scope = kernel.registry.scoped(tools)
    limit = len(calls)
    for call, args in calls:
        caps = kernel.capabilities_of(scope, call.name, args)
        if caps is None or not caps.allows_parallel_batch:
            return 1
        limit = min(limit, caps.max_parallelism)
    return max(1, limit)


async def run_tool_calls(
    kernel: Kernel,
    calls: list[ToolCall],
    step: int,
    deadline: float | None,
    tools: Collection[str] | None = None,
) -> list[CallOutcome]:
    """``tools``: the run's surface (a sub-agent's); a call outside it is ``not_found``."""
    parsed = [(call, parse_arguments(call.arguments)) for call in calls]
    width = _safe_together(kernel, parsed, tools)

    async def one(call: ToolCall, args: Any) -> CallOutcome:
        loop = asyncio.get_running_loop()
        call_id = kernel.ids("call")
        t0 = loop.time()
        result = await kernel.invoke_agent(
            call.name,
            args,
            call_id=call_id,
            deadline=deadline,
            tags={"model_call_id": call.id, "step": step},
            scope=tools,
        )
        record = ToolCallRecord(
            call.name,
            call_id,
            call.id,
            result.exit_code,
            result.error_kind,
            int((loop.time() - t0) * 1000),
            step,
        )
        suspended = isinstance(result.metadata, dict) and bool(result.metadata.get(SUSPEND_KEY))
        return CallOutcome(call, result, record, suspended)

    if width == 1:
        return [await one(call, args) for call, args in parsed]
    gate = asyncio.Semaphore(width)

    async def bounded(call: ToolCall, args: Any) -> CallOutcome:
        async with gate:
            return await one(call, args)

    return list(await asyncio.gather(*(bounded(c, a) for c, a in parsed)))
