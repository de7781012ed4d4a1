"""MCP servers on the session surface (SPEC M-1, S-2; docs/mcp-and-skills.md).

The parts: ``config`` (the ``.mcp.json`` shape, cheap to import), ``stdio`` (the tied stdio
transport), ``guard`` (garbage from a server ends its connection), ``connection`` (one server:
start, restart, calls, stop), ``specs`` (a server tool as a kernel ``ToolSpec``), ``results`` (a
tool result as a ``ToolResult``), ``runtime`` (``McpServers``: the servers of a session or of a
worker process).

Importing this package does not import the ``mcp`` SDK (about two seconds of CPU): ``servers()``
does, and only sessions with servers configured call it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kernel.errors import InvalidArgument
from tools.mcp.config import (
    McpConfig,
    McpServerConfig,
    load_config_file,
    parse_config,
    workspace_config,
)

if TYPE_CHECKING:
    from tools.mcp.runtime import McpServers

__all__ = [
    "McpConfig",
    "McpServerConfig",
    "as_config",
    "load_config_file",
    "parse_config",
    "servers",
    "session_config",
    "workspace_config",
]

# Where a session's server names go in its (JSON, snapshotted) tool state: a worker restoring the
# session starts the servers of these names from *its own* config, never from the payload.
STATE_KEY = "mcp_servers"


def as_config(value: Any, *, source: str = "options") -> McpConfig:
    """``SessionOptions.mcp_servers``: an ``McpConfig``, a ``.mcp.json`` document or a ``{name: server}`` map."""
    if value is None:
        return McpConfig()
    if isinstance(value, McpConfig):
        return value
    if isinstance(value, Mapping):
        return parse_config(value, source=source)
    if isinstance(value, (str, os.PathLike)):
        return load_config_file(value)
    raise InvalidArgument(f"mcp_servers must be a mapping in the .mcp.json shape, got {type(value).__name__}")


def session_config(
    process: McpConfig | None,
    options_value: Any,
    workspace_root: str | os.PathLike[str] | None,
    *,
    read_workspace: bool,
) -> McpConfig:
    """The servers of a new session: the workspace's ``.mcp.json`` (only when ``read_workspace``),
    overridden by the process's config (``A3S_MCP_CONFIG``), overridden by the session's options."""
    config = McpConfig()
    if read_workspace and workspace_root is not None:
        config = config.merged(workspace_config(workspace_root))
    if process is not None:
        config = config.merged(process)
    return config.merged(as_config(options_value))


def servers(config: McpConfig) -> McpServers:
    """A new ``McpServers`` for ``config`` (imports the SDK)."""
    from tools.mcp.runtime import McpServers

    return McpServers(config)
