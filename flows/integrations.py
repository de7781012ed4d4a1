"""Session integrations: MCP servers and skills join a session's surface (SPEC S-2, M-1, M-2; issue 10).

``SessionFactory`` calls ``attach_integrations`` once per session it builds, after the built-ins and
the extra tools are in the registry:

- **Skills**: the workspace's ``.a3s/skills/*/SKILL.md`` (local workspaces) plus the skills a host
  registered earlier (kept in the session state, so a snapshot carries them to a worker) form the
  session's ``SkillCatalog`` (``services["skills"]``). ``Skill`` and ``search_skills`` are added as
  session built-ins only when there is at least one skill; ``register_skill`` adds them later.
- **MCP servers**, from an ``McpSource``:
  - embedded (``McpSource(config=…)``): the session's servers are the workspace's ``.mcp.json``
    (only with ``mcp_workspace_config``), then the process's ``A3S_MCP_CONFIG``, then
    ``SessionOptions.mcp_servers``; they are started now, their tools registered, and they are
    **owned by the session**: closing it stops them;
  - fleet worker (``McpSource(pool=…)``): the session state names the servers the session had
    (``tools.mcp.STATE_KEY``; names only); the worker starts those of *its own* config lazily, once
    per process, in a pool shared by every session it restores, and never from the job payload.

``services["mcp"]`` is the session's ``McpServers`` (``session.mcp_status()``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from flows.loop import LoopThread
from kernel.errors import InvalidArgument
from kernel.options import SessionOptions
from kernel.registry import Registry
from kernel.workspace import Workspace
from tools.mcp import STATE_KEY, McpConfig, session_config
from tools.skills import SKILL_TOOLS, SKILLS_SERVICE, SkillCatalog, SkillDoc, discover_workspace_skills

log = logging.getLogger(__name__)
MCP_SERVICE = "mcp"
REGISTERED_SKILLS_KEY = "registered_skills"
START_MARGIN_S = 30.0


@dataclass
class McpSource:
    """Where a factory's sessions get their MCP servers (see the module docstring)."""

    config: McpConfig | None = None  # this process's config (A3S_MCP_CONFIG), embedded sessions
    read_workspace: bool = False  # A3S_MCP_WORKSPACE_CONFIG: the default of mcp_workspace_config
    pool: Any = None  # a worker's shared McpServers (then ``config`` is ignored)


def worker_source(config_path: str | None) -> McpSource:
    """A fleet worker process's source: a pool of the servers of its own config (none without one).

    Nothing starts here: a server starts when the first session naming it is restored.
    """
    if not config_path:
        return McpSource()
    from tools.mcp import load_config_file, servers

    return McpSource(pool=servers(load_config_file(config_path)))


async def close_source(source: McpSource) -> None:
    """Stop a worker pool's servers (the worker runtime closes)."""
    if source.pool is not None:
        await source.pool.aclose()


def attach_integrations(
    loop: LoopThread,
    source: McpSource,
    workspace: Workspace,
    options: SessionOptions,
    registry: Registry,
    state: dict[str, Any],
    services: dict[str, Any],
) -> list[Callable[[], None]]:
    """Attach skills and MCP servers; returns the closers the session runs when it closes."""
    attach_skills(workspace, registry, state, services)
    return attach_mcp(loop, source, workspace, options, registry, state, services)


def attach_skills(
    workspace: Workspace, registry: Registry, state: dict[str, Any], services: dict[str, Any]
) -> SkillCatalog:
    catalog = SkillCatalog()
    if workspace.root is not None:
        found, warnings = discover_workspace_skills(workspace.root)
        catalog.warnings.extend(warnings)
        for warning in warnings:
            log.warning("%s", warning)
        for skill in found:
            catalog.add(skill)
    for data in state.get(REGISTERED_SKILLS_KEY) or []:
        try:
            catalog.add(SkillDoc.from_json(data), replace=True)
        except (InvalidArgument, AttributeError, TypeError) as exc:
            catalog.warnings.append(f"skills: a registered skill in the snapshot was skipped ({exc})")
    services[SKILLS_SERVICE] = catalog
    if len(catalog):
        for spec in SKILL_TOOLS:
            registry.add_session_tool(spec)
    return catalog


def register_skill(
    registry: Registry,
    state: dict[str, Any],
    services: dict[str, Any],
    skill: SkillDoc,
    *,
    replace: bool = False,
) -> None:
    """Add a host skill to a running session (and to its snapshot); the skill tools appear with the first."""
    catalog: SkillCatalog = services[SKILLS_SERVICE]
    catalog.add(skill, replace=replace)
    kept = [s for s in state.get(REGISTERED_SKILLS_KEY) or [] if s.get("name") != skill.name]
    state[REGISTERED_SKILLS_KEY] = [*kept, skill.to_json()]
    for spec in SKILL_TOOLS:
        registry.add_session_tool(spec)


def attach_mcp(
    loop: LoopThread,
    source: McpSource,
    workspace: Workspace,
    options: SessionOptions,
    registry: Registry,
    state: dict[str, Any],
    services: dict[str, Any],
) -> list[Callable[[], None]]:
    named = [str(n) for n in state.get(STATE_KEY) or []]
    if source.pool is not None:
        if named:
            loop.run(source.pool.start(named), timeout=_start_timeout(source.pool))
            source.pool.register(registry, named)
            services[MCP_SERVICE] = source.pool
        return []  # the worker's pool outlives its sessions
    config = session_config(
        source.config,
        options.mcp_servers,
        workspace.root,
        read_workspace=options.mcp_workspace_config or source.read_workspace,
    )
    missing = [n for n in named if n not in config.servers]
    if missing:
        config.warnings.append(
            f"MCP servers {', '.join(map(repr, missing))} of the restored session are not configured here"
        )
    if not config.servers:
        for warning in config.warnings:
            log.warning("%s", warning)
        return []
    from tools.mcp import servers as new_servers

    servers = new_servers(config)
    try:
        loop.run(servers.start(), timeout=_start_timeout(servers))
    except BaseException:
        loop.run(servers.aclose(), timeout=START_MARGIN_S)  # leave no server behind a failed build
        raise
    servers.register(registry)
    state[STATE_KEY] = servers.names
    services[MCP_SERVICE] = servers

    def close() -> None:
        try:
            loop.run(servers.aclose(), timeout=START_MARGIN_S)
        except Exception as exc:  # closing never raises (K-6); the stdio helper still reaps the tree
            log.warning("stopping MCP servers failed: %s", exc)

    return [close]


def _start_timeout(servers: Any) -> float:
    longest = max((c.config.startup_timeout_ms for c in servers.connections.values()), default=0)
    return longest / 1000 + START_MARGIN_S
