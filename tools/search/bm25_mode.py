"""The bm25 mode: narrow candidates with grep, read them within limits, rank chunks (SPEC Q-5).

Limits are counted, never silent: ≤ 256 candidate files (lexically first, ``candidate_truncated``),
files over 512 KiB skipped (``oversized_files``), ≤ 16 MiB read in total (``scan.truncated``),
≤ 2 results per file, 8 concurrent reads. Candidates come from a case-insensitive grep for the
query terms (longest first); if that grep fails, a glob listing is used (``used_glob_fallback``).
"""

from __future__ import annotations

import hashlib
import os
import stat as stat_mod
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kernel.beneath import O_READ
from kernel.errors import Cancelled, InvalidArgument, Timeout, ToolError
from kernel.workspace import Workspace
from tools.search import bm25
from tools.search.grep import Guard, build_query, pick_engine
from tools.search.grep_local import beneath_of, is_local
from tools.search.grep_py import UTF8_BOM, decode_text
from tools.shown_names import shown_name

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


def _read_local(ws: Workspace, path: str) -> bytes:
    """A candidate's bytes in a local workspace: opened beneath the root with no symlink followed
    anywhere on the way (race-free, ``kernel.beneath``), regular files only, never blocking."""
    fd = beneath_of(ws).open_strict(path, O_READ)
    try:
        if not stat_mod.S_ISREG(os.fstat(fd).st_mode):
            raise IsADirectoryError(f"{path} is not a regular file")
        parts: list[bytes] = []
        size = 0
        while size <= MAX_FILE_BYTES and (chunk := os.read(fd, MAX_FILE_BYTES + 1 - size)):
            parts.append(chunk)
            size += len(chunk)
        return b"".join(parts)
    finally:
        os.close(fd)


def _pick(
    corpus: bm25.Corpus, terms: list[str], paths: list[str], limit: int
) -> list[tuple[str, int, int, float]]:
    """The best ``limit`` chunks, at most ``MAX_RESULTS_PER_FILE`` per file: (path, start, end, score).

    Order: score desc, then path, then start line — the corpus' chunk order, because the files
    were indexed in lexical path order (candidates are sorted).
    """
    ranked, scores = corpus.ranked(terms)
    per_file: dict[int, int] = {}
    picked: list[tuple[str, int, int, float]] = []
    file_of = corpus.file_of
    for c in ranked.tolist():
        f = int(file_of[c])
        if per_file.get(f, 0) >= MAX_RESULTS_PER_FILE:
            continue
        per_file[f] = per_file.get(f, 0) + 1
        start, end = corpus.ranges[c]
        picked.append((paths[f], start, end, float(scores[c])))
        if len(picked) >= limit:
            break
    return picked


def _best_lines(
    picked: list[tuple[str, int, int, float]],
    selected: list[str],
    blobs: list[bytes | None],
    terms: list[str],
    vocab: bm25.Vocabulary,
) -> list[tuple[list[str], int]]:
    """For each picked chunk: the file's lines and the first line holding the most query terms.

    A line's term count comes from the vocabulary (a word holds term ``t`` iff ``t``'s token id
    is among the word's token ids), which equals tokenizing the line, without tokenizing it.
    """
    data_by_path = dict(zip(selected, blobs, strict=True))
    wanted = {vocab.token_ids[t] for t in terms if t in vocab.token_ids}
    get = vocab.get
    findall = bm25.WORD_RE.findall
    word_hits: dict[int, frozenset[int]] = {}

    def hits_of(wid: int | None) -> frozenset[int]:
        if wid is None:
            return frozenset()
        got = word_hits.get(wid)
        if got is None:
            got = word_hits[wid] = frozenset(wanted.intersection(vocab.word_tokens(wid)))
        return got

    texts: dict[str, list[str]] = {}
    out: list[tuple[list[str], int]] = []
    for p, start, end, _ in picked:
        lines = texts.get(p)
        if lines is None:
            text = decode_text(data_by_path[p] or b"") or ""
            lines = texts[p] = bm25.split_lines(text)
        best, best_hits = start, -1
        for n in range(start, end + 1):
            found: set[int] = set()
            for w in findall(lines[n - 1]):
                found.update(hits_of(get(w)))
            hits = len(found)
            if hits > best_hits:
                best, best_hits = n, hits
        out.append((lines, best))
    return out


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
    local = is_local(ws)
    for p in paths:
        guard.check()
        try:
            size = beneath_of(ws).lstat_strict(p).st_size if local else ws.stat(p).size
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
            return _read_local(ws, p) if local else ws.read_bytes(p)
        except (ToolError, OSError):
            return None

    if local:  # plain reads of small files: a thread pool costs more than it saves
        blobs = [read(p) for p in selected]
    else:
        with ThreadPoolExecutor(max_workers=READ_CONCURRENCY) as pool:
            blobs = list(pool.map(read, selected))
    guard.check()

    indexed: list[tuple[str, bm25.FileIndex]] = []
    keys: list[tuple[str, bytes]] = []
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
                idx = bm25.index_text(text, cache.vocab, data if not data.startswith(UTF8_BOM) else None)
                cache.put(key, idx)
            scan["read_files"] += 1
            scan["scanned_bytes"] += len(data)
            indexed.append((p, idx))
            keys.append(key)
        corpus = cache.corpus(tuple(keys), [i for _, i in indexed])
        n_chunks = corpus.n
        picked = _pick(corpus, terms, [p for p, _ in indexed], limit) if n_chunks else []
        best_lines = _best_lines(picked, selected, blobs, terms, cache.vocab)
    scan["scored_chunks"] = n_chunks

    out = [f"BM25 results for: {query}"]
    results: list[dict[str, Any]] = []
    anchors: list[str] = []
    for rank, ((p, start, end, score), (lines, best)) in enumerate(zip(picked, best_lines, strict=True), 1):
        lo, hi = max(start, best - context), min(end, best + context)
        out.append("")
        out.append(f"{rank}. {shown_name(p)}:{start}-{end} (score {score:.4f})")
        for n in range(lo, hi + 1):
            line = lines[n - 1]
            line = line[:-1] if line.endswith("\r") else line
            out.append(f"{n:>6} | {_cut(line)}")
        results.append({"path": p, "start_line": start, "end_line": end, "score": score})
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
