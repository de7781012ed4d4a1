"""Querying the persistent index: BM25 top chunks, fresh snippets, bm25-mode output (SPEC Q-8, Q-7).

A query is the bm25 mode's (same validation, same tokens: ≤ 2048 bytes, ≤ 32 unique terms, limit
≤ 25, context ≤ 8, ≤ 2 results per file), run as a tantivy boolean query of one SHOULD term query
per token (never ``parse_query``: a token is never syntax), narrowed by ``path`` with a term on
the ``dir``/``path`` fields and by ``include`` after the fact. Invariants:

- every reader reloads the index before searching, so it sees the last commit of any writer on
  the same filesystem; an ``Index`` handle per directory is kept per process (tantivy readers are
  thread-safe; merged-away segments stay readable through their open mmaps);
- before a hit is returned its file is re-read and its digest compared with the indexed one
  (SPEC Q-7): a changed or deleted file's hits are dropped, counted (``freshness``) and the file
  queued for re-indexing — the index never shows text that is not in the file now;
- tantivy scores are BM25 with k1 1.2, b 0.75 and the bm25 mode's IDF, over all indexed chunks
  (its document lengths are quantized to one byte, so scores are close to, not equal to, the
  bm25 mode's over the same chunks).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernel.errors import ToolError
from kernel.workspace import Workspace
from tools.search import bm25
from tools.search.bm25_mode import MAX_RESULTS_PER_FILE, _cut
from tools.search.grep_py import decode_text
from tools.search.indexed import schema as sch
from tools.search.indexed import store
from tools.search.indexed.build import MAX_FILE_BYTES, digest
from tools.search.indexed.files import Reader, Unreadable
from tools.shown_names import shown_name

FIRST_FETCH = 64  # hits fetched on the first try; grows ×4 while filters leave too few
MAX_FETCH = 20_000

_INDEXES: dict[str, Any] = {}
_INDEXES_LOCK = threading.Lock()


def open_reader(directory: Path) -> Any:
    """The process' ``Index`` handle on ``directory``, reloaded to the last commit."""
    key = str(directory)
    with _INDEXES_LOCK:
        index = _INDEXES.get(key)
        if index is None:
            import tantivy

            index = _INDEXES[key] = tantivy.Index.open(str(directory / store.FTS_DIR))
    index.reload()
    return index


def forget_reader(directory: Path) -> None:
    with _INDEXES_LOCK:
        _INDEXES.pop(str(directory), None)


@dataclass(slots=True)
class Hit:
    path: str
    start: int
    end: int
    score: float
    digest: str


@dataclass(slots=True)
class Found:
    hits: list[tuple[Hit, list[str], int]]  # (hit, current lines of its file, best line)
    matched: int  # chunks matching the query in the index
    read_files: int = 0
    failed_reads: int = 0
    stale_dropped: int = 0
    stale_paths: set[str] = field(default_factory=set)


def build_query(index: Any, terms: list[str], base: str, base_is_file: bool) -> Any:
    import tantivy

    schema = index.schema
    body = tantivy.Query.boolean_query(
        [
            (tantivy.Occur.Should, tantivy.Query.term_query(schema, sch.F_BODY, t, index_option="freq"))
            for t in terms
        ]
    )
    if not base:
        return body
    where = tantivy.Query.term_query(schema, sch.F_PATH if base_is_file else sch.F_DIR, base)
    return tantivy.Query.boolean_query([(tantivy.Occur.Must, body), (tantivy.Occur.Must, where)])


def _candidates(searcher: Any, query: Any, limit: int, accept: Any) -> tuple[list[Hit], int, bool]:
    """Hits by (score desc, path, start) with ≤ 2 per file, enough for ``limit`` after freshness
    drops; (hits, matching chunks, exhausted)."""
    fetch = max(FIRST_FETCH, limit * 8)
    while True:
        result = searcher.search(query, fetch, count=True)
        total = int(result.count or 0)
        hits: list[Hit] = []
        for score, addr in result.hits:
            doc = searcher.doc(addr)
            path = doc[sch.F_PATH][0]
            if not accept(path):
                continue
            hits.append(
                Hit(
                    path, int(doc[sch.F_START][0]), int(doc[sch.F_END][0]), float(score), doc[sch.F_DIGEST][0]
                )
            )
        hits.sort(key=lambda h: (-h.score, h.path, h.start))
        per_file: dict[str, int] = {}
        kept = []
        for h in hits:
            if per_file.get(h.path, 0) < MAX_RESULTS_PER_FILE:
                per_file[h.path] = per_file.get(h.path, 0) + 1
                kept.append(h)
        exhausted = fetch >= total or fetch >= MAX_FETCH
        if len(kept) >= limit * 2 or exhausted:
            return kept, total, exhausted
        fetch = min(MAX_FETCH, fetch * 4)


def _best_line(
    lines: list[str], start: int, end: int, terms: list[str], words: dict[str, frozenset[str]]
) -> int:
    """The first line of the chunk holding the most query terms (the bm25 mode's window centre).

    A term is a lowercase substring of any line that holds it, so a line without one is skipped
    untokenized; the others are cut into words, each word's terms looked up in ``words`` (filled
    here, shared by the query's hits).
    """
    wanted = set(terms)
    findall = bm25.WORD_RE.findall
    best, best_hits = start, -1
    for n in range(start, min(end, len(lines)) + 1):
        line = lines[n - 1]
        low = line.lower()
        hits = 0
        if any(t in low for t in terms):
            found: set[str] = set()
            for w in findall(line):
                got = words.get(w)
                if got is None:
                    got = words[w] = frozenset(wanted.intersection(bm25.tokenize_word(w)))
                found |= got
            hits = len(found)
        if hits > best_hits:
            best, best_hits = n, hits
    return best


def search(
    ws: Workspace,
    directory: Path,
    terms: list[str],
    *,
    base: str,
    base_is_file: bool,
    accept: Any,
    limit: int,
    check: Any,
) -> Found:
    """The top ``limit`` fresh chunks for ``terms``; ``check()`` raises on deadline/cancel."""
    index = open_reader(directory)
    searcher = index.searcher()
    if not terms or searcher.num_docs == 0:
        return Found([], 0)
    query = build_query(index, terms, base, base_is_file)
    candidates, total, _ = _candidates(searcher, query, limit, accept)
    found = Found([], total)
    files: dict[str, tuple[str, list[str]] | None] = {}
    words: dict[str, frozenset[str]] = {}
    with Reader(ws) as reader:
        for hit in candidates:
            if len(found.hits) >= limit:
                break
            check()
            if hit.path not in files:
                files[hit.path] = _current(reader, hit.path, found)
            cur = files[hit.path]
            if cur is None or cur[0] != hit.digest:
                found.stale_dropped += 1
                found.stale_paths.add(hit.path)
                continue
            lines = cur[1]
            found.hits.append((hit, lines, _best_line(lines, hit.start, hit.end, terms, words)))
    return found


def _current(reader: Reader, path: str, found: Found) -> tuple[str, list[str]] | None:
    """(digest, lines) of the file now, or None when it is gone, unreadable or binary."""
    try:
        data, _, _ = reader.read(path, MAX_FILE_BYTES)
    except (FileNotFoundError, Unreadable, ToolError, OSError):
        found.failed_reads += 1
        return None
    found.read_files += 1
    text = decode_text(data)
    if text is None or len(data) > MAX_FILE_BYTES:
        return None
    return digest(data), bm25.split_lines(text)


def render(
    query: str, terms: list[str], found: Found, context: int, status: dict[str, Any]
) -> tuple[str, dict[str, Any]]:
    """The bm25 mode's output shape for indexed hits: text and metadata."""
    out = [f"Indexed BM25 results for: {query}"]
    if not status["ready"]:
        out.append(
            f"Note: the index is {status['state']} ({status['indexed_files']} file(s) indexed,"
            f" {status['pending_files']} pending); results cover the files committed so far."
        )
    results: list[dict[str, Any]] = []
    anchors: list[str] = []
    for rank, (hit, lines, best) in enumerate(found.hits, 1):
        lo, hi = max(hit.start, best - context), min(hit.end, best + context, len(lines))
        out.append("")
        out.append(f"{rank}. {shown_name(hit.path)}:{hit.start}-{hit.end} (score {hit.score:.4f})")
        for n in range(lo, hi + 1):
            line = lines[n - 1]
            line = line[:-1] if line.endswith("\r") else line
            out.append(f"{n:>6} | {_cut(line)}")
        results.append({"path": hit.path, "start_line": hit.start, "end_line": hit.end, "score": hit.score})
        anchors.append(f"{hit.path}:{hit.start}-{hit.end}")
    out.append("")
    out.append(
        f"{len(found.hits)} result(s); {found.read_files} file(s) read; {found.matched} chunk(s) matched"
        f" in an index of {status['indexed_chunks']} chunk(s) ({status['indexed_files']} file(s))"
    )
    if found.stale_dropped:
        out.append(
            f"Note: {found.stale_dropped} hit(s) dropped: their file changed since it was indexed"
            " (re-indexing it now)."
        )
    meta: dict[str, Any] = {
        "algorithm": "tantivy_bm25",
        "parameters": {
            "engine": "tantivy",
            "tokenizer": "a3s_code",
            "chunk_lines": sch.CHUNK_LINES,
            "k1": bm25.K1,
            "b": bm25.B,
        },
        "query_terms": terms,
        "scan": {
            "read_files": found.read_files,
            "failed_reads": found.failed_reads,
            "matched_chunks": found.matched,
            "truncated": False,
        },
        "index": status,
        "freshness": {
            "checked_files": found.read_files + found.failed_reads,
            "stale_dropped": found.stale_dropped,
        },
        "source_anchors": anchors,
        "results": results,
        "returned_results": len(found.hits),
    }
    return "\n".join(out), meta
