"""The remote embedding route: an OpenAI-compatible ``POST {base_url}/v1/embeddings`` over httpx.

Request ``{"model": m, "input": [texts]}``; response ``{"data": [{"index": i, "embedding": [...]}]}``.
Invariants: inputs go in batches of ``batch``; rows are placed by their ``index`` (servers may
reorder); every row is re-normalised to unit length (cosine = dot product in the index); the
dimension is learned from the first answer and must never change; HTTP failures are typed
(``Transport``, ``RateLimited``, ``Timeout``). Blocking: runs in the index's build thread.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import numpy as np

from kernel.errors import InvalidArgument, RateLimited, Timeout, Transport

EMBEDDINGS_PATH = "/v1/embeddings"
MAX_ERROR_BODY_CHARS = 300


class HttpEmbedder:
    """``Embedder`` over an OpenAI-compatible endpoint; one pooled client, thread-safe."""

    def __init__(
        self,
        base_url: str,
        *,
        model: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 30.0,
        batch: int = 64,
    ) -> None:
        base = base_url.rstrip("/")
        if base.endswith("/v1"):
            base = base[: -len("/v1")]
        self.url = base + EMBEDDINGS_PATH
        self.model = model or "default"
        self.name = f"http:{self.model}"
        self.batch = max(1, batch)
        self.timeout_s = timeout_s
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(timeout=timeout_s, headers=headers)
        self._lock = threading.Lock()
        self._dim: int | None = None

    @property
    def dim(self) -> int:
        if self._dim is None:
            self.embed(["dimension probe"])
        assert self._dim is not None
        return self._dim

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self._dim or 0), dtype=np.float32)
        parts = [self._request(texts[i : i + self.batch]) for i in range(0, len(texts), self.batch)]
        return np.concatenate(parts, axis=0)

    def _request(self, texts: list[str]) -> np.ndarray:
        started = time.monotonic()
        try:
            resp = self._client.post(self.url, json={"model": self.model, "input": texts})
        except httpx.TimeoutException:
            ms = int((time.monotonic() - started) * 1000)
            raise Timeout(
                f"embedding request timed out after {ms}ms", op="embeddings", duration_ms=ms
            ) from None
        except httpx.HTTPError as exc:
            raise Transport(f"embedding request to {self.url} failed: {exc}", op="embeddings") from None
        if resp.status_code == 429:
            retry = resp.headers.get("retry-after", "")
            retry_ms = int(float(retry) * 1000) if retry.replace(".", "", 1).isdigit() else None
            raise RateLimited("embedding endpoint is rate limiting", retry_after_ms=retry_ms)
        if resp.status_code >= 400:
            raise Transport(
                f"embedding endpoint answered HTTP {resp.status_code}: {resp.text[:MAX_ERROR_BODY_CHARS]}",
                op="embeddings",
            )
        return self._parse(resp.json(), len(texts))

    def _parse(self, body: Any, n: int) -> np.ndarray:
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, list) or len(data) != n:
            raise Transport(
                f"embedding endpoint returned {len(data) if isinstance(data, list) else 'no'} rows for {n} inputs",
                op="embeddings",
            )
        rows: list[Any] = [None] * n
        for pos, item in enumerate(data):
            idx = item.get("index", pos) if isinstance(item, dict) else pos
            emb = item.get("embedding") if isinstance(item, dict) else None
            if (
                not isinstance(idx, int)
                or not 0 <= idx < n
                or not isinstance(emb, list)
                or rows[idx] is not None
            ):
                raise Transport("embedding endpoint returned a malformed row", op="embeddings")
            rows[idx] = emb
        out = np.asarray(rows, dtype=np.float32)
        if out.ndim != 2 or out.shape[1] == 0:
            raise Transport("embedding endpoint returned ragged or empty vectors", op="embeddings")
        with self._lock:
            if self._dim is None:
                self._dim = int(out.shape[1])
            elif out.shape[1] != self._dim:
                raise InvalidArgument(f"embedding dimension changed from {self._dim} to {out.shape[1]}")
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.maximum(norms, 1e-12)

    def close(self) -> None:
        self._client.close()
