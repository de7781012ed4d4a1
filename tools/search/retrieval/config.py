"""Workspace Retrieval configuration: the embedding route and the index's resource caps (SPEC Q-7).

A host configures retrieval through ``SessionOptions.services``:

- ``services["retrieval_config"]``: a ``RetrievalConfig`` (or a dict of its fields);
- ``services["retrieval_embedder"]``: an object with the ``Embedder`` shape, which overrides the
  route entirely (hosts with their own model; tests with a slow or deterministic fake).

Routes: ``"minilm"`` (the bundled all-MiniLM-L6-v2 on ONNX Runtime, or a numpy forward pass:
``minilm_backend``), ``"http"`` (an
OpenAI-compatible ``/v1/embeddings`` endpoint), ``"none"``; ``"auto"`` (the default) picks minilm
when its weights are installed, else http when a ``base_url`` is configured, else none. With no
route the semantic/hybrid modes are not offered (``retrieval_available`` is False).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np

from kernel.errors import InvalidArgument, Unsupported

Route = Literal["auto", "minilm", "http", "none"]
ROUTES = ("auto", "minilm", "http", "none")
MINILM_BACKENDS = ("auto", "onnx", "numpy")  # = embed_minilm.BACKENDS, imported only when used

CONFIG_SERVICE = "retrieval_config"
EMBEDDER_SERVICE = "retrieval_embedder"

# Default caps: generous for a source tree, small enough that a session cannot eat the host.
DEFAULT_MAX_FILES = 5_000
DEFAULT_MAX_FILE_BYTES = 512 * 1024  # same per-file cap as bm25
DEFAULT_MAX_TOTAL_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_VECTORS = 50_000  # 50k × 384 float32 = 73 MiB
DEFAULT_MAX_MEMORY_BYTES = 256 * 1024 * 1024
DEFAULT_HTTP_TIMEOUT_S = 30.0
DEFAULT_HTTP_BATCH = 64  # inputs per /v1/embeddings request
# The call that creates the index waits this long for the build before answering from what is
# published (a small workspace is then complete on the very first query); readiness is reported.
DEFAULT_FIRST_QUERY_WAIT_S = 2.0


@runtime_checkable
class Embedder(Protocol):
    """Blocking text → unit-vector function; called from the index's build thread and per query."""

    name: str
    dim: int

    def embed(self, texts: list[str]) -> np.ndarray:
        """(len(texts), dim) float32, each row L2-normalised."""
        ...


@dataclass(frozen=True, slots=True)
class Caps:
    """Resource caps of one session's index; hitting one is counted and reported, never silent."""

    max_files: int = DEFAULT_MAX_FILES
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
    max_total_bytes: int = DEFAULT_MAX_TOTAL_BYTES
    max_vectors: int = DEFAULT_MAX_VECTORS
    max_memory_bytes: int = DEFAULT_MAX_MEMORY_BYTES

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            if getattr(self, f.name) < 1:
                raise InvalidArgument(f"retrieval cap {f.name} must be at least 1")

    def to_json(self) -> dict[str, int]:
        return dataclasses.asdict(self)


@dataclass(frozen=True, slots=True)
class RetrievalConfig:
    route: Route = "auto"
    base_url: str | None = None  # http route: e.g. http://127.0.0.1:8080 (``/v1/embeddings`` is appended)
    model: str | None = None  # http route: the ``model`` field of the request
    api_key: str | None = None  # http route: sent as a Bearer token when set
    http_timeout_s: float = DEFAULT_HTTP_TIMEOUT_S
    http_batch: int = DEFAULT_HTTP_BATCH
    first_query_wait_s: float = DEFAULT_FIRST_QUERY_WAIT_S
    embedding_cache: bool = True  # keep vectors under .a3s/index/embeddings.sqlite (embed_cache)
    # minilm route: "auto" (ONNX Runtime when installed, else numpy), "onnx" or "numpy"
    minilm_backend: str = "auto"
    caps: Caps = field(default_factory=Caps)

    def __post_init__(self) -> None:
        if self.route not in ROUTES:
            raise InvalidArgument(f"retrieval route must be one of {ROUTES}, got {self.route!r}")
        if self.route == "http" and not self.base_url:
            raise InvalidArgument("retrieval route 'http' needs base_url")
        if self.minilm_backend not in MINILM_BACKENDS:
            raise InvalidArgument(
                f"retrieval minilm_backend must be one of {MINILM_BACKENDS}, got {self.minilm_backend!r}"
            )

    @classmethod
    def from_value(cls, value: Any) -> RetrievalConfig:
        if value is None:
            return cls()
        if isinstance(value, RetrievalConfig):
            return value
        if isinstance(value, Mapping):
            data = dict(value)
            caps = data.pop("caps", None)
            unknown = set(data) - {f.name for f in dataclasses.fields(cls)}
            if unknown:
                raise InvalidArgument(f"unknown retrieval config field(s): {', '.join(sorted(unknown))}")
            if isinstance(caps, Mapping):
                data["caps"] = Caps(**caps)
            elif isinstance(caps, Caps):
                data["caps"] = caps
            return cls(**data)
        raise InvalidArgument(
            f"retrieval config must be a RetrievalConfig or a dict, got {type(value).__name__}"
        )

    def resolved_route(self) -> Literal["minilm", "http", "none"]:
        if self.route == "auto":
            from tools.search.retrieval import embed_minilm

            if embed_minilm.available():
                return "minilm"
            return "http" if self.base_url else "none"
        if self.route == "minilm":
            from tools.search.retrieval import embed_minilm

            return "minilm" if embed_minilm.available() else "none"
        return self.route


def config_from_services(services: Mapping[str, Any] | None) -> RetrievalConfig:
    return RetrievalConfig.from_value((services or {}).get(CONFIG_SERVICE))


def retrieval_available(services: Mapping[str, Any] | None = None) -> bool:
    """Is there an embedding route, so the semantic/hybrid modes can be offered at all?"""
    services = services or {}
    if services.get(EMBEDDER_SERVICE) is not None:
        return True
    return config_from_services(services).resolved_route() != "none"


def make_embedder(services: Mapping[str, Any] | None) -> Embedder:
    """The session's embedder: the host's override, else the configured route."""
    services = services or {}
    override = services.get(EMBEDDER_SERVICE)
    if override is not None:
        if not isinstance(override, Embedder):
            raise InvalidArgument("services['retrieval_embedder'] must have name, dim and embed(texts)")
        return override
    config = config_from_services(services)
    route = config.resolved_route()
    if route == "minilm":
        from tools.search.retrieval.embed_minilm import MiniLMEmbedder

        return MiniLMEmbedder(backend=config.minilm_backend)  # type: ignore[arg-type]
    if route == "http":
        from tools.search.retrieval.embed_http import HttpEmbedder

        assert config.base_url is not None
        return HttpEmbedder(
            config.base_url,
            model=config.model,
            api_key=config.api_key,
            timeout_s=config.http_timeout_s,
            batch=config.http_batch,
        )
    from tools.search.retrieval.embed_minilm import INSTALL_HINT

    raise Unsupported(
        "Workspace Retrieval has no embedding route: configure route 'http' with a base_url, or "
        + INSTALL_HINT
    )
