"""The bm25 mode: narrow candidates with grep, read them within limits, rank chunks (SPEC Q-5).

Limits are counted, never silent: ≤ 256 candidate files (lexically first, ``candidate_truncated``),
files over 512 KiB skipped (``oversized_files``), ≤ 16 MiB read in total (``scan.truncated``),
≤ 2 results per file, 8 concurrent reads. Candidates come from a case-insensitive grep for the
query terms (longest first); if that grep fails, a glob listing is used (``used_glob_fallback``).
"""

from __future__ import annotations

import hashlib
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kernel.errors import Cancelled, InvalidArgument, Timeout, ToolError
from kernel.workspace import Workspace
from tools.search import bm25
from tools.search.grep import Guard, build_query, pick_engine
from tools.search.grep_py import decode_text

MAX_QUERY_BYTES = 2048
MAX_QUERY_TERMS = 32
DEFAULT_LIMIT = 10
MAX_LIMIT = 25
DEFAULT_CONTEXT = 2
MAX_CONTEXT = 8
MAX_CANDIDATE_FILES = 256
MAX_FILE_BYTES = 512 * 1024
MAX_TOTAL_BYTES = 16 * 1024 * 1024
MAX_RESULTS_PER_FILE = 2
READ_CONCURRENCY = 8
MAX_RENDERED_LINE_BYTES = 500
SESSION_KEY = "search.bm25"


def check_query(query: str) -> list[str]:
    if len(query.encode("utf-8", "surrogatepass")) > MAX_QUERY_BYTES:
        raise InvalidArgument(f"bm25 query is longer than {MAX_QUERY_BYTES} bytes")
    terms = bm25.query_terms(query)
    if not terms:
        raise InvalidArgument(
            "bm25 query has no words (only punctuation or symbols); use mode 'grep' to search for them"
        )
    if len(terms) > MAX_QUERY_TERMS:
        raise InvalidArgument(
            f"bm25 query has {len(terms)} unique terms; at most {MAX_QUERY_TERMS} are allowed"
        )
    return terms


def _cut(text: str) -> str:
    raw = text.encode("utf-8", "surrogatepass")
    if len(raw) <= MAX_RENDERED_LINE_BYTES:
        return text
    return raw[:MAX_RENDERED_LINE_BYTES].decode("utf-8", "ignore") + "…"


def _candidates(
    ws: Workspace, terms: list[str], path: str, include: str | None, setting: str, guard: Guard
) -> tuple[list[str], dict[str, Any]]:
    pattern = "|".join(sorted(terms, key=lambda t: (-len(t), t)))
    q = build_query(ws, pattern, path=path, include=include, case_sensitive=False, context=0)
    info = {
        "matching_files": 0,
        "selected_files": 0,
        "backend_truncated": False,
        "candidate_truncated": False,
        "used_glob_fallback": False,
    }
    try:
        scan = pick_engine(setting, ws, q).counts(ws, q, guard)
        paths = sorted(scan.counts)
        info["backend_truncated"] = scan.truncated
    except (Cancelled, Timeout, InvalidArgument):
        raise
    except ToolError:
        from tools.search.glob import list_files

        files, cut = list_files(ws, q.base, setting, guard) if not q.base_is_file else ([(q.base, 0)], False)
        paths = sorted(p for p, _ in files if q.included(p))
        info["used_glob_fallback"] = True
        info["backend_truncated"] = cut
    info["matching_files"] = len(paths)
    if len(paths) > MAX_CANDIDATE_FILES:
        info["candidate_truncated"] = True
        paths = paths[:MAX_CANDIDATE_FILES]
    info["selected_files"] = len(paths)
    return paths, info


def run_bm25(
    ws: Workspace,
    *,
    query: str,
    path: str,
    include: str | None,
    limit: int,
    context: int,
    setting: str,
    guard: Guard,
    cache: bm25.Bm25Cache,
) -> tuple[str, dict[str, Any]]:
    """Blocking: the bm25 mode's output text and metadata."""
    terms = check_query(query)
    paths, cand = _candidates(ws, terms, path, include, setting, guard)
    scan = {
        "read_files": 0,
        "failed_reads": 0,
        "oversized_files": 0,
        "scanned_bytes": 0,
        "scored_chunks": 0,
        "truncated": False,
    }
    selected: list[str] = []
    total = 0
    for p in paths:
        guard.check()
        try:
            size = ws.stat(p).size
        except (ToolError, OSError):
            scan["failed_reads"] += 1
            continue
        if size > MAX_FILE_BYTES:
            scan["oversized_files"] += 1
            continue
        if total + size > MAX_TOTAL_BYTES:
            scan["truncated"] = True
            break
        total += size
        selected.append(p)

    def read(p: str) -> bytes | None:
        if guard.stop:
            return None
        try:
            return ws.read_bytes(p)
        except (ToolError, OSError):
            return None

    with ThreadPoolExecutor(max_workers=READ_CONCURRENCY) as pool:
        blobs = list(pool.map(read, selected))
    guard.check()

    texts: dict[str, list[str]] = {}
    indexed: list[tuple[str, bm25.FileIndex]] = []
    with cache.lock:
        cache.maybe_reset()
        for p, data in zip(selected, blobs, strict=True):
            guard.check()
            if data is None:
                scan["failed_reads"] += 1
                continue
            if len(data) > MAX_FILE_BYTES:
                scan["oversized_files"] += 1
                continue
            key = (p, hashlib.blake2b(data, digest_size=16).digest())
            idx = cache.get(key)
            if idx is None:
                text = decode_text(data)
                if text is None:
                    continue  # binary
                lines = bm25.split_lines(text)
                texts[p] = lines
                idx = bm25.index_lines(lines, cache.vocab)
                cache.put(key, idx)
            scan["read_files"] += 1
            scan["scanned_bytes"] += len(data)
            indexed.append((p, idx))
        scored, n_chunks = bm25.score([i for _, i in indexed], terms, cache.vocab)
    scan["scored_chunks"] = n_chunks

    ranked = sorted(
        scored, key=lambda s: (-s.score, indexed[s.file][0], indexed[s.file][1].ranges[s.chunk][0])
    )
    per_file: dict[str, int] = {}
    picked: list[bm25.ScoredChunk] = []
    for s in ranked:
        p = indexed[s.file][0]
        if per_file.get(p, 0) >= MAX_RESULTS_PER_FILE:
            continue
        per_file[p] = per_file.get(p, 0) + 1
        picked.append(s)
        if len(picked) >= limit:
            break

    data_by_path = dict(zip(selected, blobs, strict=True))
    term_set = set(terms)
    out = [f"BM25 results for: {query}"]
    results: list[dict[str, Any]] = []
    anchors: list[str] = []
    for rank, s in enumerate(picked, 1):
        p, idx = indexed[s.file]
        start, end = idx.ranges[s.chunk]
        lines = texts.get(p)
        if lines is None:
            text = decode_text(data_by_path[p] or b"") or ""
            lines = texts[p] = bm25.split_lines(text)
        best, best_hits = start, -1
        for n in range(start, end + 1):
            hits = len(term_set.intersection(bm25.tokenize(lines[n - 1])))
            if hits > best_hits:
                best, best_hits = n, hits
        lo, hi = max(start, best - context), min(end, best + context)
        out.append("")
        out.append(f"{rank}. {p}:{start}-{end} (score {s.score:.4f})")
        for n in range(lo, hi + 1):
            line = lines[n - 1]
            line = line[:-1] if line.endswith("\r") else line
            out.append(f"{n:>6} | {_cut(line)}")
        results.append({"path": p, "start_line": start, "end_line": end, "score": s.score})
        anchors.append(f"{p}:{start}-{end}")
    out.append("")
    files_read = scan["read_files"]
    out.append(f"{len(picked)} result(s); {files_read} file(s) read; {n_chunks} chunk(s) scored")
    if cand["candidate_truncated"] or cand["backend_truncated"] or scan["truncated"]:
        out.append("Warning: search limits truncated the candidate corpus.")
    meta: dict[str, Any] = {
        "algorithm": "bm25",
        "parameters": {
            "engine": "a3s_vec_fts",
            "tokenizer": "whitespace",
            "chunk_lines": bm25.CHUNK_LINES,
            "k1": bm25.K1,
            "b": bm25.B,
            "scorer": "numpy",
        },
        "query_terms": terms,
        "candidate_search": cand,
        "scan": scan,
        "source_anchors": anchors,
        "results": results,
        "returned_results": len(picked),
    }
    return "\n".join(out), meta
