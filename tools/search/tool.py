"""The ``search`` tool: the one model-side workspace search, its mode enum built per session (SPEC Q-1).

``build_search_tool(workspace_caps, retrieval_enabled, extra_runners)`` returns the ToolSpec whose
``mode`` enum lists only the modes this session can serve: ``grep``/``glob`` need the workspace
capability ``search``, ``bm25`` also ``read``; ``semantic``/``hybrid`` appear only when Workspace
Retrieval is enabled *and* the host hands in their runners (the retrieval phase plugs in there).
Asking for a mode the session lacks is ``invalid_argument`` naming what is missing. Per-call
capabilities follow REFERENCE §3; the permission subject is the mode (``search(grep)``). ``indexed``
(SPEC Q-8, ``tools.search.indexed``) is offered by the rule in ``indexed.mode.indexed_offered``.
Blocking scans run in a worker thread under a Guard (deadline + cancellation; ripgrep is killed).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from kernel.capabilities import ToolCapabilities
from kernel.context import ToolContext
from kernel.errors import InvalidArgument
from kernel.result import ToolResult
from kernel.spec import ToolSpec
from tools.search import grep
from tools.search.glob import run_glob
from tools.search.offload import bm25_cache, in_thread

NAME = "search"
ALL_MODES = ("grep", "glob", "bm25", "indexed", "semantic", "hybrid")
RETRIEVAL_MODES = ("semantic", "hybrid")

ModeRunner = Callable[[ToolContext, Any], Awaitable["ToolResult | str"]]

DESCRIPTION = """Search the workspace. One tool, several modes:
- grep: regex over file contents (Rust/ripgrep regex syntax). output_mode: content (default; matching \
lines as path:line:text, `context` lines around them, bounded at 100 KiB), files_with_matches or count \
(lexically ordered, paged with `limit` and `cursor`), summary (totals only). case_sensitive defaults to true.
- glob: find files by glob (`*.py` matches at any depth, `src/**/*.ts` is anchored to `path`); newest \
first, or sort="path" for stable lexical pages.
- bm25: ranked lexical search for a plain-text question or identifiers (camelCase and snake_case are \
split); returns the best 80-line chunks with a few lines of context. limit ≤ 25, context ≤ 8.
- indexed (when offered): bm25 over a persistent index of the whole workspace (no size cap; kept up to \
date in the background, readiness reported); same query, limit and context rules as bm25.
All modes honour .gitignore/.ignore and skip hidden and binary files. `path` narrows to a directory; \
`include` is a glob filter for grep and bm25. Copy `cursor` back verbatim to get the next page."""


class _BaseParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    mode: str = Field(description="which search to run")
    query: str = Field(
        min_length=1, description="grep: the regex; glob: the glob; bm25: the question or identifiers"
    )
    path: str | None = Field(
        default=None, description="workspace-relative directory (or file) to search; default: the root"
    )
    include: str | None = Field(default=None, description="glob filter on file paths (grep, bm25), e.g. *.py")
    context: int | None = Field(
        default=None, ge=0, description="grep content: lines around each match; bm25: default 2, max 8"
    )
    case_sensitive: bool | None = Field(default=None, description="grep only; default true")
    output_mode: Literal["content", "files_with_matches", "count", "summary"] | None = Field(
        default=None, description="grep only; default content"
    )
    limit: int | None = Field(
        default=None,
        ge=1,
        le=grep.MAX_PAGE_LIMIT,
        description="page size for glob and paged grep (default 200); result count for bm25 (default 10, max 25)",
    )
    cursor: str | None = Field(default=None, description="opaque; copy back verbatim from the previous page")
    sort: Literal["backend", "path"] | None = Field(
        default=None, description="glob only: backend (newest first, default) or path (lexical)"
    )


def available_modes(
    workspace_caps: Iterable[str], retrieval_enabled: bool = False, services: Mapping[str, Any] | None = None
) -> tuple[list[str], dict[str, str]]:
    """(modes this session serves, {missing mode: why})."""
    from tools.search.indexed.mode import indexed_offered

    caps = set(workspace_caps)
    modes: list[str] = []
    missing: dict[str, str] = {}
    for mode in ("grep", "glob"):
        if "search" in caps:
            modes.append(mode)
        else:
            missing[mode] = (
                f"search mode {mode!r} needs the workspace capability 'search', which this workspace lacks"
            )
    if "search" in caps and "read" in caps:
        modes.append("bm25")
    else:
        lack = [c for c in ("search", "read") if c not in caps]
        missing["bm25"] = (
            f"search mode 'bm25' needs the workspace capabilities 'search' and 'read'; missing: {', '.join(lack)}"
        )
    why_not = indexed_offered(caps, services)
    if why_not is None:
        modes.append("indexed")
    else:
        missing["indexed"] = why_not
    for mode in RETRIEVAL_MODES:
        if retrieval_enabled:
            modes.append(mode)
        else:
            missing[mode] = (
                f"search mode {mode!r} needs Workspace Retrieval, which this session has not enabled"
            )
    return modes, missing


def _params_model(modes: list[str], missing: dict[str, str]) -> type[BaseModel]:
    # One class per mode set: sessions are built often (every fleet child run builds one), and a new
    # pydantic class costs its compile and its schema each time.
    return _params_model_cached(tuple(modes), tuple(sorted(missing.items())))


@functools.lru_cache(maxsize=64)
def _params_model_cached(
    mode_set: tuple[str, ...], missing_items: tuple[tuple[str, str], ...]
) -> type[BaseModel]:
    modes, missing = list(mode_set), dict(missing_items)

    class Params(_BaseParams):
        mode: str = Field(description="which search to run", json_schema_extra={"enum": list(modes)})

        @field_validator("mode")
        @classmethod
        def _mode(cls, v: str) -> str:
            if v in modes:
                return v
            if v in missing:
                raise ValueError(missing[v])
            raise ValueError(f"unknown search mode {v!r}; available: {', '.join(modes)}")

    return Params


def capabilities(params: Any) -> ToolCapabilities:
    if params.mode == "glob":
        return ToolCapabilities.read_only_paginated(16)
    if params.mode == "grep":
        if (params.output_mode or "content") in grep.PAGINATED_MODES:
            return ToolCapabilities.read_only_paginated(16)
        return ToolCapabilities.parallel_safe_read(16)
    return ToolCapabilities.parallel_safe_read(2)


def _refuse_args(params: Any, mode: str, names: Iterable[str]) -> None:
    for name in names:
        if getattr(params, name) is not None:
            raise InvalidArgument(f"{name} does not apply to search mode '{mode}'")


async def _run_grep(ctx: ToolContext, p: Any) -> tuple[str, dict[str, Any]]:
    _refuse_args(p, "grep", ("sort",))
    mode = p.output_mode or "content"
    paged = mode in grep.PAGINATED_MODES
    if not paged and p.limit not in (None, grep.DEFAULT_PAGE_LIMIT):
        raise InvalidArgument(
            f"limit applies only to output_mode files_with_matches or count (got output_mode={mode})"
        )
    if not paged and p.cursor not in (None, ""):
        raise InvalidArgument(
            f"cursor applies only to output_mode files_with_matches or count (got output_mode={mode})"
        )
    if mode != "content" and p.context not in (None, 0):
        raise InvalidArgument("context applies only to output_mode content")
    context = p.context or 0
    if context > grep.MAX_CONTEXT_LINES:
        raise InvalidArgument(f"context must be at most {grep.MAX_CONTEXT_LINES} for grep")
    ws = ctx.workspace
    setting = grep.engine_setting(ctx)
    q = grep.build_query(
        ws,
        p.query,
        path=p.path or "",
        include=p.include,
        case_sensitive=True if p.case_sensitive is None else p.case_sensitive,
        context=context,
    )
    fp = grep.grep_fingerprint(q, mode)
    if paged:
        grep.page_paths({}, 1, p.cursor or "", fp)  # refuse a foreign cursor before scanning
    engine = grep.pick_engine(setting, ws, q)

    def work(guard: grep.Guard) -> tuple[str, dict[str, Any]]:
        scan, collector = grep.run_scan(ws, q, mode, engine, guard)
        text, meta = grep.render_grep(
            mode,
            q,
            scan,
            collector=collector,
            limit=p.limit or grep.DEFAULT_PAGE_LIMIT,
            cursor=p.cursor or "",
            fp=fp,
        )
        meta["engine"] = engine.name
        return text, meta

    return await in_thread(ctx, "search.grep", work)


async def _run_glob(ctx: ToolContext, p: Any) -> tuple[str, dict[str, Any]]:
    _refuse_args(p, "glob", ("include", "context", "case_sensitive", "output_mode"))
    setting = grep.engine_setting(ctx)

    def work(guard: grep.Guard) -> tuple[str, dict[str, Any]]:
        return run_glob(
            ctx.workspace,
            query=p.query,
            path=p.path or "",
            sort=p.sort or "backend",
            limit=p.limit or grep.DEFAULT_PAGE_LIMIT,
            cursor=p.cursor or "",
            setting=setting,
            guard=guard,
        )

    return await in_thread(ctx, "search.glob", work)


async def _run_bm25(ctx: ToolContext, p: Any) -> tuple[str, dict[str, Any]]:
    from tools.search import bm25_mode  # numpy loads with the first bm25 query (CLI start-up, item 7)

    _refuse_args(p, "bm25", ("case_sensitive", "output_mode", "sort"))
    if p.cursor not in (None, ""):
        raise InvalidArgument("cursor does not apply to search mode 'bm25'")
    limit = bm25_mode.DEFAULT_LIMIT if p.limit is None else p.limit
    if limit > bm25_mode.MAX_LIMIT:
        raise InvalidArgument(f"limit must be at most {bm25_mode.MAX_LIMIT} for bm25")
    context = bm25_mode.DEFAULT_CONTEXT if p.context is None else p.context
    if context > bm25_mode.MAX_CONTEXT:
        raise InvalidArgument(f"context must be at most {bm25_mode.MAX_CONTEXT} for bm25")
    if not p.query.strip():
        raise InvalidArgument("query must not be blank")
    bm25_mode.check_query(p.query)
    setting = grep.engine_setting(ctx)
    cache = bm25_cache(ctx)

    def work(guard: grep.Guard) -> tuple[str, dict[str, Any]]:
        return bm25_mode.run_bm25(
            ctx.workspace,
            query=p.query,
            path=p.path or "",
            include=p.include,
            limit=limit,
            context=context,
            setting=setting,
            guard=guard,
            cache=cache,
        )

    return await in_thread(ctx, "search.bm25", work)


async def _run_indexed(ctx: ToolContext, p: Any) -> tuple[str, dict[str, Any]]:
    from tools.search.indexed.mode import run_indexed  # tantivy loads only when the mode runs

    return await run_indexed(ctx, p)


_BUILTIN_RUNNERS: dict[str, Callable[[ToolContext, Any], Awaitable[tuple[str, dict[str, Any]]]]] = {
    "grep": _run_grep,
    "glob": _run_glob,
    "bm25": _run_bm25,
    "indexed": _run_indexed,
}


def build_search_tool(
    workspace_caps: Iterable[str] = ("search", "read"),
    retrieval_enabled: bool = False,
    extra_runners: Mapping[str, ModeRunner] | None = None,
    services: Mapping[str, Any] | None = None,
) -> ToolSpec | None:
    """The session's ``search`` ToolSpec, or None when it can serve no mode at all."""
    runners = dict(extra_runners or {})
    modes, missing = available_modes(
        workspace_caps, retrieval_enabled and all(m in runners for m in RETRIEVAL_MODES), services
    )
    if retrieval_enabled and not all(m in runners for m in RETRIEVAL_MODES):
        for m in RETRIEVAL_MODES:
            missing[m] = f"search mode {m!r} has no runner configured for this session"
    if not modes:
        return None
    params_model = _params_model(modes, missing)

    async def run(ctx: ToolContext, params: Any) -> ToolResult | str:
        if not params.query.strip():
            raise InvalidArgument("query must not be blank")
        builtin = _BUILTIN_RUNNERS.get(params.mode)
        if builtin is None:
            return await runners[params.mode](ctx, params)
        text, meta = await builtin(ctx, params)
        return ToolResult.success(NAME, text, {"mode": params.mode, **meta})

    return ToolSpec(
        name=NAME,
        description=DESCRIPTION,
        run=run,
        params=params_model,
        capabilities=capabilities,
        requires=frozenset({"search"}) if "grep" in modes else frozenset({"read"}),
        subject=lambda p: p.mode,
        path_fields=("path",),
        examples=(
            {"mode": "grep", "query": "def main\\(", "include": "*.py"},
            {"mode": "glob", "query": "src/**/*.ts", "sort": "path"},
            {"mode": "bm25", "query": "retry with exponential backoff", "limit": 5},
        ),
        builtin=True,
    )
