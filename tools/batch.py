"""``batch``: the reference nested orchestrator (SPEC X-2, K-1; REFERENCE 4.11).

Up to 32 calls in ascending ``step`` order. Inside a step the calls fan out (≤ ``max_concurrency``,
≤ 16, ≤ every call's declared ``max_parallelism``) only when every call is declared read-only,
idempotent and cancel-safe; otherwise the step runs serially. Later steps may bind earlier results
with ``{"$ref": "id.path"}``. Children go back through the kernel via ``ctx.invoke``: the kernel,
not this module, decides their origin (``trusted_host_nested`` under a trusted host-direct batch,
``governed_nested`` otherwise). Partial failure names the failed indexes (0-based) and still
succeeds; only an all-failed batch is an error (``partial_failure``).
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from kernel.context import ToolContext
from kernel.errors import InvalidArgument, PartialFailure, error_from_exception
from kernel.result import ToolResult
from kernel.spec import ToolSpec

MAX_INVOCATIONS = 32
MAX_STEP = 32
MAX_CONCURRENCY = 16
DEFAULT_CONCURRENCY = 8
MAX_BINDING_BYTES = 16 * 1024
MAX_RESULT_METADATA_BYTES = 4 * 1024

log = logging.getLogger(__name__)


class Call(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str | None = Field(default=None, description="Name for $ref bindings; unique.")
    tool: str = Field(min_length=1)
    args: dict[str, Any] = Field(default_factory=dict)
    step: int = Field(default=1, ge=1, le=MAX_STEP)


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid")
    invocations: list[Call] = Field(min_length=1, max_length=MAX_INVOCATIONS)
    max_concurrency: int = Field(default=DEFAULT_CONCURRENCY, ge=1, description="Clamped to 16.")

    @field_validator("invocations")
    @classmethod
    def _static_rules(cls, calls: list[Call]) -> list[Call]:
        seen: set[str] = set()
        for call in calls:
            if call.tool == "batch":
                raise ValueError("nested batch calls are not allowed")
            if call.id is not None:
                if not call.id.strip():
                    raise ValueError("invocation id must not be empty")
                if call.id in seen:
                    raise ValueError(f"duplicate invocation id {call.id!r}")
                seen.add(call.id)
        return calls


class _Unbound(Exception):
    pass


def _resolve_refs(value: Any, bindings: dict[str, Any], unavailable: dict[str, str]) -> Any:
    if isinstance(value, dict):
        if "$ref" in value:
            if len(value) != 1 or not isinstance(value["$ref"], str):
                raise _Unbound('a $ref object must be exactly {"$ref": "id.path"}')
            return _lookup(value["$ref"], bindings, unavailable)
        return {k: _resolve_refs(v, bindings, unavailable) for k, v in value.items()}
    if isinstance(value, list):
        return [_resolve_refs(v, bindings, unavailable) for v in value]
    return value


def _lookup(ref: str, bindings: dict[str, Any], unavailable: dict[str, str]) -> Any:
    head, *path = ref.split(".")
    if head not in bindings:
        reason = unavailable.get(head, "no earlier step produced it")
        raise _Unbound(f"$ref {ref!r} is unavailable: {reason}")
    value = bindings[head]
    for seg in path:
        if isinstance(value, dict) and seg in value:
            value = value[seg]
        elif isinstance(value, list) and seg.isdigit() and int(seg) < len(value):
            value = value[int(seg)]
        else:
            raise _Unbound(f"$ref {ref!r} is unavailable: no field {seg!r}")
    if len(json.dumps(value, default=str)) > MAX_BINDING_BYTES:
        raise _Unbound(f"$ref {ref!r} resolves to more than {MAX_BINDING_BYTES} bytes")
    return value


def _binding(result: ToolResult) -> dict[str, Any]:
    try:
        parsed: Any = json.loads(result.output)
    except ValueError:
        parsed = result.output
    return {
        "output": parsed,
        "output_lines": result.output.splitlines(),
        "metadata": result.metadata,
        "exit_code": result.exit_code,
        "tool": result.name,
    }


def _compact_metadata(meta: dict[str, Any]) -> Any:
    text = json.dumps(meta, default=str)
    if len(text) <= MAX_RESULT_METADATA_BYTES:
        return meta
    return {"compacted": True, "bytes": len(text), "keys": sorted(meta)[:64]}


async def run(ctx: ToolContext, params: Params) -> ToolResult:
    calls = params.invocations
    requested = params.max_concurrency
    cap = min(requested, MAX_CONCURRENCY)
    results: list[ToolResult | None] = [None] * len(calls)
    bindings: dict[str, Any] = {}
    unavailable: dict[str, str] = {}
    binding_errors: list[dict[str, Any]] = []
    steps = sorted({c.step for c in calls})
    applied = 1
    any_parallel = False

    for step in steps:
        indexes = [i for i, c in enumerate(calls) if c.step == step]
        prepared: dict[int, dict[str, Any]] = {}
        for i in indexes:
            try:
                prepared[i] = _resolve_refs(calls[i].args, bindings, unavailable)
            except _Unbound as exc:
                binding_errors.append({"index": i, "error": str(exc)})
                results[i] = ToolResult.failure(calls[i].tool, InvalidArgument(str(exc)))
        caps = [ctx.invoker.capabilities_of(calls[i].tool, prepared[i]) for i in prepared]
        parallel = len(prepared) > 1 and all(c is not None and c.allows_parallel_batch for c in caps)
        width = min(cap, *(c.max_parallelism for c in caps if c is not None)) if parallel else 1
        applied = max(applied, width)
        any_parallel = any_parallel or (parallel and width > 1)

        async def one(i: int, prepared: dict[int, dict[str, Any]] = prepared) -> None:
            # The kernel turns a child's failure into a result; this guard keeps that true even if
            # the invoker itself breaks, so one index failing never drops its siblings.
            try:
                results[i] = await ctx.invoke(calls[i].tool, prepared[i])
            except (Exception, SystemExit, KeyboardInterrupt) as exc:
                log.error("batch item %d (%s) raised", i, calls[i].tool, exc_info=exc)
                results[i] = ToolResult.failure(calls[i].tool, error_from_exception(exc, calls[i].tool))

        if width > 1:
            gate = asyncio.Semaphore(width)

            async def gated(i: int, gate: asyncio.Semaphore = gate) -> None:
                async with gate:
                    await one(i)

            async with asyncio.TaskGroup() as tg:
                for i in prepared:
                    tg.create_task(gated(i))
        else:
            for i in prepared:
                await one(i)

        for i in indexes:
            res = results[i]
            cid = calls[i].id
            if cid is None or res is None:
                continue
            if res.exit_code != 0:
                unavailable[cid] = "that call failed"
                continue
            binding = _binding(res)
            if len(json.dumps(binding, default=str)) > MAX_BINDING_BYTES:
                unavailable[cid] = f"its result is larger than {MAX_BINDING_BYTES} bytes"
                continue
            bindings[cid] = binding

    return _report(calls, results, binding_errors, requested, applied, any_parallel, steps)


def _report(
    calls: list[Call],
    results: list[ToolResult | None],
    binding_errors: list[dict[str, Any]],
    requested: int,
    applied: int,
    any_parallel: bool,
    steps: list[int],
) -> ToolResult:
    parts: list[str] = []
    rows: list[dict[str, Any]] = []
    failed: list[int] = []
    for i, (call, res) in enumerate(zip(calls, results, strict=True)):
        assert res is not None
        label = f"{call.tool} · {call.id}" if call.id else call.tool
        parts.append(f"--- [{i} / step {call.step}: {label}] ---")
        ok = res.exit_code == 0
        parts.append(res.output if ok else f"ERROR: {res.output}")
        if not ok:
            failed.append(i)
        rows.append(
            {
                "index": i,
                "step": call.step,
                "id": call.id,
                "tool": call.tool,
                "success": ok,
                "exit_code": res.exit_code,
                "output_bytes": len(res.output.encode("utf-8")),
                "error_kind": res.error_kind,
                "metadata": _compact_metadata(res.metadata),
            }
        )
    total = len(calls)
    status = "complete" if not failed else ("failed" if len(failed) == total else "partial_failure")
    if failed and status == "partial_failure":
        parts.append(
            f"Batch completed with {total - len(failed)} successful and {len(failed)} failed item(s). "
            f"Retry only failed indices {failed}; do not repeat successful items."
        )
    meta = {
        "status": status,
        "requested_concurrency": requested,
        "applied_concurrency": applied,
        "execution_mode": "staged" if len(steps) > 1 else ("parallel" if any_parallel else "serial"),
        "steps": steps,
        "highest_step": steps[-1],
        "total_count": total,
        "success_count": total - len(failed),
        "failure_count": len(failed),
        "failed_indices": failed,
        "binding_errors": binding_errors,
        "results": rows,
    }
    output = "\n".join(parts) + "\n"
    if status == "failed":
        # The error names the counts; the items' own messages stay in the (projected) output.
        err = PartialFailure(f"All {total} batch item(s) failed.", failed=len(failed), total=total)
        return ToolResult("batch", f"{err.message}\n{output}", 1, meta, err.to_kind())
    return ToolResult.success("batch", output, meta)


TOOL = ToolSpec(
    name="batch",
    description=(
        "Run up to 32 tool calls in one turn. Calls in the same step run in parallel when all are read-only; "
        'later steps can use earlier results with {"$ref": "id.output.field"}. Retry only failed indices.'
    ),
    params=Params,
    run=run,
    orchestrator=True,
    examples=(
        {
            "invocations": [
                {"tool": "read", "args": {"file_path": "a.py"}},
                {"tool": "ls", "args": {"path": "src"}},
            ]
        },
    ),
)
