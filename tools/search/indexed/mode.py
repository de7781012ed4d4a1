"""The ``indexed`` search mode: when a session offers it, and one call of it (SPEC Q-8).

Exposure rule (``indexed_offered``): the mode is in the ``mode`` enum when the workspace has
``search`` and ``read`` and is either local (``local``) or a git tree (``git`` without ``local``:
``git:REPO@REV``), tantivy is importable, and the host has not switched it off with
``services["search_index"] = False``. Object-store workspaces never offer it (their scans are
capped; an index of a capped scan would silently miss files).

Host configuration, ``services["search_index"]`` (all optional): ``True``/``False``, or a dict
``{"enabled": bool, "auto_update": bool, "first_query_wait_s": float, "refresh_interval_s": float}``.
With ``auto_update`` (default) a query starts a background build or incremental update of the
workspace's index (``background``); without it (e.g. fleet workers that should only read) a query
answers from whatever is committed and says so.
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kernel.context import ToolContext
from kernel.errors import InternalError, InvalidArgument, Unsupported

# The mode's machinery (bm25/numpy, the index store, tantivy) is imported by ``run_indexed``: a session
# build only asks ``indexed_offered``, and CLI start-up should not pay for numpy (issue 13 item 7).

SERVICE = "search_index"
DEFAULT_FIRST_QUERY_WAIT_S = 2.0
DEFAULT_REFRESH_INTERVAL_S = 30.0


@dataclass(frozen=True, slots=True)
class IndexConfig:
    enabled: bool = True
    auto_update: bool = True
    first_query_wait_s: float = DEFAULT_FIRST_QUERY_WAIT_S
    refresh_interval_s: float = DEFAULT_REFRESH_INTERVAL_S

    @classmethod
    def from_services(cls, services: Mapping[str, Any] | None) -> IndexConfig:
        value = (services or {}).get(SERVICE)
        if value is None or value is True:
            return cls()
        if value is False:
            return cls(enabled=False)
        if isinstance(value, Mapping):
            unknown = set(value) - {"enabled", "auto_update", "first_query_wait_s", "refresh_interval_s"}
            if unknown:
                raise InvalidArgument(f"unknown search_index setting(s): {', '.join(sorted(unknown))}")
            out = cls(**value)
            for name in ("enabled", "auto_update"):
                if not isinstance(getattr(out, name), bool):
                    raise InvalidArgument(f"search_index setting {name} must be true or false")
            for name in ("first_query_wait_s", "refresh_interval_s"):
                v = getattr(out, name)
                if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v < float("inf"):
                    raise InvalidArgument(f"search_index setting {name} must be a number of seconds >= 0")
            return out
        raise InvalidArgument("services['search_index'] must be a bool or a dict")


def tantivy_available() -> bool:
    return importlib.util.find_spec("tantivy") is not None


def indexed_offered(workspace_caps: Iterable[str], services: Mapping[str, Any] | None = None) -> str | None:
    """None when the session can serve the mode, else why not (for the invalid_argument message)."""
    caps = set(workspace_caps)
    if not {"search", "read"} <= caps:
        return "search mode 'indexed' needs the workspace capabilities 'search' and 'read'"
    if "local" not in caps and "git" not in caps:
        return "search mode 'indexed' needs a local directory or a git:REPO@REV workspace"
    try:
        if not IndexConfig.from_services(services).enabled:
            return "search mode 'indexed' is switched off for this session (services['search_index'])"
    except InvalidArgument as exc:
        return exc.message
    if not tantivy_available():
        return "search mode 'indexed' needs the tantivy package (pip install tantivy==0.27.0)"
    return None


async def run_indexed(ctx: ToolContext, p: Any) -> tuple[str, dict[str, Any]]:
    from tools.search import bm25_mode
    from tools.search.indexed import background, query, store
    from tools.search.offload import in_thread
    from tools.search.retrieval.modes import parse_request

    req = parse_request(ctx.workspace, "indexed", p)
    terms = bm25_mode.check_query(req.query)
    config = IndexConfig.from_services(ctx.services)
    ws = ctx.workspace
    try:
        location = store.locate(ws)
    except Unsupported as exc:
        raise InvalidArgument(exc.message) from None
    base_is_file = bool(req.path) and ws.stat(req.path).kind == "file"

    def work(guard: Any) -> tuple[str, dict[str, Any]]:
        try:
            return answer(guard)
        except (KeyboardInterrupt, SystemExit, GeneratorExit):
            raise
        except BaseException as exc:
            if isinstance(exc, Exception):
                raise
            # tantivy reports Rust panics as pyo3 PanicException, a BaseException: keep it a tool error
            raise InternalError(f"the search index failed: {type(exc).__name__}: {exc}") from None

    def answer(guard: Any) -> tuple[str, dict[str, Any]]:
        updater = background.updater_for(ws, location) if config.auto_update else None
        directory = location.existing()
        if updater is not None:
            if directory is None:
                updater.request()
                wait = min(config.first_query_wait_s, max(0.0, ctx.remaining_s() / 2))
                updater.wait(wait)
                directory = location.existing()
            else:
                summary = store.read_summary(directory) or {}
                if not (location.kind == "git" and summary.get("complete")):
                    updater.refresh_if_older(config.refresh_interval_s)
        guard.check()
        status = background.status_of(ws, location)
        if directory is None:
            found = query.Found([], 0)
        else:
            found = query.search(
                ws,
                directory,
                terms,
                base=req.path,
                base_is_file=base_is_file,
                accept=req.accept,
                limit=req.limit,
                check=guard.check,
            )
        if found.stale_paths and updater is not None:
            updater.request(sorted(found.stale_paths))
        return query.render(req.query, terms, found, req.context, status)

    return await in_thread(ctx, "search.indexed", work)


async def wait_idle(ws: Any, timeout_s: float) -> bool:
    """Tests and tools: wait until this process' updater of the workspace's index is idle."""
    from tools.search.indexed import background, store

    updater = background.updater_for(ws, store.locate(ws))
    return await asyncio.to_thread(updater.wait, timeout_s)
