"""A server's tool as a kernel ``ToolSpec`` named ``mcp__<server>__<tool>`` (SPEC M-1, S-2, K-4, K-5).

- **Name**: characters outside ``[A-Za-z0-9_-]`` in the tool's name become ``_`` (MCP allows ``.``
  and ``/``); a name that is empty or makes the whole longer than 128 characters cannot be
  expressed, and is skipped with a warning naming it (so is a second tool that sanitises to the same
  name). The server's own name for the tool is what goes on the wire.
- **Schema**: the tool's ``inputSchema`` is the spec's raw JSON Schema, so the kernel validates every
  call against it *before* anything reaches the server (K-4). It is checked here, at registration:
  an object schema, at most 256 KiB, valid for its draft, every ``$ref`` local and resolvable —
  otherwise the tool is refused with a warning, never at call time.
- **Capabilities** (K-5) from the annotations: ``readOnlyHint`` → read-only, idempotent, cancel-safe,
  up to ``READ_ONLY_PARALLELISM`` in parallel (``batch`` may fan it out); ``idempotentHint`` →
  idempotent; ``destructiveHint: true`` (on a tool not read-only) → ``requires_confirmation``, so a
  model-side call asks even when a rule allows it. Without hints: conservative, and the permission
  policy decides alone. A server configured with ``trust_annotations: false`` gets no hints honoured.
- Results come back through ``tools.mcp.results`` with trust ``external``; progress notifications
  become ``tool_output_delta`` events (``{"progress", "total", "message"}``), at most one per
  ``PROGRESS_MIN_INTERVAL_S`` (the final one, progress = total, always) and ``MAX_PROGRESS_EVENTS`` per call.

These are dynamic tools: the registry never gives them built-in trust (K-2).
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from typing import Any

import mcp_types as types

from kernel.capabilities import ToolCapabilities
from kernel.context import ToolContext
from kernel.errors import bound_text
from kernel.result import ToolResult
from kernel.schema_refs import RefRefused, check_refs
from kernel.spec import MAX_SCHEMA_BYTES, TOOL_NAME_RE, ToolSpec, validator_class
from tools.mcp.connection import McpConnection
from tools.mcp.results import to_tool_result

PREFIX = "mcp__"
MAX_TOOL_NAME_CHARS = 128
MAX_DESCRIPTION_CHARS = 8192
READ_ONLY_PARALLELISM = 4
PROGRESS_MIN_INTERVAL_S = 0.05
MAX_PROGRESS_EVENTS = 1000
MAX_PROGRESS_MESSAGE_BYTES = 1024
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


class SchemaRefused(ValueError):
    """The tool's input schema cannot be registered (the message says why)."""


def surface_name(server: str, tool: str) -> str | None:
    """``mcp__<server>__<tool>`` with the tool part sanitised, or None when it cannot be expressed."""
    part = _UNSAFE.sub("_", tool)
    if not part:
        return None
    name = f"{PREFIX}{server}__{part}"
    if len(name) > MAX_TOOL_NAME_CHARS or not TOOL_NAME_RE.match(name):
        return None
    return name


def build_spec(conn: McpConnection, tool: types.Tool, name: str) -> ToolSpec:
    """The spec for ``tool`` of ``conn``'s server, named ``name``; ``SchemaRefused`` when its schema is bad."""
    schema = checked_schema(tool.input_schema)
    caps, confirm = _capabilities(tool, conn.config.trust_annotations)
    server, wire_name = conn.name, tool.name

    async def run(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        result = await conn.call_tool(wire_name, dict(args), _progress(ctx))
        return to_tool_result(name, server, wire_name, result, ctx.artifacts)

    return ToolSpec(
        name=name,
        description=_description(tool, server),
        parameters=schema,
        run=run,
        capabilities=lambda _p: caps,
        requires_confirmation=lambda _p: confirm,
        timeout_ms=conn.config.timeout_ms,
        trust="external",
    )


def checked_schema(schema: Any) -> dict[str, Any]:
    """A copy of ``schema`` fit for the kernel's raw-schema validator (see the module docstring)."""
    if not isinstance(schema, dict):
        raise SchemaRefused("its input schema is not a JSON object")
    if schema.get("type", "object") != "object":
        raise SchemaRefused(f"its input schema has type {schema.get('type')!r}; tool arguments are an object")
    try:
        text = json.dumps(schema)
    except (TypeError, ValueError, RecursionError) as exc:
        raise SchemaRefused(f"its input schema is not serializable JSON ({exc})") from None
    if len(text.encode("utf-8")) > MAX_SCHEMA_BYTES:
        raise SchemaRefused(f"its input schema is larger than {MAX_SCHEMA_BYTES} bytes")
    copy: dict[str, Any] = json.loads(text)
    _check_refs(copy)
    return copy


def _check_refs(schema: dict[str, Any]) -> None:
    """Every ``$ref``/``$dynamicRef`` is local (``#…``) and resolves, in one crawl of the schema
    (``kernel.schema_refs``): nothing is fetched, nothing fails later."""
    try:
        check_refs(schema, validator_class(schema))
    except RefRefused as exc:
        raise SchemaRefused(f"its input schema: {exc}") from None


def _capabilities(tool: types.Tool, trust: bool) -> tuple[ToolCapabilities, bool]:
    ann = tool.annotations if trust else None
    output = "structured" if tool.output_schema else "mixed"
    if ann is not None and ann.read_only_hint is True:
        caps = ToolCapabilities(
            read_only=True,
            idempotent=True,
            cancel_safe=True,
            max_parallelism=READ_ONLY_PARALLELISM,
            output_kind=output,
        )
        return caps, False
    idempotent = ann is not None and ann.idempotent_hint is True
    destructive = ann is not None and ann.destructive_hint is True
    return ToolCapabilities(idempotent=idempotent, output_kind=output), destructive


def _description(tool: types.Tool, server: str) -> str:
    text = (tool.description or tool.title or "").strip() or f"Tool '{tool.name}' of MCP server '{server}'."
    if len(text) > MAX_DESCRIPTION_CHARS:
        text = text[:MAX_DESCRIPTION_CHARS] + " …"
    return text


def _progress(ctx: ToolContext) -> Any:
    """The SDK progress callback for one call: throttled ``tool_output_delta`` events on the caller's loop."""
    caller = asyncio.get_running_loop()
    state = {"last": -math.inf, "count": 0}

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        if state["count"] >= MAX_PROGRESS_EVENTS:
            return
        now = ctx.clock.monotonic()
        final = total is not None and progress >= total
        if now - state["last"] < PROGRESS_MIN_INTERVAL_S and not final:
            return
        state["last"], state["count"] = now, state["count"] + 1
        delta = {
            "progress": progress if math.isfinite(progress) else None,
            "total": total if total is None or math.isfinite(total) else None,
            "message": bound_text(message, MAX_PROGRESS_MESSAGE_BYTES) if message else None,
        }
        if asyncio.get_running_loop() is caller:
            ctx.emit_delta(delta)
        else:  # the connection lives on another loop (a fleet worker): emit on the call's own loop
            caller.call_soon_threadsafe(ctx.emit_delta, delta)

    return on_progress
