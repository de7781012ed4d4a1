"""Workspace Retrieval benchmark (issue 4, Q-6/Q-7): semantic index build rate and query latency.

    python -m bench.search_semantic [--build-chunks 192] [--queries 8] [--hybrid-queries N] [--full]

``bench.search`` runs the same figures at the end of its run (``report``), with a smaller build
sample and fewer hybrid rounds.

1. **Build rate, MiniLM** (target ≥ 26 chunks/s): about ``--build-chunks`` chunks indexed end to
   end — walk, read, chunk, all-MiniLM-L6-v2 numpy forward pass, publish — in chunks per second of
   wall time, on two samples: *short* chunks (12-line stdlib windows, ~90 tokens, like the 1000-chunk
   sample of DEPENDENCIES §9 that measured 26/s for a plain numpy pass) and real *80-line* chunks
   (most hit MiniLM's 256-token limit: ~2.7× the tokens, attention quadratic). Each sample is then
   indexed again by a new index with the embedding cache (a second session): nothing re-embedded.
   The BLAS library, its kernel (``OPENBLAS_CORETYPE`` forces an older one) and threads are printed.
2. **Query latency at 10 000 chunks**: the Python standard library that ships with the interpreter
   is the workspace; the index is capped at 10 000 vectors. Without ``--full`` the *build* thread
   stores random unit vectors (the MiniLM build of 10 000 chunks takes minutes at the rate above;
   cosine cost does not depend on the values), while every *query* is embedded with MiniLM. Latency
   is measured through the search mode runner (query embedding + exact cosine over 10 000 rows +
   digest re-check of every candidate file + rendering), and the bare cosine top-k separately.
   ``--full`` embeds all 10 000 chunks with MiniLM.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sysconfig
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

TARGET_CHUNKS = 10_000
SHORT_LINES = 12  # lines per short chunk: ~90 MiniLM tokens, like DEPENDENCIES §9's 1000-chunk sample
TARGET_RATE = 26.0  # chunks/s (issue 14)
CPU_NORM = 2  # cores the target is for: CPU-normalised rates are chunks per (CPU seconds / 2)
QUERIES = [
    "parse command line arguments into options",
    "compress data with zlib and write a gzip file",
    "retry a network connection after a timeout",
    "format a date and time as an ISO 8601 string",
    "read_config_file",
    "compute a cryptographic hash of a file",
    "walk a directory tree recursively",
    "thread pool executor submit future",
]


class SplitEmbedder:
    """Random unit vectors for the build thread, MiniLM for queries (see the module docstring)."""

    dim = 384

    def __init__(self, model: Any) -> None:
        self.model = model
        self.name = f"bench-split({model.name})"
        self._rng = np.random.default_rng(7)
        self._lock = threading.Lock()

    def embed(self, texts: list[str]) -> np.ndarray:
        if threading.current_thread().name == "retrieval-index":
            with self._lock:
                v = self._rng.standard_normal((len(texts), self.dim)).astype(np.float32)
            return v / np.linalg.norm(v, axis=1, keepdims=True)
        return self.model.embed(texts)


def _sample(tmp: Path, chunks_wanted: int, lines_per_file: int | None) -> None:
    """Stdlib code into ``tmp``: whole modules (80-line chunks), or ``lines_per_file``-line windows
    written as files of their own (one short chunk each, like DEPENDENCIES §9's sample)."""
    from tools.search.retrieval import chunks as chunking

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    total = 0
    for src in sorted(stdlib.glob("*.py")):
        lines = chunking.split_lines(src.read_text(errors="replace"))
        if lines_per_file:
            for i in range(0, len(lines) - lines_per_file, lines_per_file * 3):
                (tmp / f"{src.stem}_{i}.py").write_text("\n".join(lines[i : i + lines_per_file]) + "\n")
                total += 1
                if total >= chunks_wanted:
                    return
            continue
        n = len(chunking.chunk_lines(lines))
        if total + n > chunks_wanted:
            continue
        shutil.copy(src, tmp / src.name)
        total += n
        if total >= chunks_wanted:
            return


def bench_build_rate(model: Any, chunks_wanted: int, lines_per_file: int | None = None) -> dict[str, float]:
    """Chunks/s of a first build (nothing cached) and of a second session's build (everything
    in the embedding cache), end to end: walk, read, chunk, embed or fetch, publish."""
    from kernel.workspace import LocalWorkspace
    from tools.search.retrieval import chunks as chunking
    from tools.search.retrieval.embed_cache import open_cache
    from tools.search.retrieval.index import RetrievalIndex

    with tempfile.TemporaryDirectory() as tmp:
        _sample(Path(tmp), chunks_wanted, lines_per_file)
        ws = LocalWorkspace(tmp)
        tokens = [
            model.token_count(chunking.embed_text(p.name, c))
            for p in sorted(Path(tmp).glob("*.py"))
            for c in chunking.chunk_lines(chunking.split_lines(p.read_text()))
        ]
        out: dict[str, float] = {"mean_tokens": sum(tokens) / max(1, len(tokens))}
        for run in ("first", "second"):
            index = RetrievalIndex(ws, model, cache=open_cache(ws, model))
            out[f"{run}_load"] = os.getloadavg()[0]
            c0, t0 = time.process_time(), time.perf_counter()
            index.start()
            assert index.wait_ready(3600), index.status()
            dt = time.perf_counter() - t0
            cpu = time.process_time() - c0
            st = index.status()
            index.close()
            out[f"{run}_rate"] = st["indexed_chunks"] / dt
            # CPU time of this process (all threads) in units of CPU_NORM cores: what the rate would
            # be with the cores to itself, the figure that other processes' load does not move
            out[f"{run}_cpu_rate"] = st["indexed_chunks"] / max(cpu / CPU_NORM, 1e-9)
            out[f"{run}_embedded"] = st["embedded_chunks"]
            out["chunks"] = st["indexed_chunks"]
            out["files"] = st["indexed_files"]
            out[f"{run}_seconds"] = dt
    return out


async def bench_queries(
    model: Any, full: bool, n_queries: int, hybrid_queries: int | None = None
) -> dict[str, Any]:
    from kernel.testing import make_context
    from kernel.workspace import LocalWorkspace
    from tools.search.retrieval import close_retrieval, run_retrieval_mode, start_retrieval
    from tools.search.tool import build_search_tool

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    ws = LocalWorkspace(stdlib, writable=False)
    embedder = model if full else SplitEmbedder(model)
    services = {
        "retrieval_embedder": embedder,
        "retrieval_config": {
            "caps": {
                "max_vectors": TARGET_CHUNKS,
                "max_files": 100_000,
                "max_total_bytes": 1 << 30,
                "max_memory_bytes": 1 << 30,
            }
        },
    }
    state: dict[str, Any] = {}
    t0 = time.perf_counter()
    index = start_retrieval(state, ws, services)
    assert index.wait_ready(36_000), index.status()
    build_s = time.perf_counter() - t0
    st = index.status()

    spec = build_search_tool(("search", "read"), True, {})
    assert spec is not None
    out: dict[str, Any] = {"index": st, "build_s": build_s}
    ctx = make_context(ws, session_state=state, services=services, timeout_s=600)
    for mode in ("semantic", "hybrid"):
        times = []
        rounds = n_queries if mode == "semantic" or hybrid_queries is None else hybrid_queries
        for q in (QUERIES * 4)[: max(1, rounds)]:
            params = spec.validate({"mode": "bm25", "query": q}).model_copy(update={"mode": mode})
            t = time.perf_counter()
            res = await run_retrieval_mode(ctx, mode, params)
            times.append(time.perf_counter() - t)
            assert res.exit_code == 0 and res.metadata["returned_results"] > 0, res.output
        out[mode] = times
    qvecs = model.embed(QUERIES)
    t = time.perf_counter()
    for q in qvecs:
        index.search(q, 40)
    out["cosine_ms"] = (time.perf_counter() - t) / len(qvecs) * 1000
    t = time.perf_counter()
    model.embed(["walk a directory tree recursively"])
    out["query_embed_ms"] = (time.perf_counter() - t) * 1000
    close_retrieval(state)
    return out


def load_model(backend: str = "auto") -> Any:
    """The MiniLM embedder with its weights (and ONNX session) loaded outside every timing; exits
    when the weights are missing. ``auto`` is what users get by default."""
    from tools.search.retrieval import embed_minilm

    if not embed_minilm.available():
        raise SystemExit("MiniLM weights missing; " + embed_minilm.INSTALL_HINT)
    model = embed_minilm.MiniLMEmbedder(backend=backend)  # type: ignore[arg-type]
    model.embed(["warm up"])
    return model


def load_models() -> dict[str, Any]:
    """The default embedder first, then numpy as its peer when the default is ONNX Runtime."""
    default = load_model()
    models = {f"default ({default.backend})": default}
    if default.backend != "numpy":
        models["numpy"] = load_model("numpy")
    return models


async def report(
    models: dict[str, Any],
    build_chunks: int,
    n_queries: int,
    full: bool = False,
    hybrid_queries: int | None = None,
) -> dict[str, Any]:
    """Print the build rates (every model on each sample, interleaved, with the ratio to the first)
    and the 10k-chunk query latencies of the first model; return the figures.

    ``hybrid_queries`` (default ``n_queries``) bounds the hybrid rounds, the slow ones: the
    combined bench (``bench.search``) runs fewer of them to keep its semantic part near a minute.
    """
    from tools.search.retrieval.embed_minilm import blas_info

    model = next(iter(models.values()))
    blas = blas_info()
    coretype = os.environ.get("OPENBLAS_CORETYPE")
    print(
        "BLAS: "
        + ", ".join(
            f"{i.get('internal_api')} {i.get('version')} kernel {i.get('architecture')}" for i in blas
        )
        + (f"; OPENBLAS_CORETYPE={coretype} forces that kernel (slower here)" if coretype else "")
        + f"; embedder workers {getattr(model, 'workers', 1)} (one BLAS / ONNX Runtime thread each)"
    )
    b: dict[str, dict[str, dict[str, float]]] = {}
    for label, lines in (("short", SHORT_LINES), ("80-line", None)):
        for name, m in models.items():  # interleaved: every route on this sample before the next one
            r = bench_build_rate(m, build_chunks, lines)
            b.setdefault(label, {})[name] = r
            first = b[label][next(iter(models))]
            ratio = ""
            if r is not first:
                ratio = (
                    f"; default / this per CPU-second: {first['first_cpu_rate'] / r['first_cpu_rate']:.2f}x"
                )
            print(
                f"build rate, {label} chunks (mean {r['mean_tokens']:.0f} tokens; walk, read, chunk, embed,"
                f" publish), {name}: {r['first_rate']:.1f} chunks/s wall at load {r['first_load']:.1f},"
                f" {r['first_cpu_rate']:.1f} chunks/s per {CPU_NORM} CPU-seconds ({r['chunks']:.0f} chunks,"
                f" {r['first_seconds']:.1f} s){ratio}; a second session with the embedding cache:"
                f" {r['second_rate']:.0f} chunks/s ({r['second_embedded']:.0f} re-embedded)"
            )
    q = await bench_queries(model, full, n_queries, hybrid_queries)
    st = q["index"]
    how = "MiniLM" if full else "random unit vectors, not MiniLM; queries embedded with MiniLM"
    print(
        f"10k index over the stdlib: {st['indexed_chunks']} chunks in {st['indexed_files']} files "
        f"built in {q['build_s']:.1f} s ({how}); {st['indexed_chunks'] / q['build_s']:.0f} chunks/s; "
        f"memory {st['usage']['memory_bytes'] / 2**20:.1f} MiB; skipped {st['skipped']}"
    )
    for mode in ("semantic", "hybrid"):
        times = q[mode]
        print(
            f"{mode} query latency at {st['indexed_chunks']} chunks (mode runner, warm): "
            f"median {statistics.median(times) * 1000:.0f} ms, max {max(times) * 1000:.0f} ms over {len(times)} queries"
        )
    print(
        f"  of which: MiniLM query embedding {q['query_embed_ms']:.0f} ms; exact cosine top-40 over the matrix {q['cosine_ms']:.2f} ms"
    )
    return {"build": b, "queries": q, "blas": blas}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-chunks", type=int, default=192)
    ap.add_argument("--queries", type=int, default=8)
    ap.add_argument("--hybrid-queries", type=int, default=None, help="hybrid rounds (default: --queries)")
    ap.add_argument("--full", action="store_true", help="embed all 10 000 chunks with MiniLM (minutes)")
    args = ap.parse_args()

    models = load_models()
    print(f"== Workspace Retrieval: semantic index (all-MiniLM-L6-v2: {', '.join(models)}) ==")
    asyncio.run(report(models, args.build_chunks, args.queries, args.full, args.hybrid_queries))


if __name__ == "__main__":
    main()
