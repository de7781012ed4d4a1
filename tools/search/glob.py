"""The glob mode: gitignore-aware path discovery (SPEC Q-4).

``query`` is a glob relative to ``path`` in ripgrep's ``-g`` language (``ignore.GlobPattern``): a
glob without ``/`` matches a file name at any depth (``*.py``), one with ``/`` is anchored to
``path`` (``src/**/*.rs``); ``**`` spans directories, ``{a,b}`` alternates. Files are those a
grep would search (ignore files, hidden entries, ``.git``/``.a3s`` excluded). Order: ``backend``
(default) = most recently modified first, ties by path; ``path`` = lexical. Both page with an
opaque cursor holding the last sort key, so pages never repeat or skip a file.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Callable
from typing import Any

from kernel.errors import InvalidArgument, NotFound, ToolError
from kernel.workspace import Workspace
from tools.search import paging
from tools.search.grep import MAX_SOURCE_ANCHORS, Guard, ignore_files_above, rg_binary
from tools.search.grep_local import beneath_of, is_local
from tools.search.grep_rg import RipgrepEngine
from tools.search.ignore import IgnoreRules, WalkReport, compile_glob, walk
from tools.shown_names import shown_name

SORTS = ("backend", "path")


STAT_CHECK_EVERY = 1024  # names lstat'ed between two deadline checks


def list_files(
    ws: Workspace, base: str, setting: str, guard: Guard, keep: Callable[[str], bool] | None = None
) -> tuple[list[tuple[str, int]], bool]:
    """(path, mtime_ns) of every visible file under ``base`` that ``keep`` accepts (all when None),
    and whether the listing was cut."""
    rg = rg_binary()
    local = ws.root is not None and "local" in ws.capabilities
    use_rg = setting == "rg" or (setting == "auto" and rg is not None and local)
    if use_rg and ws.root is not None and rg is not None and not (base and ignore_files_above(ws.root)):
        return _list_rg(ws, base, rg, guard, keep)
    rules = IgnoreRules(ws)
    report = WalkReport()
    out = [
        (e.path, e.mtime_ns)
        for e in walk(ws, base, rules, lambda: guard.stop, report)
        if keep is None or keep(e.path)
    ]
    guard.check()
    return out, report.truncated


def _list_rg(
    ws: Workspace, base: str, rg: str, guard: Guard, keep: Callable[[str], bool] | None
) -> tuple[list[tuple[str, int]], bool]:
    from tools.search.grep import ScanResult

    assert ws.root is not None
    engine = RipgrepEngine(rg, read_parents=bool(base))
    argv = [
        rg,
        "--no-config",
        "--no-require-git",
        "--no-ignore-global",
        "--no-ignore-exclude",
        *([] if base else ["--no-ignore-parent"]),
        "-g",
        "!.git",
        "-g",
        "!.a3s",
        "--files",
        "--null",  # names are NUL-terminated: a newline in one is part of it
        "--",
        base or ".",
    ]
    paths: list[str] = []
    result = ScanResult()

    def on_line(line: bytes) -> None:
        if line:
            p = os.fsdecode(line)
            paths.append(p[2:] if p.startswith("./") else p)

    engine._run(ws, argv, guard, on_line, result, sep=b"\x00")
    # rg printed the names; their mtimes are read beneath the pinned root with no symlink followed,
    # so a directory swapped for a symlink since rg listed it is dropped, never statted outside.
    # Only the names ``keep`` accepts are statted, under the deadline: rg lists 500,000 names a
    # sandboxed command made in a blink, statting them all took seconds past it.
    beneath = beneath_of(ws) if is_local(ws) else None
    out: list[tuple[str, int]] = []
    for i, p in enumerate(paths):
        if i % STAT_CHECK_EVERY == 0:
            guard.check()
        if keep is not None and not keep(p):
            continue
        try:
            st = beneath.lstat_strict(p) if beneath is not None else os.lstat(ws.root / p)
        except (OSError, ToolError):
            continue
        out.append((p, st.st_mtime_ns))
    return out, result.truncated


def run_glob(
    ws: Workspace,
    *,
    query: str,
    path: str,
    sort: str,
    limit: int,
    cursor: str,
    setting: str,
    guard: Guard,
) -> tuple[str, dict[str, Any]]:
    """Blocking: the glob mode's output text and metadata."""
    if sort not in SORTS:
        raise InvalidArgument(f"sort must be one of {SORTS}")
    pattern = compile_glob(query, "glob query")
    base = ws.normalize(path or "")
    try:
        entry = ws.stat(base)
    except NotFound:
        raise NotFound(f"Path not found: {path or '.'}", path=path) from None
    if entry.kind != "dir":
        raise InvalidArgument(f"glob needs a directory as path; {path!r} is a {entry.kind}")
    base = entry.path
    fp = paging.fingerprint("glob", query, base, sort)
    after = paging.decode(cursor, fp)
    prefix = len(base) + 1 if base else 0
    hits, truncated = list_files(ws, base, setting, guard, keep=lambda p: pattern.matches(p[prefix:], False))
    if sort == "path":
        keys = sorted((p,) for p, _ in hits)
        ordered = [(k[0], None) for k in keys]
        key_list: list[tuple[Any, ...]] = keys
    else:
        hits.sort(key=lambda pm: (-pm[1], pm[0]))
        ordered = [(p, m) for p, m in hits]
        key_list = [(-m, p) for p, m in hits]
    start = 0
    if after is not None:
        want = 1 if sort == "path" else 2
        if len(after) != want:
            raise InvalidArgument("cursor is not valid; copy it back verbatim from the previous result")
        start = bisect.bisect_right(key_list, tuple(after))
    page = ordered[start : start + limit]
    more = start + limit < len(ordered)
    next_cursor = paging.encode(fp, list(key_list[start + len(page) - 1])) if more and page else None
    paths = [p for p, _ in page]
    body = [shown_name(p) for p in paths] or ["No files found." if not cursor else "No more files."]
    if next_cursor:
        body.append(f"More files available; continue with cursor={next_cursor}")
    if truncated:
        body.append("Warning: the backend capped its scan; the path list is incomplete.")
    meta: dict[str, Any] = {
        "sort": sort,
        "paths": paths,
        "source_anchors": paths[:MAX_SOURCE_ANCHORS],
        "page": {
            "limit": limit,
            "cursor": cursor or None,
            "next_cursor": next_cursor,
            "returned": len(paths),
            "has_more": next_cursor is not None,
        },
        "search": {"matching_files": len(ordered), "truncated": truncated},
    }
    return "\n".join(body), meta
