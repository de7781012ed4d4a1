"""Chunk embeddings kept on disk, keyed by what was embedded, so no session embeds a chunk twice (SPEC Q-7).

A vector depends only on the embedder (``Embedder.cache_key``: model, GELU form, sequence limit)
and the exact text handed to it (path header + chunk), so the cache key is
``(cache_key, blake2b-128 of the text)``: content-addressed, valid across sessions, processes
and workspaces. It lives next to the workspace's full-text index, ``<workspace>/.a3s/index/
embeddings.sqlite`` (a git repository's ``.a3s/index``; the user cache dir when neither can be
written — ``tools.search.indexed.store``). Invariants:

- SQLite in WAL mode with a busy timeout: any number of processes read while one writes, and a
  crash leaves the last committed rows (SQLite's own journal);
- a row is used only if it decodes to a finite float32 vector of the embedder's dimension;
  anything else is ignored and re-embedded — the cache can make a build faster, never wrong;
- the cache is bounded (``max_rows``): past it the least recently used tenth is deleted;
- any SQLite error disables the cache for the rest of the session (logged), never the index.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)
FILE_NAME = "embeddings.sqlite"
DEFAULT_MAX_ROWS = 200_000  # ≈ 300 MiB of 384-dimension vectors
SQL_BATCH = 500  # parameters per IN (...) query


def text_digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


class EmbeddingCache:
    """One embedder's slice of the on-disk cache. Thread-safe; every method is blocking."""

    def __init__(self, path: Path, key: str, dim: int, *, max_rows: int = DEFAULT_MAX_ROWS) -> None:
        self.path = path
        self.key = key
        self.dim = dim
        self.max_rows = max_rows
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = sqlite3.connect(
            path, timeout=5.0, check_same_thread=False, isolation_level=None
        )
        try:
            os.chmod(path, 0o600)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS vec (model TEXT NOT NULL, digest BLOB NOT NULL,"
                " vec BLOB NOT NULL, used INTEGER NOT NULL, PRIMARY KEY (model, digest)) WITHOUT ROWID"
            )
        except sqlite3.Error:
            self.close()
            raise

    @property
    def enabled(self) -> bool:
        return self._db is not None

    def _fail(self, exc: Exception) -> None:
        log.warning("embedding cache %s disabled: %s", self.path, exc)
        self.close()

    def get_many(self, digests: list[bytes]) -> dict[bytes, np.ndarray]:
        """The cached vectors among ``digests``."""
        found: dict[bytes, np.ndarray] = {}
        with self._lock:
            if self._db is None:
                return found
            try:
                for i in range(0, len(digests), SQL_BATCH):
                    part = digests[i : i + SQL_BATCH]
                    marks = ",".join("?" * len(part))
                    rows = self._db.execute(
                        f"SELECT digest, vec FROM vec WHERE model = ? AND digest IN ({marks})",
                        (self.key, *part),
                    ).fetchall()
                    for dig, blob in rows:
                        vec = np.frombuffer(blob, dtype=np.float32)
                        if len(vec) and len(vec) == (self.dim or len(vec)) and np.isfinite(vec).all():
                            found[bytes(dig)] = vec
                    if rows:
                        self._db.execute(
                            f"UPDATE vec SET used = ? WHERE model = ? AND digest IN ({marks})",
                            (int(time.time()), self.key, *part),
                        )
            except sqlite3.Error as exc:
                self._fail(exc)
        self.hits += len(found)
        self.misses += len(digests) - len(found)
        return found

    def put_many(self, items: list[tuple[bytes, np.ndarray]]) -> None:
        with self._lock:
            if self._db is None or not items:
                return
            now = int(time.time())
            rows = [
                (self.key, dig, np.ascontiguousarray(vec, dtype=np.float32).tobytes(), now)
                for dig, vec in items
            ]
            try:
                self._db.execute("BEGIN IMMEDIATE")
                self._db.executemany("INSERT OR REPLACE INTO vec VALUES (?, ?, ?, ?)", rows)
                self._db.execute("COMMIT")
                self._prune()
            except sqlite3.Error as exc:
                self._fail(exc)

    def _prune(self) -> None:
        assert self._db is not None
        (count,) = self._db.execute("SELECT COUNT(*) FROM vec").fetchone()
        if count <= self.max_rows:
            return
        drop = count - self.max_rows + self.max_rows // 10
        self._db.execute(
            "DELETE FROM vec WHERE (model, digest) IN (SELECT model, digest FROM vec ORDER BY used LIMIT ?)",
            (drop,),
        )

    def close(self) -> None:
        db, self._db = self._db, None
        if db is not None:
            try:
                db.close()
            except sqlite3.Error:
                pass

    def stats(self) -> dict[str, Any]:
        return {"path": str(self.path), "hits": self.hits, "misses": self.misses, "enabled": self.enabled}


def open_cache(workspace: Any, embedder: Any) -> EmbeddingCache | None:
    """The cache for this workspace and embedder, or None (no ``cache_key``, or nowhere to write)."""
    key = getattr(embedder, "cache_key", None)
    if not isinstance(key, str) or not key:
        return None
    from tools.search.indexed import store

    try:
        directory = store.shared_location(workspace).for_writing()
        return EmbeddingCache(directory / FILE_NAME, key, int(getattr(embedder, "dim", 0) or 0))
    except Exception as exc:  # nowhere to write, a broken file, an object store: go without
        log.info("no embedding cache for %s: %s", getattr(workspace, "name", workspace), exc)
        return None
