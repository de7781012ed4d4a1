"""The host side of ``ctx``: each request a script queues becomes one nested kernel call (P-3, K-1).

``ProgramBridge.handle(calls)`` answers a batch of requests drained from the VM's outbox. Before
anything runs, every request of the batch is checked — the allow-list (P-2, P-4: ``program``,
``dynamic_workflow`` and ``parallel_task`` never; a ``search`` mode name on the list allows that
mode), ``task`` with one item only, and ``maxToolCalls`` (a ``batch`` counts one call per invocation)
— and a violation ends the script with no
call of the batch started (``HandlerAbort``). Allowed calls go through the scoped ``NestedInvoker``
narrowed to the allow-list, so the kernel decides their origin (``trusted_host_nested`` under a
trusted host-direct program, ``governed_nested`` otherwise) and applies policy, hooks, budget and the
recursion guard as for any call. A batch runs concurrently only when every call in it is declared
parallel-safe (K-5, like ``batch``), otherwise in order.

Results are handed to the script bounded: ``text`` to ``maxOutputBytes`` (UTF-8-safe, with a marker),
``metadata`` compacted when its JSON is larger than that. ``readFile`` strips ``read``'s line
numbers and footers; ``glob`` returns the list of paths (the prelude follows its pages); both reject
on a failed call.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

from kernel.context import NestedInvoker, ToolContext
from kernel.errors import BudgetExhausted, InvalidArgument, PermissionDenied, ToolError
from kernel.result import ToolResult
from tools.program.vm import HandlerAbort

NEVER_ALLOWED = frozenset({"program", "dynamic_workflow", "parallel_task"})
SEARCH_MODES = frozenset({"grep", "glob", "bm25", "semantic", "hybrid", "indexed"})
MAX_CALL_METADATA_BYTES = 4 * 1024
# Harness observations, not the tool's data: left out of what the script and tool_calls get (every
# nested call's own events and result keep them).
HARNESS_KEYS = ("a3s_tool_result_evidence", "a3s_tool_result_transform_binding")
_LINE_NO = re.compile(r"^ *\d+\t", re.MULTILINE)
_READ_FOOTER = re.compile(
    r"^(\.\.\. \(more lines available; continue with offset=\d+\)|\(end of file: .*\))\n?", re.MULTILINE
)
_GREP_FLAGS = {
    "glob": "include",
    "-i": "case_sensitive",
    "i": "case_sensitive",
    "ignoreCase": "case_sensitive",
}


class AllowList:
    """Which tools (and which ``search`` modes) a script may call."""

    def __init__(self, available: list[str], requested: list[str] | None) -> None:
        visible = set(available)
        if requested is None:
            tools = visible - NEVER_ALLOWED
            modes: frozenset[str] | None = None
        else:
            names = set(requested)
            tools = (names & visible) - NEVER_ALLOWED
            mode_names = names & SEARCH_MODES
            if "search" in tools:
                modes = None
            elif mode_names and "search" in visible:
                tools.add("search")
                modes = frozenset(mode_names)
            else:
                modes = None
        self.tools = frozenset(tools)
        self.search_modes = modes

    def check(self, name: str, args: Any) -> None:
        """Raise ``PermissionDenied`` for a call the script may not make (nothing has run yet)."""
        if name in NEVER_ALLOWED or name not in self.tools:
            raise PermissionDenied(
                f"tool '{name}' is not allowed for this PTC script", reason="program_allow_list"
            )
        if name == "search" and self.search_modes is not None:
            mode = args.get("mode") if isinstance(args, dict) else None
            if not isinstance(mode, str) or mode not in self.search_modes:  # {} is unhashable
                raise PermissionDenied(
                    f"tool 'search' with mode {mode!r} is not allowed for this PTC script "
                    f"(allowed modes: {', '.join(sorted(self.search_modes))})",
                    reason="program_allow_list",
                )
        if name == "task":
            tasks = args.get("tasks") if isinstance(args, dict) else None
            if isinstance(tasks, list) and len(tasks) > 1:
                raise InvalidArgument(
                    "task inside a program takes a single item; run parallel sub-agents as `task` steps of "
                    "a dynamic workflow instead",
                    reason="program_task_fan_out",
                )
        if name == "batch" and isinstance(args, dict):
            for item in args.get("invocations") or []:
                if isinstance(item, dict) and isinstance(item.get("tool"), str):
                    self.check(item["tool"], item.get("args") or {})


class ProgramBridge:
    def __init__(
        self, ctx: ToolContext, allow: AllowList, max_tool_calls: int, max_output_bytes: int
    ) -> None:
        self.ctx = ctx
        self.allow = allow
        self.max_tool_calls = max_tool_calls
        self.max_output_bytes = max_output_bytes
        self.invoker: NestedInvoker = ctx.invoker.narrowed(sorted(allow.tools))
        self.tool_calls: list[dict[str, Any]] = []
        self.charged = 0  # tool calls counted against max_tool_calls (``_call_weight``)

    async def handle(self, calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
        replies: dict[int, dict[str, Any]] = {}
        planned: list[tuple[int, str, str, dict[str, Any]]] = []
        for call in calls:
            cid = call.get("id") if isinstance(call, dict) else None
            if not isinstance(cid, int):
                continue
            try:
                kind, name, args = _plan(call.get("kind"), call.get("payload"))
            except InvalidArgument as exc:
                replies[cid] = {"id": cid, "ok": False, "value": {"message": exc.message}}
                continue
            planned.append((cid, kind, name, args))
        try:
            for _, _, name, args in planned:
                self.allow.check(name, args)
        except ToolError as err:
            raise HandlerAbort(err) from None
        charge = sum(_call_weight(name, args) for _, _, name, args in planned)
        if self.charged + charge > self.max_tool_calls:
            raise HandlerAbort(
                BudgetExhausted(
                    f"PTC script exceeded maxToolCalls={self.max_tool_calls}",
                    resource="tool_calls",
                    reason="max_tool_calls",
                )
            )
        self.charged += charge
        results = await self._run(planned)
        for (cid, kind, name, _args), result in zip(planned, results, strict=True):
            meta = _without(result.metadata, *HARNESS_KEYS)
            size = _json_size(meta)
            self._record(name, result, meta, size)
            replies[cid] = {"id": cid, **self._shape(kind, name, result, meta, size)}
        return [replies[c["id"]] for c in calls if isinstance(c, dict) and c.get("id") in replies]

    async def _run(self, planned: list[tuple[int, str, str, dict[str, Any]]]) -> list[ToolResult]:
        if len(planned) > 1 and all(
            (caps := self.invoker.capabilities_of(name, args)) is not None and caps.allows_parallel_batch
            for _, _, name, args in planned
        ):
            return list(await asyncio.gather(*(self.invoker.invoke(n, a) for _, _, n, a in planned)))
        out = []
        for _, _, name, args in planned:
            out.append(await self.invoker.invoke(name, args))
        return out

    def _record(self, name: str, result: ToolResult, meta: dict[str, Any], size: int) -> None:
        self.tool_calls.append(
            {
                "tool_name": name,
                "success": result.exit_code == 0,
                "exit_code": result.exit_code,
                "output_bytes": len(result.output.encode("utf-8", "surrogatepass")),
                "metadata": _compacted(meta, size, MAX_CALL_METADATA_BYTES),
            }
        )

    def _shape(
        self, kind: str, name: str, result: ToolResult, meta: dict[str, Any], size: int
    ) -> dict[str, Any]:
        if kind == "readFile":
            if result.exit_code != 0:
                return {"ok": False, "value": _failure(result)}
            text = _READ_FOOTER.sub("", _LINE_NO.sub("", result.output))
            return {"ok": True, "value": bound_text(text, self.max_output_bytes)}
        if kind == "glob":
            if result.exit_code != 0:
                return {"ok": False, "value": _failure(result)}
            paths = result.metadata.get("paths")
            if not isinstance(paths, list):
                paths = [ln for ln in result.output.splitlines() if ln and not ln.startswith(("More ", "("))]
            page = result.metadata.get("page")
            more = page.get("next_cursor") if isinstance(page, dict) else None
            # The prelude's ctx.glob asks for the next page with `more` (each page is one call).
            return {"ok": True, "value": {"paths": [str(p) for p in paths], "more": more}}
        return {
            "ok": True,
            "value": {
                "name": name,
                "text": bound_text(result.output, self.max_output_bytes),
                "exitCode": result.exit_code,
                "metadata": _compacted(meta, size, self.max_output_bytes),
            },
        }


def _call_weight(name: str, args: dict[str, Any]) -> int:
    """How many tool calls a request makes: a ``batch`` makes one per invocation (at least one),
    anything else one. A batch counted as one let ``maxToolCalls: 1`` run 32 reads."""
    if name == "batch":
        invocations = args.get("invocations")
        if isinstance(invocations, list):
            return max(1, len(invocations))
    return 1


def _plan(kind: Any, payload: Any) -> tuple[str, str, dict[str, Any]]:
    """(kind, tool name, arguments) of one request; ``InvalidArgument`` rejects it in the script."""
    if not isinstance(payload, dict):
        raise InvalidArgument("malformed request")
    if kind == "tool":
        name, args = payload.get("name"), payload.get("args")
        if not isinstance(name, str) or not name:
            raise InvalidArgument("ctx.tool(name, args): name must be a non-empty string")
        if not isinstance(args, dict):
            raise InvalidArgument(f"ctx.tool({name!r}, args): args must be an object")
        return "tool", name, args
    if kind == "readFile":
        path, opts = payload.get("path"), payload.get("opts") or {}
        if not isinstance(path, str) or not isinstance(opts, dict):
            raise InvalidArgument("ctx.readFile(path, opts): path must be a string, opts an object")
        args = {"file_path": path, **{k: v for k, v in opts.items() if k in ("offset", "limit")}}
        return "readFile", "read", args
    if kind in ("grep", "bm25"):
        query, opts = payload.get("query"), payload.get("opts") or {}
        if not isinstance(query, str) or not isinstance(opts, dict):
            raise InvalidArgument(f"ctx.{kind}(query, opts): query must be a string, opts an object")
        args = {"mode": kind, "query": query}
        for key, value in opts.items():
            target = _GREP_FLAGS.get(key, key)
            args[target] = (not value) if target == "case_sensitive" and key != "case_sensitive" else value
        return "tool", "search", args
    if kind == "glob":
        pattern, opts = payload.get("pattern"), payload.get("opts") or {}
        if not isinstance(pattern, str) or not isinstance(opts, dict):
            raise InvalidArgument("ctx.glob(pattern, opts): pattern must be a string, opts an object")
        return "glob", "search", {**opts, "mode": "glob", "query": pattern}
    raise InvalidArgument(f"unknown request kind {kind!r}")


def _without(meta: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in meta.items() if k not in keys} if any(k in meta for k in keys) else meta


def _failure(result: ToolResult) -> dict[str, Any]:
    return {"message": result.output[:4096], "exitCode": result.exit_code, "errorKind": result.error_kind}


def bound_text(text: str, max_bytes: int) -> str:
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= max_bytes:
        return text
    marker = f"\n[program: output truncated to {max_bytes} of {len(data)} bytes]"
    keep = max(0, max_bytes - len(marker.encode()))
    return data[:keep].decode("utf-8", "ignore") + marker


def _json_size(meta: Any) -> int:
    try:
        return len(json.dumps(meta, default=str))
    except (TypeError, ValueError):
        return -1


def _compacted(meta: dict[str, Any], size: int, max_bytes: int) -> Any:
    """``compact_metadata`` with the JSON size already measured (one serialisation per result)."""
    if size < 0:
        return {"compacted": True, "unserializable": True}
    if size <= max_bytes:
        return meta
    return {"compacted": True, "bytes": size, "keys": sorted(meta)[:64]}


def compact_metadata(meta: Any, max_bytes: int) -> Any:
    try:
        text = json.dumps(meta, default=str)
    except (TypeError, ValueError):
        return {"compacted": True, "unserializable": True}
    if len(text) <= max_bytes:
        return meta
    keys = sorted(meta)[:64] if isinstance(meta, dict) else []
    return {"compacted": True, "bytes": len(text), "keys": keys}
