"""``a3s-fleet tool read|ls`` without building a whole session (issue 13 item 7: start-up).

A full session imports every built-in tool, the agent, flows, MCP and the process's network
runtime: ~350 ms before one line of a file is read. A host-direct call of a read-only workspace tool
needs none of that, so when nothing configures the process (no ``A3S_*`` setting, no ``--model``, no
MCP option) and the workspace is a directory, the CLI builds the kernel of a session whose surface
is that one tool — with ``flows.session_kernel.assemble_kernel``, exactly as ``SessionFactory.build``
does (same pinned transform policy, artifact store, events) — and runs the call through
``Kernel.invoke_host``: the one governed pipeline (K-3: validate, pre-hooks, budget, slots,
deadline, redaction, projection with evidence). The result is the one the full session returns
(``tests/orchestrator/test_cli_direct.py`` compares them); anything else takes the full path.
"""

from __future__ import annotations

import asyncio
import importlib
import os
from collections.abc import Mapping
from typing import Any

# Read-only workspace tools a local directory always offers (REFERENCE §2: `read` → read, ls).
DIRECT_TOOLS = {"read": "tools.read", "ls": "tools.ls"}
# A3S_* variables that change nothing about a one-tool session of read/ls: the CLI's own log level,
# where the retrieval embedder caches its model (tools.search.retrieval.minilm_onnx.CACHE_ENV), and
# the network tools' guard and trust anchors (a shell that always sets them reads files as fast).
NEUTRAL_ENV = frozenset({"A3S_FLEET_LOG_LEVEL", "A3S_MODEL_CACHE", "A3S_NET_ALLOW", "A3S_CA_BUNDLE"})


def direct_eligible(name: str, workspace: str, env: Mapping[str, str]) -> bool:
    """True when a full session would add nothing to this call: a direct tool, a directory
    workspace, and no ``A3S_*`` setting (broker, extra tools, MCP, model…) in the environment."""
    if name not in DIRECT_TOOLS or workspace.startswith("git:"):
        return False
    # Settings reads A3S_* case-insensitively (pydantic-settings' default): so does this check.
    return not any(key.upper().startswith("A3S_") and key.upper() not in NEUTRAL_ENV for key in env)


def direct_call(name: str, args: dict[str, Any], workspace: str, options: Any) -> Any:
    """The ``ToolResult`` of ``name(args)`` host-direct (trusted) in a one-tool session on
    ``workspace``; ``None`` when the workspace lacks the tool's capabilities (the caller then takes
    the full path, which reports the unknown tool). Opening the workspace raises ``ToolError``."""
    from flows.session_kernel import artifact_store, assemble_kernel, checked_policy
    from kernel.clock import RandomIds
    from kernel.registry import Registry
    from kernel.workspace_names import open_workspace

    spec = importlib.import_module(DIRECT_TOOLS[name]).TOOL
    policy = checked_policy(options)
    ws = open_workspace(os.fspath(workspace))
    if not spec.requires <= ws.capabilities:
        return None
    ids = RandomIds()
    kernel, _events = assemble_kernel(
        ws,
        options,
        Registry([spec]),
        session_id=ids("session"),
        ids=ids,
        policy=policy,
        artifacts=artifact_store(ws, options),
    )
    try:
        return asyncio.run(kernel.invoke_host(name, args))
    finally:
        kernel.close()
