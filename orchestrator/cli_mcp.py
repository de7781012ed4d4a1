"""MCP options shared by every command that builds sessions (issue 10; docs/mcp-and-skills.md).

    @mcp_options            # --mcp-config FILE  --mcp-workspace-config
    def cmd(..., mcp_config, mcp_workspace_config): ...
        options = SessionOptions(..., **mcp_session_options(mcp_config, mcp_workspace_config))
        session = agent.session(workspace, options)
        report_mcp(session)   # one stderr line per skipped or failed server

``--mcp-config FILE`` names a ``.mcp.json``-shaped file (read and checked here: a broken file is one
line and exit 2, before anything starts); its servers join those of ``A3S_MCP_CONFIG`` (same name:
the file wins). ``--mcp-workspace-config`` also reads the workspace's own ``.mcp.json`` — it starts
programs, so it is never read without this flag (or ``A3S_MCP_WORKSPACE_CONFIG=1``).
``mcp_config_option`` is the ``--mcp-config`` option alone (``worker``: a worker reads no
workspace's config, only its own).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

CONFIG_HELP = 'MCP servers: a .mcp.json-shaped file ({"mcpServers": {name: {command, args, env, cwd} | {url, headers}}}).'
WORKSPACE_HELP = (
    "Also start the servers of the workspace's own .mcp.json (it runs programs: trusted workspaces only)."
)


def mcp_config_option(fn: F) -> F:
    return click.option(
        "--mcp-config",
        "mcp_config",
        type=click.Path(dir_okay=False),
        default=None,
        metavar="FILE",
        help=CONFIG_HELP,
    )(fn)


def mcp_options(fn: F) -> F:
    fn = click.option(
        "--mcp-workspace-config", "mcp_workspace_config", is_flag=True, default=False, help=WORKSPACE_HELP
    )(fn)
    return mcp_config_option(fn)


def mcp_session_options(mcp_config: str | None, mcp_workspace_config: bool = False) -> dict[str, Any]:
    """``SessionOptions`` keyword arguments for the two options (the file is read and validated now)."""
    out: dict[str, Any] = {}
    if mcp_config:
        from tools.mcp import load_config_file

        out["mcp_servers"] = load_config_file(mcp_config)
    if mcp_workspace_config:
        out["mcp_workspace_config"] = True
    return out


def check_mcp_config(path: str) -> None:
    """Fail in one line (``click``'s ``Error: …``, exit 1) when ``path`` is not a usable config."""
    from kernel.errors import ToolError

    try:
        mcp_session_options(path)
    except ToolError as exc:
        raise click.ClickException(exc.message) from None


def report_mcp(session: Any) -> None:
    """One stderr line per skipped entry or server that failed to start (the rest of the run goes on)."""
    status = session.mcp_status()
    for warning in status["warnings"]:
        click.echo(f"warning: {warning}", err=True)
    for server in status["servers"]:
        if server["state"] == "failed" and server["error"]:
            click.echo(f"warning: {server['error']}", err=True)
