"""The ``semantic`` and ``hybrid`` search modes over the session's retrieval index (SPEC Q-6, Q-7).

The index lives in ``ctx.session_state[SESSION_KEY]`` (not JSON-safe, so snapshots skip it and a
resumed session rebuilds lazily); the first call creates and starts it. Invariants:

- results carry source anchors ``path:start-end``; ``limit`` 1…25 (default 10), ``context`` 0…8
  (default 2), ≤ 2 results per file, ``path``/``include`` narrow the corpus;
- **freshness**: before a hit is returned its file is re-read and its digest compared with the
  digest its evidence came from. A semantic hit on a changed file is re-scored (its current chunk is
  re-embedded) or dropped when the chunk is gone; in hybrid, index-derived evidence (semantic,
  symbol) of a changed file is discarded and the hit re-ranked on its remaining fresh evidence, or
  dropped when none is left. Changed or deleted files are queued for re-indexing;
- readiness is always reported (``metadata.index``); a query while the index builds answers from
  the files published so far and says so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kernel.context import ToolContext
from kernel.errors import InvalidArgument, NotFound, ToolError
from kernel.result import ToolResult
from kernel.workspace import Workspace
from tools.search import bm25, bm25_mode, grep
from tools.search.grep_py import decode_text
from tools.search.ignore import compile_glob
from tools.search.offload import bm25_cache, in_thread
from tools.search.retrieval import chunks as chunking
from tools.search.retrieval import hybrid
from tools.search.retrieval.config import config_from_services, make_embedder
from tools.search.retrieval.embed_cache import open_cache
from tools.search.retrieval.index import RetrievalIndex
from tools.shown_names import shown_name

NAME = "search"
SESSION_KEY = "retrieval"
DEFAULT_LIMIT = 10
MAX_LIMIT = 25
DEFAULT_CONTEXT = 2
MAX_CONTEXT = 8
MAX_QUERY_BYTES = 2048
MAX_RESULTS_PER_FILE = 2
CANDIDATE_FACTOR = 4  # candidates freshness-checked per requested result
MAX_CANDIDATES = 100
MAX_RESCORES = 8  # stale semantic hits re-embedded per query; the rest are dropped
MAX_RENDERED_LINE_BYTES = 500


# --- the session's index -----------------------------------------------------------------------------


def _workspace_key(ws: Workspace) -> tuple[str, str]:
    return (ws.name, str(ws.root))


def session_index(ctx: ToolContext) -> tuple[RetrievalIndex, bool]:
    """The session's index, created and started on first use; (index, created now)."""
    index = ctx.session_state.get(SESSION_KEY)
    if isinstance(index, RetrievalIndex) and not index.closed:
        if _workspace_key(index.workspace) == _workspace_key(ctx.workspace):
            return index, False
        index.close()
    return start_index(ctx.session_state, ctx.workspace, ctx.services), True


def start_index(
    session_state: dict[str, Any], workspace: Workspace, services: dict[str, Any] | None
) -> RetrievalIndex:
    services = services or {}
    config = config_from_services(services)
    owns = services.get("retrieval_embedder") is None
    embedder = make_embedder(services)
    cache = open_cache(workspace, embedder) if config.embedding_cache else None
    index = RetrievalIndex(workspace, embedder, config.caps, owns_embedder=owns, cache=cache)
    session_state[SESSION_KEY] = index
    index.start()
    return index


def close_index(session_state: dict[str, Any]) -> bool:
    """Free the session's index (every vector); True when there was one."""
    index = session_state.pop(SESSION_KEY, None)
    if isinstance(index, RetrievalIndex):
        index.close()
        return True
    return False


# --- parameters --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Request:
    mode: str
    query: str
    path: str
    include: str | None
    limit: int
    context: int
    accept: Callable[[str], bool]


def parse_request(ws: Workspace, mode: str, p: Any) -> Request:
    for name in ("case_sensitive", "output_mode", "sort"):
        if getattr(p, name, None) is not None:
            raise InvalidArgument(f"{name} does not apply to search mode '{mode}'")
    if getattr(p, "cursor", None) not in (None, ""):
        raise InvalidArgument(f"cursor does not apply to search mode '{mode}'")
    query = p.query
    if not query.strip():
        raise InvalidArgument("query must not be blank")
    if len(query.encode("utf-8", "surrogatepass")) > MAX_QUERY_BYTES:
        raise InvalidArgument(f"{mode} query is longer than {MAX_QUERY_BYTES} bytes")
    limit = DEFAULT_LIMIT if getattr(p, "limit", None) is None else p.limit
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidArgument(f"limit must be between 1 and {MAX_LIMIT} for {mode}")
    context = DEFAULT_CONTEXT if getattr(p, "context", None) is None else p.context
    if not 0 <= context <= MAX_CONTEXT:
        raise InvalidArgument(f"context must be between 0 and {MAX_CONTEXT} for {mode}")
    base = ws.normalize(getattr(p, "path", None) or "")
    if base:
        try:
            entry = ws.stat(base)
        except NotFound:
            raise NotFound(f"Path not found: {p.path}", path=p.path) from None
        base = entry.path if entry.path is not None else base
    include = getattr(p, "include", None)
    pattern = compile_glob(include, "include") if include else None

    def accept(path: str) -> bool:
        if base and path != base and not path.startswith(base + "/"):
            return False
        if pattern is None:
            return True
        rel = path[len(base) + 1 :] if base and path != base else (path.rsplit("/", 1)[-1] if base else path)
        return pattern.matches(rel, False)

    return Request(mode, query, base, include, limit, context, accept)


# --- freshness ---------------------------------------------------------------------------------------


@dataclass(slots=True)
class Freshness:
    """Current file versions read during one query; what was stale and what happened to it."""

    ws: Workspace
    files: dict[str, tuple[str, list[str]] | None] = field(default_factory=dict)  # path → (digest, lines)
    checked_files: int = 0
    stale_rescored: int = 0
    stale_dropped: int = 0
    stale_paths: set[str] = field(default_factory=set)

    def current(self, path: str) -> tuple[str, list[str]] | None:
        if path not in self.files:
            self.checked_files += 1
            try:
                data = self.ws.read_bytes(path)
            except (ToolError, OSError):
                self.files[path] = None
                return None
            text = decode_text(data)
            self.files[path] = None if text is None else (chunking.digest(data), chunking.split_lines(text))
        return self.files[path]

    def to_json(self) -> dict[str, int]:
        return {
            "checked_files": self.checked_files,
            "stale_rescored": self.stale_rescored,
            "stale_dropped": self.stale_dropped,
        }


@dataclass(slots=True)
class Hit:
    path: str
    start_line: int
    end_line: int
    score: float
    extra: dict[str, Any] = field(default_factory=dict)


def _cap_per_file(hits: list[Hit], limit: int) -> list[Hit]:
    per_file: dict[str, int] = {}
    out: list[Hit] = []
    for h in hits:
        if per_file.get(h.path, 0) >= MAX_RESULTS_PER_FILE:
            continue
        per_file[h.path] = per_file.get(h.path, 0) + 1
        out.append(h)
        if len(out) >= limit:
            break
    return out


# --- semantic ----------------------------------------------------------------------------------------


def semantic_hits(
    index: RetrievalIndex, req: Request, fresh: Freshness, qvec: np.ndarray, guard: grep.Guard
) -> list[Hit]:
    top = min(MAX_CANDIDATES, req.limit * CANDIDATE_FACTOR)
    out: list[Hit] = []
    rescores = 0
    for h in index.search(qvec, top, req.accept):
        guard.check()
        cur = fresh.current(h.path)
        if cur is None:
            fresh.stale_dropped += 1
            fresh.stale_paths.add(h.path)
            continue
        digest, lines = cur
        if digest == h.digest:
            out.append(Hit(h.path, h.start_line, h.end_line, h.score))
            continue
        fresh.stale_paths.add(h.path)
        now = {c.start_line: c for c in chunking.chunk_lines(lines)}
        chunk = now.get(h.start_line)
        if chunk is None or rescores >= MAX_RESCORES:
            fresh.stale_dropped += 1
            continue
        rescores += 1
        vec = index.embed([chunking.embed_text(h.path, chunk)])[0]
        fresh.stale_rescored += 1
        out.append(Hit(h.path, chunk.start_line, chunk.end_line, float(vec @ qvec), {"rescored": True}))
    out.sort(key=lambda x: (-x.score, x.path, x.start_line))
    return _cap_per_file(out, req.limit)


# --- hybrid ------------------------------------------------------------------------------------------


def hybrid_hits(
    ws: Workspace,
    index: RetrievalIndex,
    req: Request,
    fresh: Freshness,
    qvec: np.ndarray,
    guard: grep.Guard,
    *,
    setting: str,
    bm25_cache: bm25.Bm25Cache,
    notes: list[str],
) -> tuple[list[Hit], dict[str, int]]:
    identifiers = hybrid.query_identifiers(req.query)
    channels: dict[str, list[hybrid.ChunkKey]] = {}
    channels["exact"] = hybrid.exact_channel(
        ws, identifiers, path=req.path, include=req.include, setting=setting, guard=guard, accept=req.accept
    )
    guard.check()
    try:
        _, meta = bm25_mode.run_bm25(
            ws,
            query=req.query,
            path=req.path,
            include=req.include,
            limit=bm25_mode.MAX_LIMIT,
            context=0,
            setting=setting,
            guard=guard,
            cache=bm25_cache,
        )
        channels["lexical"] = [(r["path"], r["start_line"]) for r in meta["results"] if req.accept(r["path"])]
    except InvalidArgument as exc:
        channels["lexical"] = []
        notes.append(f"lexical channel skipped: {exc.message}")
    guard.check()
    symbol_rank, symbol_digests = hybrid.symbol_channel(index.symbols(req.accept), req.query, identifiers)
    channels["symbol"] = symbol_rank
    semantic = index.search(qvec, hybrid.MAX_CHANNEL_RESULTS, req.accept)
    channels["semantic"] = [(h.path, h.start_line) for h in semantic]
    semantic_digests = {(h.path, h.start_line): h.digest for h in semantic}
    fused = hybrid.fuse(channels)

    top = min(MAX_CANDIDATES, req.limit * CANDIDATE_FACTOR)
    kept: list[hybrid.Fused] = []
    for item in fused[:top]:
        guard.check()
        cur = fresh.current(item.path)
        if cur is None:
            fresh.stale_dropped += 1
            fresh.stale_paths.add(item.path)
            continue
        digest, lines = cur
        if item.start_line > max(1, len(lines)):
            fresh.stale_dropped += 1
            fresh.stale_paths.add(item.path)
            continue
        stale = [
            ch
            for ch, digests in (("semantic", semantic_digests), ("symbol", symbol_digests))
            if ch in item.ranks and digests.get(item.key) != digest
        ]
        if stale:
            fresh.stale_paths.add(item.path)
            for ch in stale:
                del item.ranks[ch]
            if not item.ranks:
                fresh.stale_dropped += 1
                continue
            item.score = hybrid.rrf_score(item.ranks)
            fresh.stale_rescored += 1
        kept.append(item)
    hits: list[Hit] = []
    for item in hybrid.order(kept):
        _, lines = fresh.files[item.path] or ("", [])
        end = min(item.start_line + chunking.CHUNK_LINES - 1, len(lines))
        hits.append(Hit(item.path, item.start_line, end, item.score, hybrid.describe(item)))
    counts = {name: len(ranked) for name, ranked in channels.items()}
    counts["identifiers"] = len(identifiers)
    return _cap_per_file(hits, req.limit), counts


# --- rendering ---------------------------------------------------------------------------------------


def _cut(text: str) -> str:
    raw = text.encode("utf-8", "surrogatepass")
    if len(raw) <= MAX_RENDERED_LINE_BYTES:
        return text
    return raw[:MAX_RENDERED_LINE_BYTES].decode("utf-8", "ignore") + "…"


def _window(lines: list[str], start: int, end: int, terms: set[str], context: int) -> tuple[int, int]:
    """Lines shown for a hit: centred on the line with the most query terms, ± context."""
    best, best_hits = start, 0
    for n in range(start, min(end, len(lines)) + 1):
        hits = len(terms.intersection(bm25.tokenize(lines[n - 1])))
        if hits > best_hits:
            best, best_hits = n, hits
    return max(start, best - context), min(end, best + context)


def render(
    mode: str,
    req: Request,
    hits: list[Hit],
    fresh: Freshness,
    status: dict[str, Any],
    extra_meta: dict[str, Any],
    notes: list[str],
) -> ToolResult:
    title = "Semantic" if mode == "semantic" else "Hybrid"
    out = [f"{title} results for: {req.query}"]
    if not status["ready"]:
        out.append(
            f"Note: the index is still building ({status['indexed_files']} file(s) indexed, "
            f"{status['pending_files']} pending); results cover indexed files only."
        )
    terms = set(bm25.query_terms(req.query))
    results: list[dict[str, Any]] = []
    anchors: list[str] = []
    for rank, h in enumerate(hits, 1):
        cur = fresh.files.get(h.path)
        lines = cur[1] if cur else []
        if mode == "hybrid":
            evidence = ", ".join(f"{ch} #{r}" for ch, r in h.extra["channels"].items())
            label = f"score {h.score:.4f}; {evidence}"
        else:
            label = f"score {h.score:.4f}" + (
                "; re-scored: file changed since indexing" if h.extra.get("rescored") else ""
            )
        out.append("")
        out.append(f"{rank}. {shown_name(h.path)}:{h.start_line}-{h.end_line} ({label})")
        lo, hi = _window(lines, h.start_line, h.end_line, terms, req.context)
        for n in range(lo, min(hi, len(lines)) + 1):
            out.append(f"{n:>6} | {_cut(lines[n - 1])}")
        results.append(
            {"path": h.path, "start_line": h.start_line, "end_line": h.end_line, "score": h.score, **h.extra}
        )
        anchors.append(f"{h.path}:{h.start_line}-{h.end_line}")
    out.append("")
    out.append(
        f"{len(hits)} result(s); {status['indexed_chunks']} chunk(s) indexed in {status['indexed_files']} file(s)"
    )
    if status["truncated"]:
        out.append("Warning: index caps left files out of the index (see metadata.index.skipped).")
    out.extend(notes)
    meta: dict[str, Any] = {
        "mode": mode,
        **extra_meta,
        "index": status,
        "freshness": fresh.to_json(),
        "source_anchors": anchors,
        "results": results,
        "returned_results": len(hits),
    }
    if notes:
        meta["notes"] = notes
    return ToolResult.success(NAME, "\n".join(out), meta)


# --- the runners -------------------------------------------------------------------------------------


async def run_mode(ctx: ToolContext, mode: str, params: Any) -> ToolResult:
    if mode not in ("semantic", "hybrid"):
        raise InvalidArgument(f"retrieval serves modes 'semantic' and 'hybrid', not {mode!r}")
    ws = ctx.workspace
    req = parse_request(ws, mode, params)
    index, created = session_index(ctx)
    wait_s = config_from_services(ctx.services).first_query_wait_s if created else 0.0
    setting = grep.engine_setting(ctx)
    cache = bm25_cache(ctx) if mode == "hybrid" else None

    def work(guard: grep.Guard) -> ToolResult:
        if wait_s > 0:
            index.wait_ready(min(wait_s, max(0.0, ctx.remaining_s() / 2)))
        fresh = Freshness(ws)
        notes: list[str] = []
        qvec = index.embed([req.query])[0]
        guard.check()
        params_meta: dict[str, Any] = {
            "embedder": index.status()["embedder"],
            "dimensions": int(qvec.shape[0]),
            "chunk_lines": chunking.CHUNK_LINES,
        }
        if mode == "semantic":
            hits = semantic_hits(index, req, fresh, qvec, guard)
            extra = {"algorithm": "cosine", "parameters": params_meta}
        else:
            assert cache is not None
            hits, counts = hybrid_hits(
                ws, index, req, fresh, qvec, guard, setting=setting, bm25_cache=cache, notes=notes
            )
            params_meta["rrf_k"] = hybrid.RRF_K
            extra = {"algorithm": "rrf", "parameters": params_meta, "channels": counts}
        if fresh.stale_paths:
            index.refresh(sorted(fresh.stale_paths))
        return render(mode, req, hits, fresh, index.status(), extra, notes)

    return await in_thread(ctx, f"search.{mode}", work)
