"""Benchmark the search tool against its peers on the Python standard library tree.

Prints, in one run:
- grep ``content`` and ``files_with_matches`` end to end through the tool (rg engine and pure-Python
  engine) against ``rg`` run directly on the same query (targets: ≤ 1.5× rg with the rg engine,
  ≤ 5× with the Python engine);
- bm25 latency cold (new session: grep narrowing, reads, chunking, tokenizing, scoring) and warm
  (same session: cached word ids), end to end; and the scoring core on the very same chunks
  against ``rank-bm25`` (BM25Okapi) and ``bm25s`` (method "lucene", which has our IDF), given the
  chunks already tokenized (their index + score vs our index + score, which includes tokenizing).

Run: ``.venv/bin/python bench/search.py`` (needs the ``bench`` extra: rank-bm25, bm25s).
"""

from __future__ import annotations

import asyncio
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any

# bench/ holds scripts named like project packages (bench/kernel.py): never import from here.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from kernel.testing import make_context  # noqa: E402
from kernel.workspace import LocalWorkspace  # noqa: E402
from tools.search import TOOL, bm25  # noqa: E402
from tools.search.bm25_mode import MAX_CANDIDATE_FILES, MAX_FILE_BYTES, MAX_TOTAL_BYTES, check_query  # noqa: E402
from tools.search.grep import Guard, build_query, pick_engine  # noqa: E402
from tools.search.grep_py import decode_text  # noqa: E402

GREP_QUERIES = [r"def \w+\(self", "import asyncio", r"raise ValueError\("]
BM25_QUERIES = ["parse http response headers", "thread pool executor shutdown", "json decode error position"]
REPEATS = 5


def copy_stdlib() -> Path:
    src = Path(sysconfig.get_paths()["stdlib"])
    dst = Path(tempfile.mkdtemp(prefix="a3s-bench-")) / "stdlib"
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("site-packages", "__pycache__"), symlinks=True)
    return dst


def best(times: list[float]) -> float:
    return statistics.median(times)


def time_rg(root: Path, args: list[str]) -> float:
    times = []
    for _ in range(REPEATS):
        t = time.perf_counter()
        subprocess.run(["rg", "--no-config", *args], cwd=root, capture_output=True, check=False)
        times.append(time.perf_counter() - t)
    return best(times)


async def time_tool(
    ws: LocalWorkspace,
    args: dict[str, Any],
    engine: str,
    state: dict[str, Any] | None = None,
    repeats: int = REPEATS,
) -> tuple[float, Any]:
    times = []
    res = None
    for _ in range(repeats):
        ctx = make_context(
            ws,
            services={"search_engine": engine},
            timeout_s=600,
            session_state=state if state is not None else {},
        )
        t = time.perf_counter()
        res = await TOOL.run(ctx, TOOL.validate(args))
        times.append(time.perf_counter() - t)
    return best(times), res


def chunk_texts(ws: LocalWorkspace, query: str) -> list[str]:
    """The chunks the bm25 mode scores for ``query`` (same candidate rules), as plain text."""
    terms = check_query(query)
    pattern = "|".join(sorted(terms, key=lambda t: (-len(t), t)))
    q = build_query(ws, pattern, path="", include=None, case_sensitive=False, context=0)
    import threading

    scan = pick_engine("auto", ws, q).counts(ws, q, Guard(600, threading.Event(), "bench"))
    chunks: list[str] = []
    total = 0
    for p in sorted(scan.counts)[:MAX_CANDIDATE_FILES]:
        data = ws.read_bytes(p)
        if len(data) > MAX_FILE_BYTES:
            continue
        if total + len(data) > MAX_TOTAL_BYTES:
            break
        total += len(data)
        lines = bm25.split_lines(decode_text(data) or "")
        for c in range(min(-(-len(lines) // bm25.CHUNK_LINES), bm25.MAX_CHUNKS_PER_FILE)):
            chunks.append("\n".join(lines[c * 80 : c * 80 + 80]))
    return chunks


def bench_scoring(chunks: list[str], query: str) -> dict[str, float]:
    import bm25s
    import numpy as np
    from rank_bm25 import BM25Okapi

    terms = bm25.query_terms(query)
    out: dict[str, float] = {}
    # Peers get our tokens, produced with a per-word cache (the fair, fast way to tokenize).
    t = time.perf_counter()
    cache: dict[str, list[str]] = {}
    tokenized = []
    for c in chunks:
        toks: list[str] = []
        for w in bm25.WORD_RE.findall(c):
            got = cache.get(w)
            if got is None:
                got = cache[w] = bm25.tokenize_word(w)
            toks.extend(got)
        tokenized.append(toks)
    out["tokenize for peers (cached words)"] = time.perf_counter() - t

    # ours, cold: index (tokenizing included) + score; warm: score only.
    t = time.perf_counter()
    vocab = bm25.Vocabulary()
    files = [bm25.index_lines(c.split("\n"), vocab) for c in chunks]
    ours, _ = bm25.score(files, terms, vocab)
    out["ours cold (tokenize+index+score)"] = time.perf_counter() - t
    t = time.perf_counter()
    for _ in range(REPEATS):
        ours, _ = bm25.score(files, terms, vocab)
    out["ours warm (score)"] = (time.perf_counter() - t) / REPEATS

    t = time.perf_counter()
    okapi = BM25Okapi(tokenized, k1=1.2, b=0.75)
    okapi.get_scores(terms)
    out["rank-bm25 cold (index+score)"] = time.perf_counter() - t
    t = time.perf_counter()
    for _ in range(REPEATS):
        okapi.get_scores(terms)
    out["rank-bm25 warm (score)"] = (time.perf_counter() - t) / REPEATS

    t = time.perf_counter()
    retriever = bm25s.BM25(k1=1.2, b=0.75, method="lucene")
    retriever.index(tokenized, show_progress=False)
    s_scores = retriever.get_scores(terms)
    out["bm25s cold (index+score)"] = time.perf_counter() - t
    t = time.perf_counter()
    for _ in range(REPEATS):
        s_scores = retriever.get_scores(terms)
    out["bm25s warm (score)"] = (time.perf_counter() - t) / REPEATS

    mine = np.zeros(len(chunks))
    for s in ours:
        mine[s.file] = s.score
    # Lucene's BM25 drops the constant (k1 + 1) factor; otherwise (same IDF) the scores must agree.
    theirs = np.asarray(s_scores, dtype=np.float64) * (bm25.K1 + 1.0)
    out["max rel diff ours vs bm25s*(k1+1)"] = (
        float(np.max(np.abs(mine - theirs) / np.maximum(theirs, 1e-9))) if len(chunks) else 0.0
    )
    return out


async def main() -> int:
    if shutil.which("rg") is None:
        print("rg is not on PATH", file=sys.stderr)
        return 1
    root = copy_stdlib()
    try:
        ws = LocalWorkspace(root, writable=False)
        n_files = sum(1 for _ in root.rglob("*") if _.is_file())
        print(f"tree: {root} ({n_files} files), repeats={REPEATS}, median times\n")
        print(
            f"{'grep query':<24} {'mode':<19} {'rg direct':>10} {'tool/rg':>10} {'ratio':>6} {'tool/py':>10} {'ratio':>6}"
        )
        for query in GREP_QUERIES:
            for mode, rg_args in (("content", ["-n"]), ("files_with_matches", ["-l"])):
                direct = time_rg(root, [*rg_args, "--", query])
                args = {"mode": "grep", "query": query, "output_mode": mode}
                via_rg, _ = await time_tool(ws, args, "rg")
                via_py, _ = await time_tool(ws, args, "python", repeats=2)
                print(
                    f"{query:<24} {mode:<19} {direct * 1000:>8.1f}ms {via_rg * 1000:>8.1f}ms {via_rg / direct:>5.2f}x"
                    f" {via_py * 1000:>8.1f}ms {via_py / direct:>5.2f}x"
                )
        print()
        print(f"{'bm25 query (end to end)':<34} {'cold':>9} {'warm':>9} {'files':>6} {'chunks':>7}")
        for query in BM25_QUERIES:
            args = {"mode": "bm25", "query": query}
            cold, res = await time_tool(ws, args, "auto", None, repeats=3)
            state: dict[str, Any] = {}
            await time_tool(ws, args, "auto", state, repeats=1)
            warm, res = await time_tool(ws, args, "auto", state, repeats=3)
            scan = res.metadata["scan"]
            print(
                f"{query:<34} {cold * 1000:>7.1f}ms {warm * 1000:>7.1f}ms {scan['read_files']:>6} {scan['scored_chunks']:>7}"
            )
        print()
        for query in BM25_QUERIES:
            chunks = chunk_texts(ws, query)
            figures = bench_scoring(chunks, query)
            print(f"scoring core, same {len(chunks)} chunks, query {query!r}:")
            for name, value in figures.items():
                unit = "" if name.startswith("max") else "ms"
                shown = f"{value:.2e}" if name.startswith("max") else f"{value * 1000:.1f}"
                print(f"  {name:<34} {shown}{unit}")
    finally:
        shutil.rmtree(root.parent, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
