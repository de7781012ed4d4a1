"""``ls``: one directory's entries, sorted by name, in cursor pages (SPEC B-1).

The cursor is opaque (base64 of the last name returned), so a page boundary stays exact even when
entries are added before it. ``.a3s/`` is never listed (the workspace hides it). A page streams the
directory in a worker thread keeping only the entries it may return (``list_page`` of a local
directory or a ``git:`` view): memory follows the page, not the directory, and the call's deadline
and cancel stop the scan.

Names are shown in the text output through ``tools.shown_names.shown_name`` (quoted with escapes
when they could forge lines or terminal output); ``metadata.entries`` keeps every name exact.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kernel.capabilities import ToolCapabilities
from kernel.context import ToolContext
from kernel.errors import Cancelled, InvalidArgument, Timeout
from kernel.result import ToolResult
from kernel.spec import DeferredParams, ToolSpec
from kernel.workspace import Entry
from tools._offthread import abandon
from tools._quick_args import integer, only, quick, string
from tools.shown_names import shown_name

DEFAULT_PAGE_ENTRIES = 200
MAX_PAGE_ENTRIES = 1000


@dataclass(frozen=True, slots=True)
class LsArgs:
    """The parameters of a call: what ``tools.ls_params.Params`` gives, field by field (``run`` gets
    either one; ``kernel.spec.DeferredParams``)."""

    path: str = ""
    limit: int = DEFAULT_PAGE_ENTRIES
    cursor: str = ""


_LS_KEYS = frozenset({"path", "limit", "cursor"})


@quick
def quick_params(args: Mapping[str, Any]) -> LsArgs:
    """``LsArgs`` of ordinary arguments without pydantic (CLI start-up); the model decides the rest."""
    only(args, _LS_KEYS)
    return LsArgs(
        path=string(args["path"]) if "path" in args else "",
        limit=integer(args["limit"], ge=1, le=MAX_PAGE_ENTRIES) if "limit" in args else DEFAULT_PAGE_ENTRIES,
        cursor=string(args["cursor"]) if "cursor" in args else "",
    )


def __getattr__(name: str) -> Any:
    """``Params``, the pydantic model, imported on first use."""
    if name == "Params":
        from tools import ls_params

        return ls_params.Params
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def encode_cursor(after: str) -> str:
    return base64.urlsafe_b64encode(json.dumps({"after": after}).encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> str:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        data = json.loads(base64.urlsafe_b64decode(padded.encode()))
        after = data["after"]
        if not isinstance(after, str):
            raise TypeError
        return after
    except (binascii.Error, ValueError, KeyError, TypeError) as exc:
        raise InvalidArgument(
            f"invalid cursor {cursor!r}: copy it back verbatim from a previous page"
        ) from exc


def _fmt_size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


async def _page(ctx: ToolContext, params: LsArgs, after: str) -> tuple[list[Entry], bool]:
    """One page, off the event loop (a directory may hold millions of entries a sandboxed command
    made; a ``git:`` view's tree as many, read by libgit2): the scan stops at the call's deadline or
    cancel. A workspace without ``list_page`` lists the whole directory, in the worker thread too."""
    workspace = ctx.workspace
    list_page = getattr(workspace, "list_page", None)
    if list_page is None:

        def list_page(
            path: str, after: str, limit: int, check: Callable[[], None]
        ) -> tuple[list[Entry], bool]:
            entries = [e for e in workspace.list_dir(path) if e.name > after]
            return entries[:limit], len(entries) > limit

    deadline = time.monotonic() + ctx.remaining_s()
    stop = threading.Event()

    def check() -> None:
        if stop.is_set() or ctx.cancelled.is_set():
            raise Cancelled("ls was cancelled", op="ls")
        if time.monotonic() >= deadline:
            raise Timeout("ls timed out while listing the directory", op="ls")

    work = asyncio.get_running_loop().run_in_executor(
        None, list_page, params.path, after, params.limit, check
    )
    try:
        return await asyncio.shield(work)
    except asyncio.CancelledError:
        stop.set()  # the thread notices within PAGE_CHECK_EVERY entries
        abandon(work)  # ...and raises Cancelled into a future nobody awaits: retrieved, not logged
        raise


async def run(ctx: ToolContext, params: LsArgs) -> ToolResult:
    after = decode_cursor(params.cursor) if params.cursor else ""
    page, more = await _page(ctx, params, after)
    shown = params.path.strip("/") or "."
    lines = [
        f"{shown_name(shown)}/ ({len(page)} entr{'y' if len(page) == 1 else 'ies'}{', more available' if more else ''})"
    ]
    for e in page:
        name = shown_name(e.name)
        if e.kind == "dir":
            lines.append(f"  {name}/")
        elif e.kind == "symlink":
            lines.append(f"  {name}@")
        else:
            lines.append(f"  {name}  ({_fmt_size(e.size)})")
    next_cursor = encode_cursor(page[-1].name) if more and page else None
    if next_cursor:
        lines.append(f"More entries available; continue with cursor={next_cursor}")
    meta = {
        "path": shown,
        "source_anchors": [e.path for e in page[:64]],
        "entries": [{"name": e.name, "kind": e.kind, "size": e.size} for e in page],
        "page": {
            "limit": params.limit,
            "returned": len(page),
            "cursor": params.cursor or None,
            "next_cursor": next_cursor,
        },
    }
    return ToolResult.success("ls", "\n".join(lines) + "\n", meta)


TOOL = ToolSpec(
    name="ls",
    description="List a workspace directory (sorted by name, paginated with an opaque cursor).",
    params=DeferredParams("tools.ls_params:Params", quick_params),
    run=run,
    capabilities=lambda _p: ToolCapabilities.read_only_paginated(16),
    requires=frozenset({"read"}),
    subject=lambda p: p.path or ".",
    subject_kind="path",
    path_fields=("path",),
    examples=({"path": "src"},),
)
