"""The built-in tools, as one explicit list (CONVENTIONS §3), and the surface rule of SPEC S-2.

``builtin_tools(capabilities)`` keeps the workspace-gated tools whose ``requires`` the workspace
declares (REFERENCE §2: ``read`` → read/ls; ``write`` → write; ``read``+``write`` → edit/patch;
``exec`` → bash; ``git`` → git; ``write``+``local`` → download; so no ``write``/``edit``/``patch``/``bash`` on a read-only git tree),
then the runtime built-ins every session gets. No import-time registration, no module scanning.
"""

from __future__ import annotations

from typing import Any

from kernel.spec import ToolSpec
from tools import batch, edit, ls, read, write
from tools.bash import TOOL as BASH
from tools.download import TOOL as DOWNLOAD
from tools.git import TOOL as GIT
from tools.patch import TOOL as PATCH
from tools.program import TOOL as PROGRAM
from tools.search import build_search_tool
from tools.web_fetch import TOOL as WEB_FETCH
from tools.web_search import TOOL as WEB_SEARCH

# Workspace-gated built-ins: registered only when the workspace has every capability in `requires`.
WORKSPACE_TOOLS: list[ToolSpec] = [read.TOOL, ls.TOOL, write.TOOL, edit.TOOL, PATCH, BASH, GIT, DOWNLOAD]
# Runtime built-ins: every session.
RUNTIME_TOOLS: list[ToolSpec] = [batch.TOOL, WEB_FETCH, WEB_SEARCH, PROGRAM]
ALL_TOOLS: list[ToolSpec] = [*WORKSPACE_TOOLS, *RUNTIME_TOOLS]  # + the per-session `search`


def builtin_tools(
    capabilities: frozenset[str], *, retrieval_enabled: bool = False, services: dict[str, Any] | None = None
) -> list[ToolSpec]:
    gated = [spec for spec in WORKSPACE_TOOLS if spec.requires <= capabilities]
    # `search` is built per session: its `mode` enum lists only the modes this session can serve
    # (semantic/hybrid only with Workspace Retrieval enabled *and* an embedding route).
    runners = None
    if retrieval_enabled:  # numpy and the embedders load only for sessions that ask for retrieval
        from tools.search.retrieval import retrieval_runners

        runners = retrieval_runners(services)
    search = build_search_tool(capabilities, retrieval_enabled, runners, services)
    if search is not None:
        gated.append(search)
    return [*gated, *RUNTIME_TOOLS]
