"""``McpServers``: the configured servers of a session (or of a worker process) and their tools (SPEC M-1, S-2).

``start(names)`` starts the servers concurrently (once each; a failed start is retried by a later
``start`` after ``RETRY_FAILED_START_S``) and turns their tools into ``ToolSpec``s
(``tools.mcp.specs``). A server that cannot start does not stop the others: its one-line error is
kept in ``status()`` and logged. ``register(registry, names)`` adds the specs of started servers
to a session's registry as dynamic tools (a name clash with another tool is skipped with a
warning). ``aclose()`` stops every server.

Who owns it: an embedded session owns its own ``McpServers`` (closing the session stops its servers);
a fleet worker process holds one shared by every session it restores (started lazily, on the first
session that names a server; stopped when the worker's runtime closes).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Iterable
from typing import Any

from kernel.errors import InvalidArgument, ToolError
from kernel.registry import Registry
from kernel.spec import ToolSpec
from tools.mcp.config import McpConfig
from tools.mcp.connection import McpConnection
from tools.mcp.specs import build_spec, surface_name

log = logging.getLogger(__name__)
RETRY_FAILED_START_S = 30.0
# All of one server's tool definitions (name, description, schema as JSON): they go out with every
# model request. 1,024 tools of 256 KiB schemas each were 256 MiB a request; 4 MiB is already about
# a million tokens, past any model's context.
MAX_SERVER_SURFACE_BYTES = 4 * 1024 * 1024


class McpServers:
    def __init__(self, config: McpConfig) -> None:
        self.config = config
        self.connections = {name: McpConnection(cfg) for name, cfg in config.servers.items()}
        self.specs: dict[str, list[ToolSpec]] = {}
        self.errors: dict[str, str] = {}
        self.warnings: list[str] = list(config.warnings)
        self._failed_at: dict[str, float] = {}
        self._starting: dict[str, asyncio.Task[None]] = {}
        for warning in config.warnings:
            log.warning("%s", warning)

    @property
    def names(self) -> list[str]:
        return sorted(self.connections)

    async def start(self, names: Iterable[str] | None = None) -> None:
        """Start the named servers (all when None); unknown names are a warning, failures are recorded."""
        wanted = self.names if names is None else list(dict.fromkeys(names))
        tasks = []
        for name in wanted:
            if name not in self.connections:
                self._warn(
                    f"MCP server {name!r} is not configured in this process; its tools are unavailable"
                )
                continue
            if name in self.specs:
                continue
            failed = self._failed_at.get(name)
            if failed is not None and time.monotonic() - failed < RETRY_FAILED_START_S:
                continue
            task = self._starting.get(name)
            if task is None or task.done():
                task = asyncio.get_running_loop().create_task(self._start_one(name))
                self._starting[name] = task
            tasks.append(task)
        if tasks:
            await asyncio.gather(*tasks)

    async def _start_one(self, name: str) -> None:
        conn = self.connections[name]
        try:
            tools = await conn.start()
        except ToolError as exc:
            self.errors[name] = exc.message
            self._failed_at[name] = time.monotonic()
            log.warning("%s", exc.message)
            return
        self.errors.pop(name, None)
        self._failed_at.pop(name, None)
        specs: list[ToolSpec] = []
        seen: set[str] = set()
        surface_bytes = 0  # what this server's tools add to every model request
        if conn.truncated_listing:
            self._warn(f"MCP server {name!r} lists more tools than the {len(tools)} kept")
        for tool in tools:
            surface = surface_name(name, tool.name)
            if surface is None:
                self._warn(
                    f"MCP server {name!r}: tool {tool.name[:200]!r} skipped: its name cannot be expressed as a tool name"
                )
                continue
            if surface in seen:
                self._warn(
                    f"MCP server {name!r}: tool {tool.name[:200]!r} skipped: {surface} is already taken by another of its tools"
                )
                continue
            try:
                spec = build_spec(conn, tool, surface)
            except Exception as exc:  # a bad schema (SchemaRefused, jsonschema's SchemaError, …)
                self._warn(f"MCP server {name!r}: tool {tool.name[:200]!r} skipped: {_reason(exc)}")
                continue
            size = len(json.dumps(spec.definition()).encode())
            if surface_bytes + size > MAX_SERVER_SURFACE_BYTES:
                self._warn(
                    f"MCP server {name!r}: tool {tool.name[:200]!r} skipped: its tools would take more than "
                    f"{MAX_SERVER_SURFACE_BYTES} bytes of every model request (names, descriptions, schemas)"
                )
                continue
            surface_bytes += size
            seen.add(surface)
            specs.append(spec)
        self.specs[name] = specs

    def register(self, registry: Registry, names: Iterable[str] | None = None) -> list[str]:
        """Register the started servers' tools in ``registry``; returns the tool names registered."""
        added: list[str] = []
        for name in self.names if names is None else names:
            for spec in self.specs.get(name, ()):
                try:
                    registry.register(spec)  # dynamic: never built-in trust (K-2)
                except InvalidArgument as exc:
                    self._warn(f"MCP tool {spec.name} skipped: {exc.message}")
                    continue
                added.append(spec.name)
        return added

    def status(self) -> list[dict[str, Any]]:
        """Per server: transport, state (``running`` / ``stopped`` / ``failed`` / ``not_started``), tools, error."""
        out = []
        for name in self.names:
            conn = self.connections[name]
            if conn.alive:
                state = "running"
            elif name in self.errors:
                state = "failed"
            elif name in self.specs:
                state = "stopped"  # crashed or closed; restarts on the next call
            else:
                state = "not_started"
            out.append(
                {
                    "name": name,
                    "transport": conn.config.transport,
                    "source": conn.config.source,
                    "state": state,
                    "tools": [s.name for s in self.specs.get(name, ())],
                    "starts": conn.starts,
                    "pid": conn.pid,
                    "error": self.errors.get(name) or (conn.last_error if state != "running" else None),
                }
            )
        return out

    async def aclose(self) -> None:
        for task in self._starting.values():
            task.cancel()
        await asyncio.gather(*(conn.aclose() for conn in self.connections.values()), return_exceptions=True)

    def _warn(self, text: str) -> None:
        if text not in self.warnings:
            self.warnings.append(text)
            log.warning("%s", text)


def _reason(exc: BaseException) -> str:
    text = getattr(exc, "message", None) or str(exc)
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return first[:500]
