"""search bm25 (SPEC Q-5, REFERENCE 4.4): tokenizer vectors, BM25 numbers, ranking rules, limits, format."""

from __future__ import annotations

import itertools
import math
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from kernel.errors import InvalidArgument
from kernel.testing import make_context
from kernel.workspace import LocalWorkspace
from tools.search import TOOL, bm25
from tools.search.bm25_mode import MAX_CANDIDATE_FILES


def write(root: Path, rel: str, text: str | bytes) -> None:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        p.write_bytes(text)
    else:
        p.write_text(text, encoding="utf-8")


async def call(root: Path, args: dict[str, Any], session_state: dict[str, Any] | None = None) -> Any:
    ctx = make_context(LocalWorkspace(root), session_state=session_state)
    return await TOOL.run(ctx, TOOL.validate({"mode": "bm25", **args}))


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("HTTPServer2", ["httpserver2", "http", "server", "2"]),
        ("HTTPServer", ["httpserver", "http", "server"]),
        ("get_user_name", ["get_user_name", "get", "user", "name"]),
        (
            "parseJSONResponse_v2",
            ["parsejsonresponse_v2", "parsejsonresponse", "v2", "parse", "json", "response", "v", "2"],
        ),
        ("__init__", ["__init__", "init"]),
        ("camelCase snake_case", ["camelcase", "camel", "case", "snake_case", "snake"]),
        ("utf8Decoder", ["utf8decoder", "utf", "8", "decoder"]),
        ("a-b.c", ["a", "b", "c"]),
        ("用户名称", ["用", "户", "用户", "名", "户名", "称", "名称"]),
        ("open文件x", ["open", "文", "件", "文件", "x"]),
        ("Ünïcode Straße", ["ünïcode", "straße"]),
        ("!!! ... ;;;", []),
    ],
)
def test_q5_tokenizer_vectors(text: str, tokens: list[str]) -> None:
    """Q-5: lowercase word, then _ segments, then camel/acronym/digit splits, de-duplicated; CJK uni+bigrams."""
    assert list(dict.fromkeys(bm25.tokenize(text))) == tokens


def reference_bm25(docs: list[list[str]], query: list[str]) -> list[float]:
    """Okapi BM25 exactly as REFERENCE 4.4 states it, written the slow obvious way."""
    n = len(docs)
    avgdl = max(1.0, sum(len(d) for d in docs) / n)
    out = []
    for d in docs:
        tf = Counter(d)
        s = 0.0
        for t in query:
            df = sum(1 for x in docs if t in x)
            if not tf[t]:
                continue
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            s += idf * tf[t] * 2.2 / (tf[t] + 1.2 * (1 - 0.75 + 0.75 * len(d) / avgdl))
        out.append(s)
    return out


def test_q5_scores_equal_the_okapi_formula() -> None:
    texts = [
        "retry backoff retryPolicy\nexponential backoff",
        "circuit breaker opens after failures",
        "the retry loop retries a failed HTTPRequest with backoff " * 3,
        "unrelated text 用户名称",
    ]
    vocab = bm25.Vocabulary()
    files = [bm25.index_lines(bm25.split_lines(t), vocab) for t in texts]
    terms = bm25.query_terms("retry backoff http 用户")
    scored, n = bm25.score(files, terms, vocab)
    assert n == 4
    expected = reference_bm25([bm25.tokenize(t) for t in texts], terms)
    got = {s.file: s.score for s in scored}
    for i, e in enumerate(expected):
        if e > 0:
            assert got[i] == pytest.approx(e, rel=1e-12)
        else:
            assert i not in got


def test_q5_new_queries_on_a_loaded_corpus_score_like_the_formula() -> None:
    """Q-5: the corpus' inverted index answers every new query exactly like the formula — terms
    that only other corpora of the same vocabulary know, CJK runs that emit a token twice, terms
    absent everywhere, repeated queries and multi-chunk files alike."""
    texts = [
        "retry backoff retryPolicy\nexponential backoff",
        "circuit breaker opens after failures\n" * 100,  # two chunks
        "the retry loop retries a failed HTTPRequest with backoff " * 3,
        "unrelated text 用户用户名称 HTTP_server",
    ]
    vocab = bm25.Vocabulary()
    files = [bm25.index_lines(bm25.split_lines(t), vocab) for t in texts]
    corpus = bm25.Corpus(files, vocab)
    # another corpus grows the shared vocabulary after this one was built
    other = bm25.Corpus([bm25.index_lines(["zebraCrossing quokka retry"], vocab)], vocab)
    assert other.scores(["quokka"]).tolist() == [pytest.approx(math.log(1 + 0.5 / 1.5) * 2.2 / (1 + 1.2))]
    docs = []
    for t in texts:
        lines = bm25.split_lines(t)
        for c in range(0, len(lines), bm25.CHUNK_LINES):
            docs.append(bm25.tokenize("\n".join(lines[c : c + bm25.CHUNK_LINES])))
    assert corpus.n == len(docs) == 5
    for query in (
        "retry backoff",
        "用户",
        "breaker failures http",
        "zebra quokka",
        "server retry",
        "retry backoff",
    ):
        terms = bm25.query_terms(query)
        want = reference_bm25(docs, terms)
        got = corpus.scores(terms)
        assert got.tolist() == pytest.approx(want, rel=1e-12, abs=1e-300), query


def test_q5_chunks_are_80_lines_and_at_most_128_per_file() -> None:
    vocab = bm25.Vocabulary()
    idx = bm25.index_lines([f"l{i}" for i in range(200)], vocab)
    assert idx.ranges == ((1, 80), (81, 160), (161, 200))
    big = bm25.index_lines(["w"] * (128 * 80 + 50), vocab)
    assert len(big.ranges) == 128 and big.ranges[-1] == (10161, 10240)


async def test_q5_output_format_ranking_and_two_results_per_file(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    filler = "\n".join(f"filler line {i}" for i in range(75))
    # a.py: three chunks all mentioning the terms; only two may be returned.
    write(root, "a.py", "\n".join([filler + "\ntoken bucket rate limiter\n" + "x\n" * 4] * 3))
    write(root, "b.py", "def rate_limiter(): pass  # token bucket\n")
    write(root, "c.py", "def rate_limiter(): pass  # token bucket\n")  # same score as b: path breaks the tie
    write(root, "d.txt", "nothing relevant here\n")
    res = await call(root, {"query": "token bucket rateLimiter", "limit": 25, "context": 1})
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0] == "BM25 results for: token bucket rateLimiter"
    heads = [ln for ln in lines if re.match(r"^\d+\. ", ln)]
    assert all(re.fullmatch(r"\d+\. \S+:\d+-\d+ \(score \d+\.\d{4}\)", h) for h in heads)
    results = res.metadata["results"]
    assert [r["path"] for r in results].count("a.py") == 2
    scores = [r["score"] for r in results]
    assert scores == sorted(scores, reverse=True)
    for x, y in itertools.pairwise(results):
        if x["score"] == y["score"]:
            assert (x["path"], x["start_line"]) < (y["path"], y["start_line"])
    assert (
        lines[-1]
        == f"{len(results)} result(s); 3 file(s) read; {res.metadata['scan']['scored_chunks']} chunk(s) scored"
    )
    assert res.metadata["scan"]["scored_chunks"] == 4 + 1 + 1
    # The window is centred on the line with the most query terms, ± context.
    a_first = next(
        i for i, ln in enumerate(lines) if ln.startswith(tuple(f"{k}. a.py:" for k in range(1, 9)))
    )
    window = lines[a_first + 1 : a_first + 4]
    assert [w.split(" | ")[1] for w in window] == ["filler line 74", "token bucket rate limiter", "x"]
    assert re.fullmatch(r" {3}\d{3} \| filler line 74", window[0])  # "{n:>6} | text"
    meta = res.metadata
    assert meta["algorithm"] == "bm25"
    assert meta["parameters"]["chunk_lines"] == 80 and meta["parameters"]["tokenizer"] == "whitespace"
    assert meta["query_terms"] == ["token", "bucket", "ratelimiter", "rate", "limiter"]
    assert meta["candidate_search"]["matching_files"] == 3  # d.txt never matched the narrowing grep
    assert meta["returned_results"] == len(results)
    assert (
        meta["source_anchors"][0]
        == f"{results[0]['path']}:{results[0]['start_line']}-{results[0]['end_line']}"
    )


async def test_q5_query_validation_and_limits(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    write(root, "a.txt", "hello\n")
    with pytest.raises(InvalidArgument, match="grep"):
        await call(root, {"query": "!= && ->"})
    with pytest.raises(InvalidArgument, match="32"):
        await call(root, {"query": " ".join(f"w{i}x" for i in range(33))})
    with pytest.raises(InvalidArgument, match="2048"):
        await call(root, {"query": "a" * 2049})
    with pytest.raises(InvalidArgument, match="25"):
        await call(root, {"query": "hello", "limit": 26})
    with pytest.raises(InvalidArgument, match="8"):
        await call(root, {"query": "hello", "context": 9})
    with pytest.raises(InvalidArgument, match="cursor"):
        await call(root, {"query": "hello", "cursor": "x"})
    with pytest.raises(InvalidArgument, match="case_sensitive"):
        await call(root, {"query": "hello", "case_sensitive": True})


async def test_q5_scan_limits_are_counted_never_silent(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    write(root, "huge.txt", "needle\n" + "x" * (600 * 1024))
    for i in range(40):
        write(root, f"m{i:02d}.txt", ("needle " + "y" * 500 + "\n") * 900)  # ~450 KiB each, 18 MiB total
    res = await call(root, {"query": "needle"})
    scan = res.metadata["scan"]
    assert scan["oversized_files"] == 1
    assert scan["truncated"] is True and scan["scanned_bytes"] <= 16 * 1024 * 1024
    assert "Warning: search limits truncated the candidate corpus." in res.output


async def test_q5_candidates_capped_at_256_files(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    for i in range(MAX_CANDIDATE_FILES + 4):
        write(root, f"f{i:04d}.txt", f"alpha {i}\n")
    res = await call(root, {"query": "alpha"})
    cand = res.metadata["candidate_search"]
    assert cand["matching_files"] == MAX_CANDIDATE_FILES + 4
    assert cand["selected_files"] == MAX_CANDIDATE_FILES and cand["candidate_truncated"] is True
    assert res.output.endswith("Warning: search limits truncated the candidate corpus.")


async def test_q5_warm_cache_never_serves_stale_content(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    write(root, "a.txt", "alpha beta\n")
    write(root, "b.txt", "alpha\n")
    state: dict[str, Any] = {}
    first = await call(root, {"query": "beta"}, state)
    again = await call(root, {"query": "beta"}, state)
    assert first.output == again.output and first.metadata["results"][0]["path"] == "a.txt"
    write(root, "a.txt", "alpha\n")
    write(root, "b.txt", "alpha beta beta\n")
    after = await call(root, {"query": "beta"}, state)
    assert [r["path"] for r in after.metadata["results"]] == ["b.txt"]


async def test_q5_include_and_path_narrow_candidates(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    write(root, "src/a.py", "retry policy\n")
    write(root, "docs/a.md", "retry policy\n")
    res = await call(root, {"query": "retry", "include": "*.py"})
    assert [r["path"] for r in res.metadata["results"]] == ["src/a.py"]
    res = await call(root, {"query": "retry", "path": "docs"})
    assert [r["path"] for r in res.metadata["results"]] == ["docs/a.md"]
