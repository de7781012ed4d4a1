"""The session-owned in-memory retrieval index: chunk vectors + definitions per file (SPEC Q-6, Q-7).

Lifecycle: ``start()`` walks the workspace in a background thread (the same visibility rules as
grep: ``.gitignore``/``.ignore``/hidden/binary skipped), then reads, chunks and embeds files in
batches. Invariants:

- **per-file atomic publication**: a file's record, all of its rows and its symbols appear under one
  lock acquisition, and a re-indexed file swaps old rows for new ones in the same step — a query
  sees every chunk of a file version or none of it;
- **partial readiness**: ``status()`` reports ``indexed_files``, ``pending_files`` (discovered but not
  yet published, in-flight included) and ``ready`` (discovery finished and nothing pending);
- **exact cosine**: vectors are unit-length float32 rows of one numpy matrix; a query is one
  matrix-vector product over the live rows — no approximate structure;
- **caps** (files, bytes per file, total bytes, vectors, memory) are checked before a file is
  admitted; a file that does not fit is skipped and counted under ``skipped`` (never silently);
- **freshness**: every record keeps its file's digest; callers re-read the file and compare before
  returning a hit (``check``), and ``refresh`` re-indexes a changed or deleted file;
- **close** stops the worker, refuses late publications and drops the matrix, every record and every
  symbol (``status()['usage']['vectors'] == 0`` afterwards);
- **embedding cache**: with an ``EmbeddingCache`` (``embed_cache``), a chunk whose exact embedder
  input was embedded before — by any session or process — takes its vector from disk; only the
  others reach the embedder, and their vectors are stored for the next session.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kernel.errors import NotFound, ToolError
from kernel.workspace import Workspace
from tools.search.grep_py import decode_text
from tools.search.ignore import IgnoreRules, walk
from tools.search.retrieval import chunks as chunking
from tools.search.retrieval.config import Caps, Embedder
from tools.search.retrieval.embed_cache import EmbeddingCache, text_digest

EMBED_BATCH_CHUNKS = 64  # chunks embedded per forward call (several small files share one call)
INITIAL_CAPACITY_ROWS = 1024
ROW_OVERHEAD_BYTES = 160  # bookkeeping per vector row (owner path ref, chunk bounds, live flag)
SYMBOL_OVERHEAD_BYTES = 200  # one Symbol object with its name and term set
FILE_OVERHEAD_BYTES = 400  # one FileRecord
COMPACT_MIN_DEAD_ROWS = 4096
CLOSE_JOIN_S = 10.0


@dataclass(frozen=True, slots=True)
class FileRecord:
    path: str
    digest: str
    size: int
    rows: tuple[int, ...]  # matrix rows, one per chunk, in chunk order
    ranges: tuple[tuple[int, int], ...]  # 1-based (start_line, end_line) per chunk
    symbols: tuple[chunking.Symbol, ...]


@dataclass(frozen=True, slots=True)
class VectorHit:
    path: str
    start_line: int
    end_line: int
    score: float
    digest: str


@dataclass(slots=True)
class _Prepared:
    path: str
    digest: str
    size: int
    chunks: list[chunking.Chunk]
    symbols: list[chunking.Symbol]


@dataclass(slots=True)
class _Skips:
    oversized: int = 0
    over_file_cap: int = 0
    over_byte_cap: int = 0
    over_vector_cap: int = 0
    over_memory_cap: int = 0
    binary: int = 0
    failed: int = 0

    def to_json(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in self.__slots__}  # type: ignore[attr-defined]


@dataclass(slots=True)
class _State:
    discovered: bool = False
    discovered_files: int = 0
    queue: deque[str] = field(default_factory=deque)
    in_flight: int = 0
    skips: _Skips = field(default_factory=_Skips)
    admitted_bytes: int = 0
    error: str | None = None
    started_at: float | None = None
    ready_at: float | None = None


class RetrievalIndex:
    """One session's index; thread-safe. Blocking methods are for worker threads."""

    def __init__(
        self,
        workspace: Workspace,
        embedder: Embedder,
        caps: Caps | None = None,
        *,
        owns_embedder: bool = False,
        cache: EmbeddingCache | None = None,
    ) -> None:
        self.workspace = workspace
        self.embedder = embedder
        self.caps = caps or Caps()
        self.cache = cache
        self._owns_embedder = owns_embedder
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._worker: threading.Thread | None = None
        self._closed = False
        self._st = _State()
        self._files: dict[str, FileRecord] = {}
        self._vecs: np.ndarray | None = None  # (capacity, dim) float32
        self._live: np.ndarray = np.zeros(0, dtype=bool)
        self._row_path: list[str | None] = []
        self._n = 0  # rows used (live + dead)
        self._dead = 0
        self._symbols = 0
        self.chunks_embedded = 0  # chunks that went through the embedder
        self.chunks_cached = 0  # chunks whose vector came from the embedding cache
        self.embed_seconds = 0.0

    # --- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        """Begin the background build (idempotent)."""
        with self._lock:
            if self._closed or self._st.started_at is not None:
                return
            self._st.started_at = time.monotonic()
            self._ensure_worker_locked()

    def refresh(self, paths: list[str]) -> None:
        """Re-index these files (changed or deleted since they were indexed), in the background."""
        with self._lock:
            if self._closed:
                return
            for p in paths:
                if p not in self._st.queue:
                    self._st.queue.appendleft(p)
            self._st.ready_at = None
            self._ensure_worker_locked()

    def wait_ready(self, timeout_s: float) -> bool:
        """Block until the build has nothing pending (tests and benchmarks)."""
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if self.status()["ready"] or self._st.error or self._closed:
                return bool(self.status()["ready"])
            time.sleep(0.01)
        return bool(self.status()["ready"])

    def close(self) -> None:
        """Stop building and free every vector, record and symbol. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._stop.set()
            worker = self._worker
        if worker is not None and worker is not threading.current_thread():
            worker.join(CLOSE_JOIN_S)
        with self._lock:
            self._vecs = None
            self._live = np.zeros(0, dtype=bool)
            self._row_path = []
            self._files.clear()
            self._st.queue.clear()
            self._n = self._dead = self._symbols = 0
        if self.cache is not None:
            self.cache.close()
        if self._owns_embedder:
            closer = getattr(self.embedder, "close", None)
            if callable(closer):
                closer()

    @property
    def closed(self) -> bool:
        return self._closed

    # --- reporting ----------------------------------------------------------------------------

    def memory_bytes(self) -> int:
        with self._lock:
            return self._memory_locked(self._capacity_locked(), self._n, self._symbols, len(self._files))

    def status(self) -> dict[str, Any]:
        with self._lock:
            st = self._st
            pending = len(st.queue) + st.in_flight
            live = self._n - self._dead
            if self._closed:
                state = "closed"
            elif st.error:
                state = "failed"
            elif st.started_at is None:
                state = "idle"
            elif st.discovered and pending == 0:
                state = "ready"
            else:
                state = "building"
            return {
                "state": state,
                "ready": state == "ready",
                "discovered": st.discovered,
                "discovered_files": st.discovered_files,
                "indexed_files": len(self._files),
                "pending_files": pending,
                "indexed_chunks": live,
                "truncated": any(
                    (
                        st.skips.over_file_cap,
                        st.skips.over_byte_cap,
                        st.skips.over_vector_cap,
                        st.skips.over_memory_cap,
                    )
                ),
                "skipped": st.skips.to_json(),
                "caps": self.caps.to_json(),
                "usage": {
                    "files": len(self._files),
                    "bytes": sum(r.size for r in self._files.values()),
                    "vectors": live,
                    "memory_bytes": self._memory_locked(
                        self._capacity_locked(), self._n, self._symbols, len(self._files)
                    ),
                },
                "embedder": getattr(self.embedder, "name", type(self.embedder).__name__),
                "embedded_chunks": self.chunks_embedded,
                "cached_chunks": self.chunks_cached,
                "error": st.error,
            }

    # --- queries (any thread) -----------------------------------------------------------------

    def record(self, path: str) -> FileRecord | None:
        with self._lock:
            return self._files.get(path)

    def search(
        self, qvec: np.ndarray, top: int, accept: Callable[[str], bool] | None = None
    ) -> list[VectorHit]:
        """The ``top`` live chunks by cosine (score desc, path, start line), optionally filtered."""
        q = np.asarray(qvec, dtype=np.float32).reshape(-1)
        with self._lock:
            if self._closed or self._vecs is None or self._n == self._dead:
                return []
            n = self._n
            scores = self._vecs[:n] @ q
            mask = self._live[:n].copy()
            if accept is not None:
                for rec in self._files.values():
                    if not accept(rec.path):
                        mask[list(rec.rows)] = False
            scores = np.where(mask, scores, -np.inf)
            k = min(top, int(mask.sum()))
            if k <= 0:
                return []
            idx = np.argpartition(-scores, k - 1)[:k] if k < n else np.arange(n)
            row_path = [self._row_path[i] for i in idx]
            hits = []
            for i, p in zip(idx, row_path, strict=True):
                if p is None or not np.isfinite(scores[i]):
                    continue
                rec = self._files[p]
                c = rec.rows.index(int(i))
                s, e = rec.ranges[c]
                hits.append(VectorHit(p, s, e, float(scores[i]), rec.digest))
        hits.sort(key=lambda h: (-h.score, h.path, h.start_line))
        return hits[:top]

    def symbols(self, accept: Callable[[str], bool] | None = None) -> list[tuple[str, str, chunking.Symbol]]:
        """Every indexed definition as (path, digest, symbol)."""
        with self._lock:
            return [
                (rec.path, rec.digest, sym)
                for rec in self._files.values()
                if accept is None or accept(rec.path)
                for sym in rec.symbols
            ]

    def embed(self, texts: list[str]) -> np.ndarray:
        return np.asarray(self.embedder.embed(texts), dtype=np.float32)

    # --- the worker ---------------------------------------------------------------------------

    def _ensure_worker_locked(self) -> None:
        if self._worker is not None and self._worker.is_alive():
            return
        self._worker = threading.Thread(target=self._run, name="retrieval-index", daemon=True)
        self._worker.start()

    def _run(self) -> None:
        try:
            if not self._st.discovered:
                self._discover()
            while not self._stop.is_set():
                batch = self._take_batch()
                if not batch:
                    break
                self._index_batch(batch)
        except Exception as exc:  # the build must never take the session down; report it
            with self._lock:
                self._st.error = f"{type(exc).__name__}: {exc}"
                self._st.in_flight = 0
        finally:
            with self._lock:
                if not self._st.queue and self._st.discovered and self._st.ready_at is None:
                    self._st.ready_at = time.monotonic()
                # A refresh queued after our last look restarts the worker.
                if self._st.queue and not self._closed and not self._stop.is_set() and not self._st.error:
                    self._worker = threading.Thread(target=self._run, name="retrieval-index", daemon=True)
                    self._worker.start()

    def _discover(self) -> None:
        rules = IgnoreRules(self.workspace)
        found: list[tuple[str, int]] = []
        for entry in walk(self.workspace, "", rules, self._stop.is_set):
            found.append((entry.path, entry.size))
        found.sort()
        caps = self.caps
        with self._lock:
            st = self._st
            for path, size in found:
                if size > caps.max_file_bytes:
                    st.skips.oversized += 1
                    continue
                if st.discovered_files >= caps.max_files:
                    st.skips.over_file_cap += 1
                    continue
                if st.admitted_bytes + size > caps.max_total_bytes:
                    st.skips.over_byte_cap += 1
                    continue
                st.admitted_bytes += size
                st.discovered_files += 1
                st.queue.append(path)
            st.discovered = True

    def _take_batch(self) -> list[str]:
        with self._lock:
            out: list[str] = []
            budget = 0
            while self._st.queue and budget < EMBED_BATCH_CHUNKS:
                path = self._st.queue.popleft()
                out.append(path)
                rec = self._files.get(path)
                budget += len(rec.rows) if rec else 4  # a guess until the file is read
            self._st.in_flight = len(out)
            return out

    def _prepare(self, path: str) -> _Prepared | str | None:
        """Read + chunk one file; None = gone (drop its record), 'skip' = counted and left out."""
        try:
            # The size first (a stat, or a git object's header): a file it would skip is not loaded.
            if self.workspace.stat(path).size > self.caps.max_file_bytes:
                with self._lock:
                    self._st.skips.oversized += 1
                return "skip"
            data = self.workspace.read_bytes(path)
        except (ToolError, OSError) as exc:
            if isinstance(exc, (NotFound, FileNotFoundError)):
                return None
            with self._lock:
                self._st.skips.failed += 1
            return "skip"
        if len(data) > self.caps.max_file_bytes:
            with self._lock:
                self._st.skips.oversized += 1
            return "skip"
        digest = chunking.digest(data)
        rec = self.record(path)
        if rec is not None and rec.digest == digest:
            return "skip"  # unchanged since it was indexed
        text = decode_text(data)
        if text is None:
            with self._lock:
                self._st.skips.binary += 1
            return "skip"
        lines = chunking.split_lines(text)
        return _Prepared(
            path, digest, len(data), chunking.chunk_lines(lines), chunking.find_symbols(path, lines)
        )

    def _done(self, files: int = 1) -> None:
        with self._lock:
            self._st.in_flight = max(0, self._st.in_flight - files)

    def _index_batch(self, paths: list[str]) -> None:
        ready: list[_Prepared] = []
        for path in paths:
            if self._stop.is_set():
                return
            if self._vectors_full(path):
                self._done()
                continue
            prep = self._prepare(path)
            if prep is None:
                self._drop(path)
            elif isinstance(prep, _Prepared):
                if not prep.chunks:
                    self._publish(prep, np.zeros((0, 0), dtype=np.float32))
                elif self._admit(prep, ready):
                    ready.append(prep)
                    continue  # in flight until its vectors are published
            self._done()
        texts = [chunking.embed_text(p.path, c) for p in ready for c in p.chunks]
        vecs = self._embed_cached(texts) if texts else np.zeros((0, 0), dtype=np.float32)
        offset = 0
        for prep in ready:
            if self._stop.is_set():
                return
            n = len(prep.chunks)
            self._publish(prep, vecs[offset : offset + n])
            self._done()
            offset += n

    def _embed_cached(self, texts: list[str]) -> np.ndarray:
        """Vectors of ``texts``: from the cache where it has them, else embedded (and stored)."""
        cache = self.cache
        digests = [text_digest(t) for t in texts] if cache is not None else []
        found = cache.get_many(digests) if cache is not None else {}
        todo = (
            [i for i, d in enumerate(digests) if d not in found]
            if cache is not None
            else list(range(len(texts)))
        )
        fresh = np.zeros((0, 0), dtype=np.float32)
        if todo:
            started = time.monotonic()
            fresh = self.embed([texts[i] for i in todo])
            self.embed_seconds += time.monotonic() - started
            self.chunks_embedded += len(todo)
            if cache is not None:
                cache.put_many([(digests[i], fresh[j]) for j, i in enumerate(todo)])
        self.chunks_cached += len(texts) - len(todo)
        if cache is None:
            return fresh
        dim = fresh.shape[1] if len(todo) else len(next(iter(found.values())))
        out = np.empty((len(texts), dim), dtype=np.float32)
        for j, i in enumerate(todo):
            out[i] = fresh[j]
        for i, d in enumerate(digests):
            if d in found:
                out[i] = found[d]
        return out

    def _vectors_full(self, path: str) -> bool:
        """No room for a new file's vectors: count the skip without reading the file."""
        with self._lock:
            if path in self._files or self._n - self._dead < self.caps.max_vectors:
                return False
            self._st.skips.over_vector_cap += 1
            return True

    def _admit(self, prep: _Prepared, batch: list[_Prepared]) -> bool:
        """Would this file fit the vector and memory caps next to the batch admitted before it?

        Counts the skip when not.
        """
        extra_rows = sum(len(p.chunks) for p in batch) + len(prep.chunks)
        extra_symbols = sum(len(p.symbols) for p in batch) + len(prep.symbols)
        with self._lock:
            old = self._files.get(prep.path)
            old_rows = len(old.rows) if old else 0
            if self._n - self._dead - old_rows + extra_rows > self.caps.max_vectors:
                self._st.skips.over_vector_cap += 1
                return False
            if self._vecs is not None:
                dim = int(self._vecs.shape[1])
            else:
                dim = int(getattr(self.embedder, "dim", 384) or 384)
            rows_after = self._n + extra_rows
            symbols_after = self._symbols + extra_symbols
            files_after = len(self._files) + len(batch) + 1
            capacity = self._capacity_for_locked(rows_after, dim, symbols_after, files_after)
            mem = self._memory_locked(capacity, rows_after, symbols_after, files_after, dim)
            if mem > self.caps.max_memory_bytes:
                self._st.skips.over_memory_cap += 1
                return False
            return True

    def _drop(self, path: str) -> None:
        with self._lock:
            rec = self._files.pop(path, None)
            if rec is not None:
                self._kill_rows_locked(rec)

    def _publish(self, prep: _Prepared, vecs: np.ndarray) -> None:
        with self._lock:
            if self._closed:
                return  # close() won the race: never resurrect freed vectors
            old = self._files.get(prep.path)
            rows: list[int] = []
            if len(prep.chunks):
                self._reserve_locked(len(prep.chunks), vecs.shape[1])
                assert self._vecs is not None
                start = self._n
                self._vecs[start : start + len(prep.chunks)] = vecs
                self._live[start : start + len(prep.chunks)] = True
                self._row_path.extend([prep.path] * len(prep.chunks))
                self._n += len(prep.chunks)
                rows = list(range(start, self._n))
            if old is not None:
                self._kill_rows_locked(old)
            self._files[prep.path] = FileRecord(
                path=prep.path,
                digest=prep.digest,
                size=prep.size,
                rows=tuple(rows),
                ranges=tuple((c.start_line, c.end_line) for c in prep.chunks),
                symbols=tuple(prep.symbols),
            )
            self._symbols += len(prep.symbols)
            if self._dead > COMPACT_MIN_DEAD_ROWS and self._dead > self._n - self._dead:
                self._compact_locked()

    # --- matrix bookkeeping (lock held) ---------------------------------------------------------

    def _capacity_locked(self) -> int:
        return 0 if self._vecs is None else int(self._vecs.shape[0])

    def _memory_locked(
        self, capacity: int, rows: int, symbols: int, files: int, dim: int | None = None
    ) -> int:
        if dim is None:
            dim = self._vecs.shape[1] if self._vecs is not None else 0
        return (
            capacity * dim * 4
            + capacity
            + rows * ROW_OVERHEAD_BYTES
            + symbols * SYMBOL_OVERHEAD_BYTES
            + files * FILE_OVERHEAD_BYTES
        )

    def _capacity_for_locked(self, need: int, dim: int, symbols: int, files: int) -> int:
        """The matrix capacity (rows) once ``need`` rows are in use.

        Doubling is bounded so that filling the slack later — each extra row worst case with a file
        of its own — still fits the memory cap; ``_admit`` checks the exact figure.
        """
        cap = self._capacity_locked()
        if need <= cap:
            return cap
        new_cap = max(INITIAL_CAPACITY_ROWS, cap)
        while new_cap < need:
            new_cap *= 2
        free = self.caps.max_memory_bytes - self._memory_locked(need, need, symbols, files, dim)
        per_extra_row = dim * 4 + 1 + ROW_OVERHEAD_BYTES + FILE_OVERHEAD_BYTES
        return max(need, min(new_cap, need + max(0, free) // per_extra_row))

    def _reserve_locked(self, extra: int, dim: int) -> None:
        need = self._n + extra
        if self._vecs is not None and need <= self._capacity_locked():
            return
        new_cap = self._capacity_for_locked(need, dim, self._symbols, len(self._files) + 1)
        vecs = np.zeros((new_cap, dim), dtype=np.float32)
        live = np.zeros(new_cap, dtype=bool)
        if self._vecs is not None:
            vecs[: self._n] = self._vecs[: self._n]
            live[: self._n] = self._live[: self._n]
        self._vecs, self._live = vecs, live

    def _kill_rows_locked(self, rec: FileRecord) -> None:
        if rec.rows:
            idx = list(rec.rows)
            self._live[idx] = False
            if self._vecs is not None:
                self._vecs[idx] = 0.0
            for i in idx:
                self._row_path[i] = None
            self._dead += len(idx)
        self._symbols -= len(rec.symbols)

    def _compact_locked(self) -> None:
        assert self._vecs is not None
        keep = np.flatnonzero(self._live[: self._n])
        remap = {int(old): new for new, old in enumerate(keep)}
        vecs = np.zeros((max(INITIAL_CAPACITY_ROWS, len(keep) * 2), self._vecs.shape[1]), dtype=np.float32)
        vecs[: len(keep)] = self._vecs[keep]
        live = np.zeros(vecs.shape[0], dtype=bool)
        live[: len(keep)] = True
        self._row_path = [self._row_path[i] for i in keep]
        self._vecs, self._live = vecs, live
        self._n, self._dead = len(keep), 0
        for path, rec in list(self._files.items()):
            self._files[path] = FileRecord(
                rec.path, rec.digest, rec.size, tuple(remap[r] for r in rec.rows), rec.ranges, rec.symbols
            )
