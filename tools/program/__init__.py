"""``program``: programmatic tool calling in an embedded QuickJS VM (SPEC P-1..P-4; REFERENCE 4.12).

A script defines ``async function run(ctx, inputs)`` (or ``export default``) and replaces many model
tool turns with one bounded program. The VM runs in a child process (``vm.py``) with 64 MiB of
memory, a 512 KiB stack and a deadline (``limits.timeoutMs``; a hard kill 500 ms after it); ``ctx``
requests come back through the outbox bridge and run as nested kernel calls (``bridge.py``) — so
this tool is a built-in *orchestrator*, like ``batch``: under a trusted host-direct call its
children are ``trusted_host_nested``, under a model call ``governed_nested`` (K-1).

Result: ``Program script completed.`` + the script's ``summary`` (when it returned one) + ``Tool calls:
N`` + one line per call + the returned value as pretty JSON; metadata ``{program: {name: "script",
language, runtime: "embedded-quickjs", success, tool_calls: [{tool_name, success, exit_code,
output_bytes, metadata}]}, script_result}``. Failures are typed: ``timeout{op: "program",
duration_ms}``, ``permission_denied`` (allow-list), ``budget_exhausted`` (maxToolCalls, memory, stack,
result size), ``invalid_argument`` (static rejects, syntax, no entry point), a script's own error
(its thrown message; the tool's ``error_kind`` when a rejected ``ctx`` call carried one).
"""

from __future__ import annotations

import asyncio
from typing import Any

from kernel.context import ToolContext
from kernel.errors import (
    BudgetExhausted,
    InvalidArgument,
    Timeout,
    ToolError,
    error_from_kind,
)
from kernel.result import ToolResult
from kernel.spec import ToolSpec
from tools._jsontext import compact, pretty_or_none
from tools.program.bridge import AllowList, ProgramBridge
from tools.program.params import (
    DEFAULT_MAX_OUTPUT_BYTES,
    DEFAULT_MAX_TOOL_CALLS,
    DEFAULT_TIMEOUT_MS,
    TASK_TIMEOUT_MS,
    Params,
    normalize_program_options,
)
from tools.program.pool import VmUnavailable
from tools.program.source import check_inputs, load_source, prepare
from tools.program.vm import VmOutcome, run_script

MAX_SCRIPT_RESULT_BYTES = 1024 * 1024
# Uninterrupted VM work per call into the VM (a script's run between two tool calls, one pending
# job): more is a runaway, as for workflows. It is what lets the child's CPU fence (a soft
# RLIMIT_CPU a slice ahead) end native work the VM's interrupt cannot stop — a catastrophic regex
# — instead of running it to ``timeoutMs`` (up to 1 h).
PROGRAM_SLICE_MS = 30_000
RUNTIME = "embedded-quickjs"

__all__ = ["TOOL", "normalize_program_options"]


async def run(ctx: ToolContext, params: Params) -> ToolResult:
    text = prepare(load_source(ctx.workspace, params.source, params.path))
    check_inputs(params.inputs, "program inputs")
    allow = AllowList(ctx.invoker.available_tools(), params.allowed_tools)
    limits = params.limits
    timeout_ms = limits.timeoutMs or (TASK_TIMEOUT_MS if "task" in allow.tools else DEFAULT_TIMEOUT_MS)
    bridge = ProgramBridge(
        ctx,
        allow,
        limits.maxToolCalls or DEFAULT_MAX_TOOL_CALLS,
        limits.maxOutputBytes or DEFAULT_MAX_OUTPUT_BYTES,
    )
    deadline = min(ctx.deadline, _loop_time() + timeout_ms / 1000)
    job = {"profile": "program", "source": text, "inputs": params.inputs, "sliceMs": PROGRAM_SLICE_MS}
    try:
        outcome = await run_script(job, bridge.handle, deadline)
    except VmUnavailable as exc:
        raise ToolError(str(exc), fault="vm_unavailable") from None
    return await _report(params, bridge, outcome, timeout_ms)


def _loop_time() -> float:
    return asyncio.get_running_loop().time()


async def _report(params: Params, bridge: ProgramBridge, outcome: VmOutcome, timeout_ms: int) -> ToolResult:
    calls = bridge.tool_calls
    program: dict[str, Any] = {
        "name": "script",
        "language": params.language,
        "runtime": RUNTIME,
        "success": False,
        "tool_calls": calls,
    }
    lines = [f"Tool calls: {len(calls)}"]
    lines += [
        f"- {c['tool_name']}: {'ok' if c['success'] else 'failed'} (exit {c['exit_code']}, {c['output_bytes']} bytes)"
        for c in calls
    ]
    if outcome.logs:
        lines += ["Console:", *outcome.logs]
    if not outcome.ok:
        err = _error(outcome, timeout_ms)
        result = ToolResult.failure("program", err, {"program": program})
        result.output = "\n".join([err.message, *lines]) + "\n"
        return result
    # Off the event loop: the indented encoding is pure Python (0.4 s for 1 MiB of `[[0]]`) and
    # stops once past the limit.
    pretty = await asyncio.to_thread(_render, outcome.value)
    if pretty is None:
        err = BudgetExhausted(
            f"program script result is over {MAX_SCRIPT_RESULT_BYTES} bytes; return a summary and evidence "
            "references instead of raw output",
            resource="script_result",
            reason="max_script_result_bytes",
        )
        return ToolResult.failure("program", err, {"program": program})
    program["success"] = True
    head = ["Program script completed."]
    value = outcome.value
    if isinstance(value, dict) and isinstance(value.get("summary"), str):
        head.append(value["summary"])
    output = "\n".join([*head, *lines, "Result:", pretty]) + "\n"
    return ToolResult.success("program", output, {"program": program, "script_result": value})


def _render(value: Any) -> str | None:
    """The result as indented JSON, or None when it is over ``MAX_SCRIPT_RESULT_BYTES``: the compact
    size first (C encoder), so an over-large value is refused before the slow indenting starts."""
    if len(compact(value).encode()) > MAX_SCRIPT_RESULT_BYTES:
        return None
    return pretty_or_none(value, MAX_SCRIPT_RESULT_BYTES)


def _error(outcome: VmOutcome, timeout_ms: int) -> ToolError:
    kind, msg = outcome.kind, outcome.error
    if kind == "timeout":
        ms = max(timeout_ms, outcome.duration_ms) if outcome.duration_ms else timeout_ms
        return Timeout(f"program script timed out after {timeout_ms} ms", op="program", duration_ms=ms)
    if kind == "aborted" and isinstance(outcome.value, ToolError):
        return outcome.value
    if kind == "runaway":
        return BudgetExhausted(
            f"program script ran for more than {PROGRAM_SLICE_MS} ms without a tool call (a regex or "
            "loop that does not end); compute less between calls",
            resource="cpu",
            reason="runaway_script",
        )
    if kind == "memory":
        return BudgetExhausted(
            "program script ran out of memory (the QuickJS VM has 64 MiB)",
            resource="memory",
            reason="vm_memory",
        )
    if kind == "stack":
        return BudgetExhausted(
            "program script overflowed the stack (the QuickJS VM has 512 KiB)",
            resource="stack",
            reason="vm_stack",
        )
    if kind in ("syntax", "no_entry"):
        return InvalidArgument(f"program script rejected: {msg}")
    if outcome.error_kind:
        return error_from_kind(outcome.error_kind, f"program script failed: {msg}")
    return ToolError(f"program script failed: {msg}", stage=kind or "script")


TOOL = ToolSpec(
    name="program",
    description=(
        "Run a JavaScript program in a sandboxed QuickJS VM instead of many tool turns. The script defines "
        "`async function run(ctx, inputs)`; ctx.tool(name, args), ctx.tools.<name>(args), ctx.readFile(path), "
        "ctx.read, ctx.search, ctx.grep(query, {glob, '-i'}), ctx.bm25, ctx.glob(pattern) → paths, ctx.ls, "
        "ctx.bash(cmd), ctx.git(args), ctx.webSearch(params) and ctx.verify(cmd) call tools (each returns "
        "{name, output, text, exitCode, metadata}). No file system, network, modules or eval in the VM. "
        "Return a summary and evidence, not raw output."
    ),
    params=Params,
    run=run,
    orchestrator=True,
    examples=(
        {
            "type": "script",
            "language": "javascript",
            "source": "async function run(ctx, inputs) {\n  const files = await ctx.glob('src/**/*.py');\n"
            "  return { summary: `${files.length} files`, files: files.slice(0, 20) };\n}",
            "inputs": {},
            "allowed_tools": ["glob", "read"],
            "limits": {"timeoutMs": 30000, "maxToolCalls": 20, "maxOutputBytes": 65536},
        },
    ),
)
