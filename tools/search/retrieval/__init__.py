"""Workspace Retrieval: the ``semantic`` and ``hybrid`` modes of the ``search`` tool (SPEC Q-6, Q-7).

What a host or the search tool needs:

- ``retrieval_available(services)``: is there an embedding route (else the modes are not offered);
- ``retrieval_runners(services)``: ``{"semantic": runner, "hybrid": runner}`` (``{}`` without a
  route) for ``build_search_tool(caps, retrieval_enabled, extra_runners=...)``;
- ``run_retrieval_mode(ctx, mode, params)``: one call of either mode;
- ``start_retrieval(session_state, workspace, services)``: build the index now (else on first use);
- ``close_retrieval(session_state)``: free the session's index (call it when the session closes).

No extra "vector database" tool is ever registered: retrieval is only reachable through ``search``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from kernel.context import ToolContext
from kernel.result import ToolResult
from kernel.workspace import Workspace
from tools.search.retrieval.config import Caps, Embedder, RetrievalConfig, retrieval_available
from tools.search.retrieval.index import RetrievalIndex
from tools.search.retrieval.modes import SESSION_KEY, close_index, run_mode, start_index

RETRIEVAL_MODES = ("semantic", "hybrid")


async def run_retrieval_mode(ctx: ToolContext, mode: str, params: Any) -> ToolResult:
    return await run_mode(ctx, mode, params)


async def _semantic(ctx: ToolContext, params: Any) -> ToolResult:
    return await run_mode(ctx, "semantic", params)


async def _hybrid(ctx: ToolContext, params: Any) -> ToolResult:
    return await run_mode(ctx, "hybrid", params)


def retrieval_runners(
    services: dict[str, Any] | None = None,
) -> dict[str, Callable[[ToolContext, Any], Awaitable[ToolResult]]]:
    """The mode runners, or {} when no embedding route is available (the modes are then not offered)."""
    if not retrieval_available(services):
        return {}
    return {"semantic": _semantic, "hybrid": _hybrid}


def start_retrieval(
    session_state: dict[str, Any], workspace: Workspace, services: dict[str, Any] | None = None
) -> RetrievalIndex:
    existing = session_state.get(SESSION_KEY)
    if isinstance(existing, RetrievalIndex) and not existing.closed:
        return existing
    return start_index(session_state, workspace, services)


def close_retrieval(session_state: dict[str, Any]) -> bool:
    return close_index(session_state)


__all__ = [
    "RETRIEVAL_MODES",
    "SESSION_KEY",
    "Caps",
    "Embedder",
    "RetrievalConfig",
    "RetrievalIndex",
    "close_retrieval",
    "retrieval_available",
    "retrieval_runners",
    "run_retrieval_mode",
    "start_retrieval",
]
