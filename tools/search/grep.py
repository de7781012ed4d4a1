"""The grep mode: one request model, two engines (ripgrep, pure Python), one renderer (SPEC Q-2).

Engines only scan; everything the model sees is produced here, so both engines give byte-identical
output for the same workspace. Invariants:

- results are ordered lexically by path; ``files_with_matches`` and ``count`` page through that
  order with opaque cursors; ``summary`` and the paginated modes never build match text;
- ``content`` output is bounded at ``MAX_CONTENT_OUTPUT_BYTES`` *while scanning*: the collector
  keeps only the lexically smallest files that can still appear and tells the engine to skip the
  text of the rest (it still counts their matches, so totals are exact);
- a "match" is a matching line (ripgrep's ``matched_lines``); a file holding a NUL byte is binary
  and is skipped entirely (ripgrep's recursive behaviour in counting modes).
"""

from __future__ import annotations

import bisect
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from kernel.errors import Cancelled, InvalidArgument, NotFound, Timeout, ToolError, Unsupported
from kernel.workspace import Workspace
from tools.search import paging
from tools.search.dialect import Dialect, translate
from tools.search.ignore import IGNORE_FILES, GlobPattern, IgnoreRules, compile_glob
from tools.shown_names import shown_name

MAX_CONTENT_OUTPUT_BYTES = 100 * 1024
MAX_LINE_BYTES = 1000
MAX_SOURCE_ANCHORS = 64
DEFAULT_PAGE_LIMIT = 200
MAX_PAGE_LIMIT = 1000
MAX_CONTEXT_LINES = 100
TRUNCATED_MARKER = "(output truncated)"
OUTPUT_MODES = ("content", "files_with_matches", "count", "summary")
PAGINATED_MODES = ("files_with_matches", "count")
ENGINES = ("auto", "rg", "python")


class Guard:
    """Deadline + cancellation for blocking scan work running in a thread."""

    def __init__(self, remaining_s: float, cancelled: threading.Event, op: str) -> None:
        self.started = time.monotonic()
        self.deadline = self.started + max(0.0, remaining_s)
        self.cancelled = cancelled
        self.op = op

    @property
    def stop(self) -> bool:
        return self.cancelled.is_set() or time.monotonic() >= self.deadline

    def check(self) -> None:
        if self.cancelled.is_set():
            raise Cancelled(f"{self.op} was cancelled", op=self.op)
        if time.monotonic() >= self.deadline:
            ms = int((time.monotonic() - self.started) * 1000)
            raise Timeout(f"{self.op} timed out after {ms}ms", op=self.op, duration_ms=ms)


@dataclass(frozen=True, slots=True)
class GrepQuery:
    dialect: Dialect
    case_sensitive: bool
    base: str  # workspace-relative, '' = root
    base_is_file: bool
    include: GlobPattern | None  # relative to base
    context: int = 0

    def included(self, path: str) -> bool:
        if self.include is None:
            return True
        rel = path[len(self.base) + 1 :] if self.base else path
        return self.include.matches(rel, False)


Line = tuple[int, bool, str]  # (1-based line number, is a match, text without the line end)


@dataclass(slots=True)
class ScanResult:
    counts: dict[str, int] = field(default_factory=dict)
    failed_reads: int = 0
    truncated: bool = False


class ContentSink(Protocol):
    budget: int  # output bytes; an engine may stop gathering a file's lines once they overflow it

    def wants(self, path: str) -> bool: ...

    def add(self, path: str, lines: list[Line]) -> None: ...


class Engine(Protocol):
    name: str

    def counts(self, ws: Workspace, q: GrepQuery, guard: Guard) -> ScanResult: ...

    def content(self, ws: Workspace, q: GrepQuery, sink: ContentSink, guard: Guard) -> ScanResult: ...


def cut_line(text: str, limit: int = MAX_LINE_BYTES) -> str:
    raw = text.encode("utf-8", "surrogatepass")
    if len(raw) <= limit:
        return text
    return raw[:limit].decode("utf-8", "ignore") + "…"


class ContentCollector:
    """Keeps the rendered blocks of the lexically smallest files that fit the output budget."""

    def __init__(self, budget: int, context: int) -> None:
        self.budget = budget
        self.context = context
        self._paths: list[str] = []
        self._blocks: dict[str, list[str]] = {}
        self._sizes: dict[str, int] = {}
        self._total = 0
        self.dropped = False  # some matched text could not be kept
        self._lock = threading.Lock()

    def wants(self, path: str) -> bool:
        with self._lock:
            return not (self._total >= self.budget and self._paths and path > self._paths[-1])

    def add(self, path: str, lines: list[Line]) -> None:
        block: list[str] = []
        size = 0
        prev = None
        shown = shown_name(path)  # a newline in a name would forge match lines
        for n, is_match, text in lines:
            if self.context and prev is not None and n != prev + 1:
                block.append("--")
                size += 3
            sep = ":" if is_match else "-"
            rendered = f"{shown}{sep}{n}{sep}{cut_line(text)}"
            block.append(rendered)
            size += len(rendered.encode("utf-8", "surrogatepass")) + 1
            prev = n
            if size > self.budget:
                self.dropped = True
                break
        with self._lock:
            bisect.insort(self._paths, path)
            self._blocks[path] = block
            self._sizes[path] = size
            self._total += size
            while len(self._paths) > 1 and self._total - self._sizes[self._paths[-1]] >= self.budget:
                last = self._paths.pop()
                self._total -= self._sizes.pop(last)
                del self._blocks[last]
                self.dropped = True

    def render(self, header: str) -> tuple[str, bool, list[str]]:
        """(text, truncated, paths shown) with the header first and the marker last when cut."""
        out = [header]
        used = len(header.encode()) + 1
        reserve = len(TRUNCATED_MARKER) + 1
        # Lines are cut only by the budget; text dropped while collecting only adds the marker
        # (it must not stop the render after the first file: both engines must show the same).
        truncated = False
        shown: list[str] = []
        for i, path in enumerate(self._paths):
            block = self._blocks[path]
            if self.context and i > 0:
                block = ["--", *block]
            fitted = 0
            for line in block:
                cost = len(line.encode("utf-8", "surrogatepass")) + 1
                if used + cost > self.budget - reserve:
                    truncated = True
                    break
                out.append(line)
                used += cost
                fitted += 1
            if fitted and any(x != "--" for x in block[:fitted]):
                shown.append(path)
            if truncated:
                break
        truncated = truncated or self.dropped
        if truncated:
            out.append(TRUNCATED_MARKER)
        return "\n".join(out), truncated, shown


def context_lines(lines: list[str], matched: list[int], context: int) -> list[Line]:
    """Matching lines (0-based indexes, ascending) plus ``context`` lines around each, merged."""
    if not context:
        return [(i + 1, True, _strip_cr(lines[i])) for i in matched]
    show: dict[int, bool] = {}
    n = len(lines)
    mset = set(matched)
    for i in matched:
        for j in range(max(0, i - context), min(n, i + context + 1)):
            show[j] = j in mset
    return [(j + 1, show[j], _strip_cr(lines[j])) for j in sorted(show)]


def _strip_cr(text: str) -> str:
    return text[:-1] if text.endswith("\r") else text


# --- engine selection --------------------------------------------------------------------------

_ABOVE_ROOT_CACHE: dict[Path, bool] = {}


def ignore_files_above(root: Path) -> bool:
    """Does any directory above the workspace root hold an ignore file ripgrep would read?"""
    cached = _ABOVE_ROOT_CACHE.get(root)
    if cached is None:
        cached = any((parent / name).exists() for parent in root.parents for name in IGNORE_FILES)
        _ABOVE_ROOT_CACHE[root] = cached
    return cached


def engine_setting(ctx: Any) -> str:
    value = None
    services = getattr(ctx, "services", None) or {}
    if isinstance(services, dict):
        value = services.get("search_engine")
    if value is None:
        value = getattr(getattr(ctx, "settings", None), "search_engine", None)
    value = value or "auto"
    if value not in ENGINES:
        raise InvalidArgument(f"search_engine setting must be one of {ENGINES}, got {value!r}")
    return str(value)


def rg_binary() -> str | None:
    return shutil.which("rg")


def pick_engine(setting: str, ws: Workspace, q: GrepQuery) -> Engine:
    from tools.search.grep_py import PythonEngine
    from tools.search.grep_rg import RipgrepEngine

    local = ws.root is not None and "local" in ws.capabilities
    rg = rg_binary()
    usable = local and rg is not None and not q.base_is_file
    if setting == "python":
        return PythonEngine()
    if setting == "rg":
        if not local or rg is None:
            raise Unsupported("the ripgrep engine needs a local workspace and `rg` on PATH")
        if q.base_is_file:
            return PythonEngine()  # one explicit file: ripgrep's explicit-file rules differ
        return RipgrepEngine(rg, read_parents=bool(q.base))
    if usable and ws.root is not None:
        # Below the root, ripgrep must read the ignore files between root and base; that is exact
        # only when nothing above the workspace root would be read too.
        if q.base and ignore_files_above(ws.root):
            return PythonEngine()
        return RipgrepEngine(rg or "rg", read_parents=bool(q.base))
    return PythonEngine()


# --- the mode ------------------------------------------------------------------------------------


def build_query(
    ws: Workspace, pattern: str, *, path: str, include: str | None, case_sensitive: bool, context: int
) -> GrepQuery:
    dialect = translate(pattern)
    base = ws.normalize(path or "")
    try:
        entry = ws.stat(base)
    except NotFound:
        raise NotFound(f"Path not found: {path or '.'}", path=path) from None
    if base.split("/")[-1] in (".git",) or "/.git/" in f"/{base}/":
        raise InvalidArgument(".git/ is never searched")
    if entry.kind not in ("file", "dir"):
        # A FIFO named as the path would block ripgrep until the deadline; devices are never read.
        raise InvalidArgument(
            f"{path} is not a regular file or directory (FIFOs, sockets and devices are refused)"
        )
    return GrepQuery(
        dialect=dialect,
        case_sensitive=case_sensitive,
        base=entry.path if entry.path is not None else base,  # the physical path under a symlink
        base_is_file=entry.kind == "file",
        include=compile_glob(include, "include") if include else None,
        context=context,
    )


def filter_result(ws: Workspace, q: GrepQuery, rules: IgnoreRules | None) -> Callable[[str], bool]:
    """Post-filter for engine paths when ``include`` was handed to ripgrep as an override glob.

    ripgrep's ``-g`` whitelists matching files past ignore and hidden rules; we keep a file only if
    it also passes those rules (so ``include`` narrows, never widens).
    """
    if q.include is None:
        return lambda _p: True
    checker = rules or IgnoreRules(ws)
    return lambda p: q.included(p) and checker.visible_below(q.base, p)


def summarise(counts: dict[str, int]) -> tuple[int, int]:
    return sum(counts.values()), len(counts)


def page_paths(counts: dict[str, int], limit: int, cursor: str, fp: str) -> tuple[list[str], str | None]:
    after = paging.decode(cursor, fp)
    ordered = sorted(counts)
    start = 0
    if after is not None:
        if len(after) != 1 or not isinstance(after[0], str):
            raise InvalidArgument("cursor is not valid; copy it back verbatim from the previous result")
        start = bisect.bisect_right(ordered, after[0])
    page = ordered[start : start + limit]
    more = start + limit < len(ordered)
    next_cursor = paging.encode(fp, [page[-1]]) if more and page else None
    return page, next_cursor


def render_grep(
    mode: str,
    q: GrepQuery,
    scan: ScanResult,
    *,
    collector: ContentCollector | None,
    limit: int,
    cursor: str,
    fp: str,
) -> tuple[str, dict[str, Any]]:
    lines_total, files_total = summarise(scan.counts)
    search_meta = {"matching_lines": lines_total, "matching_files": files_total, "truncated": scan.truncated}
    if mode == "summary":
        text = f"{lines_total} matching line(s) in {files_total} file(s)"
        if scan.truncated:
            text += "\nWarning: the scan was cut short; totals are lower bounds."
        return text, {"output_mode": mode, "search": search_meta, "failed_reads": scan.failed_reads}
    if mode == "content":
        assert collector is not None
        header = f"{lines_total} match(es) in {files_total} file(s)"
        text, truncated, shown = collector.render(header)
        if scan.truncated and not truncated:
            text += "\nWarning: the scan was cut short; results are incomplete."
        meta = {
            "output_mode": mode,
            "sort": "path",
            "source_anchors": shown[:MAX_SOURCE_ANCHORS],
            "search": search_meta,
            "failed_reads": scan.failed_reads,
            "output_truncated": truncated,
        }
        return text, meta
    page, next_cursor = page_paths(scan.counts, limit, cursor, fp)
    if mode == "count":
        body = [f"{shown_name(p)}:{scan.counts[p]}" for p in page]
    else:
        body = [shown_name(p) for p in page]
    if not page:
        body = ["No matching files." if not cursor else "No more matching files."]
    if next_cursor:
        body.append(f"More files available; continue with cursor={next_cursor}")
    meta: dict[str, Any] = {
        "output_mode": mode,
        "sort": "path",
        "source_anchors": page[:MAX_SOURCE_ANCHORS],
        "page": {
            "limit": limit,
            "cursor": cursor or None,
            "next_cursor": next_cursor,
            "returned": len(page),
            "has_more": next_cursor is not None,
        },
        "search": search_meta,
        "failed_reads": scan.failed_reads,
    }
    if mode == "count":
        meta["counts"] = [{"path": p, "count": scan.counts[p]} for p in page]
    else:
        meta["paths"] = page
    return "\n".join(body), meta


def grep_fingerprint(q: GrepQuery, mode: str) -> str:
    return paging.fingerprint(
        "grep", mode, q.dialect.source, q.base, q.include.source if q.include else None, q.case_sensitive
    )


def run_scan(
    ws: Workspace, q: GrepQuery, mode: str, engine: Engine, guard: Guard
) -> tuple[ScanResult, ContentCollector | None]:
    """Blocking: scan with ``engine`` (call from a worker thread)."""
    if mode == "content":
        collector = ContentCollector(MAX_CONTENT_OUTPUT_BYTES, q.context)
        return engine.content(ws, q, collector, guard), collector
    return engine.counts(ws, q, guard), None


def read_failed(exc: BaseException) -> bool:
    """Errors that count as an unreadable file (not a failed search)."""
    return isinstance(exc, (OSError, ToolError)) and not isinstance(exc, (Cancelled, Timeout))
