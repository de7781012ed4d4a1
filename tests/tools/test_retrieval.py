"""Workspace Retrieval: the session index, the semantic and hybrid modes (SPEC Q-6, Q-7).

Most tests use a deterministic keyword embedder (bag of bm25 tokens hashed into 64 dimensions) so
that ranking, freshness, readiness and caps are checked exactly and fast; the MiniLM route is
exercised end to end on a four-file workspace.
"""

from __future__ import annotations

import asyncio
import threading
import time
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kernel.errors import InvalidArgument
from kernel.result import ToolResult
from kernel.testing import make_context
from kernel.workspace import LocalWorkspace
from tools.search import bm25, build_search_tool
from tools.search.retrieval import (
    SESSION_KEY,
    Caps,
    RetrievalIndex,
    close_retrieval,
    embed_minilm,
    hybrid,
    retrieval_runners,
    run_retrieval_mode,
    start_retrieval,
)
from tools.search.retrieval.chunks import find_symbols

CAPS = ("search", "read")


class KeywordEmbedder:
    """Deterministic stand-in for a model: texts sharing words get close vectors.

    ``gate``: when set, every build-thread call after the first ``free_calls`` blocks until the gate
    opens (queries from other threads never block). ``delay_s`` slows every build call.
    """

    name = "test:keywords"
    dim = 64

    def __init__(
        self, *, gate: threading.Event | None = None, free_calls: int = 0, delay_s: float = 0.0
    ) -> None:
        self.gate = gate
        self.free_calls = free_calls
        self.delay_s = delay_s
        self.build_calls = 0

    def embed(self, texts: list[str]) -> np.ndarray:
        if threading.current_thread().name == "retrieval-index":
            self.build_calls += 1
            if self.gate is not None and self.build_calls > self.free_calls:
                assert self.gate.wait(30)
            if self.delay_s:
                time.sleep(self.delay_s)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            for tok in bm25.tokenize(text):
                out[i, zlib.crc32(tok.encode()) % self.dim] += 1.0
            if not out[i].any():
                out[i, 0] = 1.0
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


def tool_for(services: dict[str, Any]) -> Any:
    spec = build_search_tool(CAPS, True, retrieval_runners(services))
    assert spec is not None
    return spec


async def call(
    ws: LocalWorkspace, state: dict[str, Any], services: dict[str, Any], **args: Any
) -> ToolResult:
    spec = tool_for(services)
    ctx = make_context(ws, session_state=state, services=services)
    result = await spec.run(ctx, spec.validate(args))
    assert isinstance(result, ToolResult)
    return result


def services_with(emb: Any, **config: Any) -> dict[str, Any]:
    config.setdefault("first_query_wait_s", 30.0)
    return {"retrieval_embedder": emb, "retrieval_config": config}


def wait_until(pred: Any, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def ready_index(state: dict[str, Any]) -> RetrievalIndex:
    index = state[SESSION_KEY]
    assert index.wait_ready(30)
    return index


# --- mode exposure -----------------------------------------------------------------------------------


def test_q6_semantic_and_hybrid_offered_only_with_retrieval_and_a_route() -> None:
    svc = services_with(KeywordEmbedder())

    def modes(spec: Any) -> list[str]:
        return spec.json_schema["properties"]["mode"]["enum"]

    assert modes(build_search_tool(CAPS, False, retrieval_runners(svc))) == ["grep", "glob", "bm25"]
    # Retrieval enabled but no embedding route: the modes are not offered.
    assert retrieval_runners({"retrieval_config": {"route": "none"}}) == {}
    assert modes(
        build_search_tool(CAPS, True, retrieval_runners({"retrieval_config": {"route": "none"}}))
    ) == [
        "grep",
        "glob",
        "bm25",
    ]
    assert modes(tool_for(svc)) == ["grep", "glob", "bm25", "semantic", "hybrid"]
    # retrieval is a mode of `search`, never a separate "vector database" tool.
    assert set(retrieval_runners(svc)) == {"semantic", "hybrid"}
    with pytest.raises(InvalidArgument, match="Workspace Retrieval"):
        build_search_tool(CAPS, False, retrieval_runners(svc)).validate({"mode": "hybrid", "query": "x"})


# --- semantic ---------------------------------------------------------------------------------------------


@pytest.mark.skipif(
    not embed_minilm.available(), reason="all-MiniLM-L6-v2 weights missing; " + embed_minilm.INSTALL_HINT
)
async def test_q6_semantic_minilm_ranks_the_relevant_chunk_first(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "net/server.py": "import socket\n\ndef serve(port):\n    sock = socket.socket()\n    sock.bind(('', port))\n    sock.listen(5)\n    return sock.accept()\n",
            "cfg/load.py": "import json\n\ndef load(path):\n    with open(path) as fh:\n        return json.load(fh)\n",
            "kitchen/cake.md": "Preheat the oven. Mix flour, sugar and eggs, then bake for forty minutes.\n",
            "util/strings.py": "def shout(s):\n    return s.upper() + '!'\n",
        },
    )
    ws = LocalWorkspace(tmp_path)
    state: dict[str, Any] = {}
    svc = {"retrieval_config": {"route": "minilm", "first_query_wait_s": 60.0}}
    try:
        res = await call(
            ws,
            state,
            svc,
            mode="semantic",
            query="open a network socket and accept a client connection",
            limit=4,
        )
        assert res.exit_code == 0, res.output
        paths = [r["path"] for r in res.metadata["results"]]
        assert paths[0] == "net/server.py"
        assert res.metadata["index"]["ready"] and res.metadata["parameters"]["dimensions"] == 384
        scores = [r["score"] for r in res.metadata["results"]]
        assert scores == sorted(scores, reverse=True) and all(-1.0 <= s <= 1.0001 for s in scores)
        assert res.output.startswith("Semantic results for: open a network socket")
        assert "1. net/server.py:1-7 (score " in res.output and "     1 | import socket" in res.output
        res2 = await call(ws, state, svc, mode="semantic", query="baking a cake in the oven", limit=1)
        assert [r["path"] for r in res2.metadata["results"]] == ["kitchen/cake.md"]
    finally:
        close_retrieval(state)


async def test_q6_semantic_params_limits_and_scope(tmp_path: Path) -> None:
    write(
        tmp_path,
        {f"src/m{i}.py": f"def alpha_{i}():\n    return 'alpha beta'\n" for i in range(6)}
        | {"docs/a.md": "alpha beta\n"},
    )
    ws = LocalWorkspace(tmp_path)
    state: dict[str, Any] = {}
    svc = services_with(KeywordEmbedder())
    try:
        res = await call(ws, state, svc, mode="semantic", query="alpha beta", limit=3, context=0)
        assert res.metadata["returned_results"] == 3 and res.metadata["mode"] == "semantic"
        assert res.metadata["source_anchors"] == [
            f"{r['path']}:{r['start_line']}-{r['end_line']}" for r in res.metadata["results"]
        ]
        scoped = await call(ws, state, svc, mode="semantic", query="alpha beta", path="docs")
        assert [r["path"] for r in scoped.metadata["results"]] == ["docs/a.md"]
        inc = await call(ws, state, svc, mode="semantic", query="alpha beta", include="*.md", limit=25)
        assert [r["path"] for r in inc.metadata["results"]] == ["docs/a.md"]
        for bad, match in (
            ({"limit": 26}, "limit"),
            ({"context": 9}, "context"),
            ({"output_mode": "count"}, "output_mode"),
            ({"case_sensitive": True}, "case_sensitive"),
            ({"cursor": "abc"}, "cursor"),
            ({"path": "nope"}, "not found"),
        ):
            with pytest.raises(Exception, match=match):
                await call(ws, state, svc, mode="semantic", query="alpha", **bad)
    finally:
        close_retrieval(state)


# --- readiness and atomic publication -----------------------------------------------------------------------


async def test_q7_partial_readiness_is_reported_while_the_index_builds(tmp_path: Path) -> None:
    write(tmp_path, {f"f{i:02d}.txt": f"shared words file{i:02d}\n" for i in range(40)})
    ws = LocalWorkspace(tmp_path)
    gate = threading.Event()
    emb = KeywordEmbedder(gate=gate, free_calls=1)
    state: dict[str, Any] = {}
    svc = services_with(emb, first_query_wait_s=0.0)
    try:
        first = await call(ws, state, svc, mode="semantic", query="shared words", limit=25)
        index = state[SESSION_KEY]
        await asyncio.to_thread(wait_until, lambda: index.status()["indexed_files"] >= 16)
        res = await call(ws, state, svc, mode="semantic", query="shared words", limit=25)
        st = res.metadata["index"]
        assert first.metadata["index"]["ready"] is False
        assert st["state"] == "building" and st["ready"] is False and st["discovered_files"] == 40
        assert st["indexed_files"] == 16 and st["pending_files"] == 24
        assert "the index is still building (16 file(s) indexed, 24 pending)" in res.output
        published = {p for p in (f"f{i:02d}.txt" for i in range(40)) if index.record(p) is not None}
        assert len(published) == 16
        assert {r["path"] for r in res.metadata["results"]} <= published and res.metadata[
            "returned_results"
        ] == 16
        gate.set()
        assert index.wait_ready(30)
        done = await call(ws, state, svc, mode="semantic", query="shared words", limit=25)
        assert done.metadata["index"]["ready"] is True and done.metadata["index"]["indexed_files"] == 40
        assert done.metadata["index"]["pending_files"] == 0 and "still building" not in done.output
    finally:
        gate.set()
        close_retrieval(state)


def test_q7_each_file_is_published_atomically(tmp_path: Path) -> None:
    expected: dict[str, int] = {}
    files: dict[str, str] = {}
    for i in range(24):
        chunks = 1 + i % 4
        lines = (chunks - 1) * 80 + 5
        files[f"d/f{i:02d}.txt"] = "".join(f"common token line {n}\n" for n in range(lines))
        expected[f"d/f{i:02d}.txt"] = chunks
    write(tmp_path, files)
    emb = KeywordEmbedder(delay_s=0.03)
    index = RetrievalIndex(LocalWorkspace(tmp_path), emb)
    q = emb.embed(["common token line"])[0]
    partial_seen = 0
    violations: list[str] = []
    index.start()
    try:
        while True:
            st = index.status()
            hits = index.search(q, 10_000)
            seen: dict[str, int] = {}
            for h in hits:
                seen[h.path] = seen.get(h.path, 0) + 1
            violations += [f"{p}: {n}/{expected[p]}" for p, n in seen.items() if n != expected[p]]
            if 0 < len(seen) < len(expected):
                partial_seen += 1
            if st["ready"]:
                break
            time.sleep(0.002)
        assert not violations
        assert partial_seen > 0  # the reader really looked while files were being published
        assert index.status()["indexed_chunks"] == sum(expected.values())
    finally:
        index.close()


# --- hybrid ---------------------------------------------------------------------------------------------------


def test_q6_rrf_fusion_best_rank_per_channel_and_exact_identifier_first() -> None:
    channels = {
        "exact": [("z.py", 81)],
        "lexical": [("a.py", 1), ("b.py", 1), ("c.py", 1)],
        "symbol": [("a.py", 1)],
        # a.py appears twice: only its first (best) rank counts
        "semantic": [("a.py", 1), ("c.py", 1), ("b.py", 1), ("a.py", 1)],
    }
    fused = hybrid.fuse(channels)
    assert [(f.path, f.start_line) for f in fused] == [("z.py", 81), ("a.py", 1), ("b.py", 1), ("c.py", 1)]
    z, a, b, c = fused
    assert z.exact_identifier and not a.exact_identifier
    assert a.ranks == {"lexical": 1, "symbol": 1, "semantic": 1}
    assert a.score == pytest.approx(3 / 61)
    assert z.score == pytest.approx(1 / 61) and z.score < a.score  # exact first despite a lower score
    # b: lexical 2 + semantic 3; c: lexical 3 + semantic 2 → equal scores, ordered by path
    assert b.score == pytest.approx(1 / 62 + 1 / 63) == c.score
    tie = hybrid.fuse({"lexical": [("m.py", 81), ("m.py", 1)], "semantic": [("m.py", 1), ("m.py", 81)]})
    assert [f.start_line for f in tie] == [1, 81]  # equal score: start line breaks the tie


def test_q6_query_identifiers_and_definition_regexes() -> None:
    assert hybrid.query_identifiers("where is parse_config called from HttpServer.start and `run`?") == [
        "parse_config",
        "HttpServer",
        "start",
        "run",
    ]
    assert hybrid.query_identifiers("how do we retry failed requests") == []
    assert hybrid.query_identifiers("utf8 decoding of MAX_LEN") == ["utf8", "MAX_LEN"]
    found = {
        "a.py": ["async def fetch_all(x):", "class Store:", "fetch_all(1)"],
        "a.ts": [
            "export async function loadUser(id) {",
            "export const saveUser = (u) => {",
            "if (x) {",
            "  save(1);",
        ],
        "a.go": ["func (s *Server) Serve() error {", "type Config struct {"],
        "a.rs": ["pub(crate) fn parse(x: u8) {", "impl<T> Display for Wrapper<T> {", "pub struct Foo;"],
        "A.java": [
            "public class UserService {",
            "    public List<User> findAll(int n) {",
            "        return repo.findAll(n);",
        ],
        "a.c": ["static int parse_args(int argc, char **argv)", "  parse_args(1, 2);"],
        "README.md": ["def not_code():"],
    }
    got = {p: [s.name for s in find_symbols(p, lines)] for p, lines in found.items()}
    assert got == {
        "a.py": ["fetch_all", "Store"],
        "a.ts": ["loadUser", "saveUser"],
        "a.go": ["Serve", "Config"],
        "a.rs": ["parse", "Wrapper", "Foo"],
        "A.java": ["UserService", "findAll"],
        "a.c": ["parse_args"],
        "README.md": [],
    }


HYBRID_TREE = {
    "pkg/loader.py": "import json\n\n\ndef load_settings(path):\n    with open(path) as fh:\n        return json.load(fh)\n",
    "pkg/use.py": "from pkg.loader import load_settings\n\nCONFIG = load_settings('app.json')\n",
    "docs/guide.md": "# Guide\n\nTo load settings from disk, read the settings file from disk and load settings.\n",
    "docs/other.md": "Nothing relevant here at all.\n",
}


async def test_q6_hybrid_exact_identifier_hits_come_first(tmp_path: Path) -> None:
    write(tmp_path, HYBRID_TREE)
    ws = LocalWorkspace(tmp_path)
    state: dict[str, Any] = {}
    svc = services_with(KeywordEmbedder())
    try:
        res = await call(ws, state, svc, mode="hybrid", query="load_settings from disk", limit=10)
        assert res.exit_code == 0, res.output
        results = res.metadata["results"]
        flags = [r["exact_identifier"] for r in results]
        assert flags == sorted(flags, reverse=True) and flags[:2] == [True, True]
        exact_paths = {r["path"] for r in results if r["exact_identifier"]}
        assert exact_paths == {"pkg/loader.py", "pkg/use.py"}
        by_path = {r["path"]: r for r in results}
        assert set(by_path["pkg/loader.py"]["channels"]) == {"exact", "lexical", "symbol", "semantic"}
        assert "exact" not in by_path["docs/guide.md"]["channels"]
        for group in (True, False):
            scores = [r["score"] for r in results if r["exact_identifier"] is group]
            assert scores == sorted(scores, reverse=True)
        for r in results:
            assert r["score"] == pytest.approx(hybrid.rrf_score(r["channels"]))
        assert res.metadata["algorithm"] == "rrf" and res.metadata["parameters"]["rrf_k"] == 60
        assert res.metadata["channels"]["identifiers"] == 1
        assert "1. pkg/loader.py:1-6 (score " in res.output and "exact #" in res.output
        # A query without identifiers has no exact channel.
        plain = await call(ws, state, svc, mode="hybrid", query="load settings from disk")
        assert plain.metadata["channels"]["exact"] == 0
        assert not any(r["exact_identifier"] for r in plain.metadata["results"])
    finally:
        close_retrieval(state)


# --- freshness --------------------------------------------------------------------------------------------------


async def test_q7_stale_semantic_hits_are_rescored_or_dropped(tmp_path: Path) -> None:
    write(
        tmp_path, {"a.txt": "alpha beta gamma\n", "b.txt": "alpha beta delta\n", "c.txt": "unrelated words\n"}
    )
    ws = LocalWorkspace(tmp_path)
    state: dict[str, Any] = {}
    svc = services_with(KeywordEmbedder())
    try:
        before = await call(ws, state, svc, mode="semantic", query="alpha beta gamma")
        index = ready_index(state)
        scores = {r["path"]: r["score"] for r in before.metadata["results"]}
        assert before.metadata["results"][0]["path"] == "a.txt"
        (tmp_path / "a.txt").write_text("zeta eta theta\n")  # changed after indexing
        (tmp_path / "b.txt").unlink()  # deleted after indexing
        after = await call(ws, state, svc, mode="semantic", query="alpha beta gamma")
        fresh = after.metadata["freshness"]
        assert fresh["stale_rescored"] == 1 and fresh["stale_dropped"] == 1
        by_path = {r["path"]: r for r in after.metadata["results"]}
        assert "b.txt" not in by_path
        assert by_path["a.txt"]["rescored"] is True and by_path["a.txt"]["score"] < scores["a.txt"]
        assert "zeta eta theta" in after.output and "re-scored: file changed since indexing" in after.output
        # The stale files were queued for re-indexing: the index catches up.
        assert index.wait_ready(30)
        rec = index.record("a.txt")
        assert rec is not None and rec.digest != "" and index.record("b.txt") is None
        again = await call(ws, state, svc, mode="semantic", query="alpha beta gamma")
        assert again.metadata["freshness"]["stale_rescored"] == 0
        assert "rescored" not in {k for r in again.metadata["results"] for k in r}
    finally:
        close_retrieval(state)


async def test_q7_hybrid_discards_stale_index_evidence(tmp_path: Path) -> None:
    write(tmp_path, {"w.py": "def frobnicate_widget():\n    return 1\n", "x.py": "frobnicate_widget()\n"})
    ws = LocalWorkspace(tmp_path)
    state: dict[str, Any] = {}
    svc = services_with(KeywordEmbedder())
    try:
        await call(ws, state, svc, mode="hybrid", query="frobnicate_widget")
        ready_index(state)
        # w.py no longer defines or mentions it; only the index (symbol, semantic) still "knows" it.
        (tmp_path / "w.py").write_text("def other():\n    return 2\n")
        res = await call(ws, state, svc, mode="hybrid", query="frobnicate_widget definition")
        paths = [r["path"] for r in res.metadata["results"]]
        assert "w.py" not in paths and paths[0] == "x.py"
        assert res.metadata["freshness"]["stale_dropped"] >= 1
    finally:
        close_retrieval(state)


# --- caps and close ------------------------------------------------------------------------------------------


def test_q7_resource_caps_are_enforced_and_reported(tmp_path: Path) -> None:
    files = {f"s{i}.txt": f"small {i}\n" for i in range(5)}
    files["big.txt"] = "x" * 5000 + "\n"
    files["long.txt"] = "".join(f"line {n}\n" for n in range(300))  # 4 chunks
    files["bin.dat"] = "abc\x00def"
    write(tmp_path, files)
    ws = LocalWorkspace(tmp_path)

    def build(caps: Caps) -> dict[str, Any]:
        index = RetrievalIndex(ws, KeywordEmbedder(), caps)
        index.start()
        try:
            assert index.wait_ready(30)
            return index.status()
        finally:
            index.close()

    st = build(Caps(max_file_bytes=3000, max_files=4))
    assert st["skipped"]["oversized"] == 1 and st["skipped"]["over_file_cap"] == 3
    assert st["indexed_files"] + st["skipped"]["binary"] == 4 and st["truncated"] is True
    assert st["caps"]["max_files"] == 4 and st["caps"]["max_file_bytes"] == 3000

    st = build(Caps(max_total_bytes=3000))
    assert st["skipped"]["over_byte_cap"] >= 1 and st["usage"]["bytes"] <= 3000

    st = build(Caps(max_vectors=5))
    assert st["usage"]["vectors"] <= 5 and st["skipped"]["over_vector_cap"] >= 1 and st["truncated"]

    st = build(Caps(max_memory_bytes=2_500))
    assert 0 < st["usage"]["memory_bytes"] <= 2_500 and st["skipped"]["over_memory_cap"] >= 1

    st = build(Caps())
    assert st["truncated"] is False and st["indexed_files"] == 7 and st["skipped"]["binary"] == 1
    assert st["usage"]["vectors"] == 5 + 1 + 4 and st["usage"]["memory_bytes"] > 0


async def test_q7_caps_are_configurable_through_the_session(tmp_path: Path) -> None:
    write(tmp_path, {f"s{i}.txt": f"small words {i}\n" for i in range(6)})
    ws = LocalWorkspace(tmp_path)
    state: dict[str, Any] = {}
    svc = services_with(KeywordEmbedder(), caps={"max_files": 2})
    try:
        res = await call(ws, state, svc, mode="semantic", query="small words")
        st = res.metadata["index"]
        assert st["caps"]["max_files"] == 2 and st["skipped"]["over_file_cap"] == 4
        assert "Warning: index caps left files out of the index" in res.output
    finally:
        close_retrieval(state)


async def test_q7_closing_frees_every_vector(tmp_path: Path) -> None:
    write(tmp_path, {f"f{i}.txt": f"words {i}\n" for i in range(10)})
    ws = LocalWorkspace(tmp_path)
    state: dict[str, Any] = {}
    svc = services_with(KeywordEmbedder())
    await call(ws, state, svc, mode="semantic", query="words")
    index = ready_index(state)
    assert index.status()["usage"]["vectors"] == 10
    assert close_retrieval(state) is True and SESSION_KEY not in state
    st = index.status()
    assert st["state"] == "closed" and st["usage"] == {
        "files": 0,
        "bytes": 0,
        "vectors": 0,
        "memory_bytes": 0,
    }
    assert index._vecs is None and index.search(np.ones(64, np.float32), 10) == []
    assert close_retrieval(state) is False
    # A later call in the same session builds a fresh index.
    res = await call(ws, state, svc, mode="semantic", query="words")
    assert res.metadata["index"]["indexed_files"] == 10 and state[SESSION_KEY] is not index
    close_retrieval(state)


def test_q7_close_during_build_refuses_late_publication(tmp_path: Path) -> None:
    write(tmp_path, {f"f{i:02d}.txt": f"words {i}\n" for i in range(40)})
    gate = threading.Event()
    index = RetrievalIndex(LocalWorkspace(tmp_path), KeywordEmbedder(gate=gate, free_calls=1))
    index.start()
    wait_until(lambda: index.status()["indexed_files"] >= 16)
    closer = threading.Thread(target=index.close)
    closer.start()
    time.sleep(0.05)
    gate.set()  # the worker's blocked batch finishes after close began
    closer.join(15)
    assert not closer.is_alive()
    st = index.status()
    assert st["state"] == "closed" and st["usage"]["vectors"] == 0 and st["indexed_files"] == 0
    assert index._worker is not None and not index._worker.is_alive()


async def test_q6_run_retrieval_mode_entry_point(tmp_path: Path) -> None:
    write(tmp_path, {"a.txt": "alpha\n"})
    ws = LocalWorkspace(tmp_path)
    state: dict[str, Any] = {}
    svc = services_with(KeywordEmbedder())
    spec = tool_for(svc)
    ctx = make_context(ws, session_state=state, services=svc)
    try:
        res = await run_retrieval_mode(ctx, "semantic", spec.validate({"mode": "semantic", "query": "alpha"}))
        assert res.metadata["results"][0]["path"] == "a.txt"
        with pytest.raises(InvalidArgument, match="not 'bm25'"):
            await run_retrieval_mode(ctx, "bm25", spec.validate({"mode": "bm25", "query": "alpha"}))
    finally:
        close_retrieval(state)


# --- the embedding cache -------------------------------------------------------------------------------


class CountingEmbedder(KeywordEmbedder):
    """A cacheable embedder (it has a ``cache_key``) that counts the texts it embeds."""

    cache_key = "test:keywords:v1"

    def __init__(self) -> None:
        super().__init__()
        self.texts = 0

    def embed(self, texts: list[str]) -> np.ndarray:
        if threading.current_thread().name == "retrieval-index":
            self.texts += len(texts)
        return super().embed(texts)


def test_q7_a_second_session_reembeds_nothing_unchanged(tmp_path: Path) -> None:
    """Q-7: vectors are cached under .a3s/index by what was embedded; a new session (another
    RetrievalIndex, another cache connection) embeds only the chunk that changed."""
    write(tmp_path, {f"m{i}.py": f"def function_{i}():\n    return {i}\n" * 50 for i in range(6)})
    ws = LocalWorkspace(tmp_path)
    first = CountingEmbedder()
    state: dict[str, Any] = {}
    start_retrieval(state, ws, services_with(first))
    assert ready_index(state).status()["embedded_chunks"] == 12 and first.texts == 12
    close_retrieval(state)
    assert (tmp_path / ".a3s" / "index" / "embeddings.sqlite").is_file()

    write(tmp_path, {"m0.py": "def changed():\n    return 0\n"})
    second = CountingEmbedder()
    state = {}
    start_retrieval(state, ws, services_with(second))
    st = ready_index(state).status()
    assert (st["embedded_chunks"], st["cached_chunks"], second.texts) == (1, 10, 1)  # m0: 2 chunks → 1
    # the cached vectors are the very ones the embedder gives
    index = state[SESSION_KEY]
    hits = index.search(second.embed(["def function_3():\n    return 3"])[0], 1)
    assert hits[0].path == "m3.py" and hits[0].score > 0.9
    close_retrieval(state)

    off = CountingEmbedder()
    state = {}
    start_retrieval(state, ws, services_with(off, embedding_cache=False))
    assert ready_index(state).status()["embedded_chunks"] == 11 and off.texts == 11
    close_retrieval(state)


def test_q7_a_damaged_cache_row_is_reembedded_not_trusted(tmp_path: Path) -> None:
    import sqlite3

    from tools.search.retrieval.embed_cache import EmbeddingCache, text_digest

    path = tmp_path / "e.sqlite"
    cache = EmbeddingCache(path, "k", 4)
    good = np.asarray([1, 0, 0, 0], dtype=np.float32)
    cache.put_many([(text_digest("a"), good), (text_digest("b"), good)])
    db = sqlite3.connect(path)
    db.execute("UPDATE vec SET vec = ? WHERE digest = ?", (b"\x00" * 12, text_digest("b")))  # wrong size
    db.execute(
        "INSERT INTO vec VALUES ('k', ?, ?, 0)", (text_digest("c"), np.full(4, np.nan, np.float32).tobytes())
    )
    db.commit()
    db.close()
    found = cache.get_many([text_digest("a"), text_digest("b"), text_digest("c")])
    assert list(found) == [text_digest("a")] and np.array_equal(found[text_digest("a")], good)
    other = EmbeddingCache(path, "another-model", 4)
    assert other.get_many([text_digest("a")]) == {}  # keyed by the embedder too
    cache.close()
    other.close()
