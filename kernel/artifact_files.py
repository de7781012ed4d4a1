"""On-disk artifact store: ``<root>/objects/<tool>/<sha256hex>`` plus ``<root>/artifacts.json`` (SPEC R-6).

The caller passes the directory (by default ``<workspace>/.a3s/artifacts/``). Invariants:
- Objects are content-addressed and immutable; every file appears only by atomic rename of a
  fsynced temp file in the same directory, so a reader never sees a partial object.
- ``get`` reads the object file itself (never only the manifest) and checks its digest, so an
  object written by another process (a Celery worker) is readable here (the CLI).
- The manifest (insertion order, retained URIs) is rewritten atomically (temp, fsync, rename) under
  an exclusive ``flock`` on ``<root>/.lock``; every update first reconciles it with the files on
  disk, so concurrent processes never lose each other's objects and a crash between an object
  write and a manifest write only leaves an object that the next update adopts.
- Retention as in ``kernel.artifacts``: oldest first beyond ``max_artifacts``/``max_bytes``,
  skipping pinned URIs and the object just stored. A manifest larger than 256 MiB or unreadable
  is ignored and rebuilt from the files.
- URIs are parsed with ``kernel.artifacts.parse_uri`` (``[A-Za-z0-9_-]`` tool segment, 64 hex
  digits), so no URI can name a path outside ``objects/``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from kernel.artifacts import (
    DEFAULT_MAX_ARTIFACT_BYTES,
    DEFAULT_MAX_ARTIFACTS,
    parse_uri,
    uri_for_digest,
)
from kernel.errors import KernelFault, NotFound

MANIFEST_NAME = "artifacts.json"
MANIFEST_SCHEMA = "a3s.fleet.artifact-manifest.v1"
MAX_MANIFEST_BYTES = 256 * 1024 * 1024
OBJECTS_DIR = "objects"
LOCK_NAME = ".lock"
TEMP_PREFIX = ".tmp-"
# Temp files older than this are leftovers of a crashed writer, not a write in progress.
STALE_TEMP_S = 3600


class _State:
    """The manifest in memory: URI -> size in insertion order, plus the pinned URIs."""

    def __init__(self) -> None:
        self.sizes: OrderedDict[str, int] = OrderedDict()
        self.retained: set[str] = set()

    @property
    def total(self) -> int:
        return sum(self.sizes.values())


class FileArtifactStore:
    def __init__(
        self,
        root_dir: str | os.PathLike[str],
        max_artifacts: int = DEFAULT_MAX_ARTIFACTS,
        max_bytes: int = DEFAULT_MAX_ARTIFACT_BYTES,
    ) -> None:
        self.root = Path(root_dir)
        self.max_artifacts = max_artifacts
        self.max_bytes = max_bytes
        self._thread_lock = threading.Lock()

    # -- the ArtifactStore protocol ---------------------------------------------------------

    def put(self, tool: str, data: bytes) -> str:
        return self.put_prehashed(tool, data, hashlib.sha256(data).hexdigest())

    def put_prehashed(self, tool: str, data: bytes, sha256_hex: str) -> str:
        uri = uri_for_digest(tool, sha256_hex)
        path = self._object_path(uri)
        try:
            with self._locked() as state:
                try:
                    present = path.stat().st_size == len(data)
                except FileNotFoundError:
                    present = False
                if not present:
                    # Absent, or a damaged file of the wrong size: (re)write it whole.
                    _atomic_write(path, data)
                    state.sizes.pop(uri, None)
                if uri not in state.sizes:
                    state.sizes[uri] = len(data)
                    self._evict(state, keep=uri)
                    self._write_manifest(state)
        except OSError as exc:
            raise KernelFault(f"artifact store write failed under {self.root}: {exc}") from exc
        return uri

    def get(self, uri: str) -> bytes:
        path = self._object_path(uri)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise NotFound(f"artifact not found: {uri}", path=uri) from None
        except OSError as exc:
            raise KernelFault(f"artifact store read failed for {uri}: {exc}") from exc
        if hashlib.sha256(data).hexdigest() != parse_uri(uri)[1]:
            raise KernelFault(f"artifact {uri} does not match its digest (store damaged)")
        return data

    # -- retention ------------------------------------------------------------------------------

    def __len__(self) -> int:
        with self._locked(write=False) as state:
            return len(state.sizes)

    def __contains__(self, uri: object) -> bool:
        with self._locked(write=False) as state:
            return uri in state.sizes

    @property
    def total_bytes(self) -> int:
        with self._locked(write=False) as state:
            return state.total

    def uris(self) -> list[str]:
        """Stored URIs, oldest first."""
        with self._locked(write=False) as state:
            return list(state.sizes)

    def pin(self, uris: Iterable[str]) -> None:
        with self._locked() as state:
            state.retained.update(u for u in uris if u)
            self._write_manifest(state)

    def set_retained_uris(self, uris: Iterable[str]) -> None:
        with self._locked() as state:
            state.retained = {u for u in uris if u}
            self._write_manifest(state)

    def retained_uris(self) -> set[str]:
        with self._locked(write=False) as state:
            return set(state.retained)

    def gc_unreferenced(self) -> int:
        """Delete every unpinned object; returns how many were removed."""
        with self._locked() as state:
            doomed = [u for u in state.sizes if u not in state.retained]
            for uri in doomed:
                self._delete(state, uri)
            self._write_manifest(state)
            return len(doomed)

    # -- internals ------------------------------------------------------------------------------

    def _object_path(self, uri: str) -> Path:
        tool, digest = parse_uri(uri)
        return self.root / OBJECTS_DIR / tool / digest

    @contextlib.contextmanager
    def _locked(self, write: bool = True) -> Iterator[_State]:
        """Thread lock + exclusive flock; yields the manifest reconciled with the disk."""
        with self._thread_lock:
            if not write and not self.root.exists():
                yield _State()
                return
            self.root.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.root / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield self._load()
            finally:
                os.close(fd)  # closing the descriptor releases the flock

    def _load(self) -> _State:
        state = _State()
        on_disk = self._scan()
        manifest = self._read_manifest()
        for entry in manifest.get("artifacts", []):
            uri = entry.get("uri") if isinstance(entry, dict) else None
            if isinstance(uri, str) and uri in on_disk and uri not in state.sizes:
                state.sizes[uri] = on_disk[uri][0]
        # Objects the manifest does not know yet (another writer crashed before its manifest write).
        for uri, (size, _) in sorted(on_disk.items(), key=lambda kv: (kv[1][1], kv[0])):
            if uri not in state.sizes:
                state.sizes[uri] = size
        retained = manifest.get("retained_uris", [])
        state.retained = (
            {u for u in retained if isinstance(u, str) and u} if isinstance(retained, list) else set()
        )
        return state

    def _scan(self) -> dict[str, tuple[int, float]]:
        found: dict[str, tuple[int, float]] = {}
        objects = self.root / OBJECTS_DIR
        if not objects.is_dir():
            return found
        now = time.time()
        for tool_dir in objects.iterdir():
            if not tool_dir.is_dir():
                continue
            for entry in os.scandir(tool_dir):
                try:
                    st = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if entry.name.startswith(TEMP_PREFIX):
                    if now - st.st_mtime > STALE_TEMP_S:
                        with contextlib.suppress(FileNotFoundError):
                            os.unlink(entry.path)
                    continue
                uri = uri_for_digest(tool_dir.name, entry.name)
                try:
                    if self._object_path(uri) == Path(entry.path) and entry.is_file(follow_symlinks=False):
                        found[uri] = (st.st_size, st.st_mtime)
                except NotFound:
                    continue  # not an object name: ignore foreign files
        return found

    def _read_manifest(self) -> dict[str, Any]:
        path = self.root / MANIFEST_NAME
        try:
            if path.stat().st_size > MAX_MANIFEST_BYTES:
                return {}
            with path.open("rb") as fh:
                raw = fh.read(MAX_MANIFEST_BYTES + 1)
            doc = json.loads(raw) if len(raw) <= MAX_MANIFEST_BYTES else {}
        except (OSError, ValueError):
            return {}  # missing or damaged: the scan of the objects is the truth
        return doc if isinstance(doc, dict) else {}

    def _write_manifest(self, state: _State) -> None:
        doc = {
            "schema": MANIFEST_SCHEMA,
            "artifacts": [{"uri": uri, "bytes": size} for uri, size in state.sizes.items()],
            "retained_uris": sorted(state.retained),
        }
        body = json.dumps(doc, indent=1).encode("utf-8")
        if len(body) > MAX_MANIFEST_BYTES:
            raise KernelFault(f"artifact manifest would exceed {MAX_MANIFEST_BYTES} bytes")
        _atomic_write(self.root / MANIFEST_NAME, body)

    def _evict(self, state: _State, keep: str) -> None:
        total = state.total
        for uri in list(state.sizes):
            if len(state.sizes) <= self.max_artifacts and total <= self.max_bytes:
                return
            if uri == keep or uri in state.retained:
                continue
            total -= state.sizes[uri]
            self._delete(state, uri)

    def _delete(self, state: _State, uri: str) -> None:
        state.sizes.pop(uri, None)
        with contextlib.suppress(FileNotFoundError):
            self._object_path(uri).unlink()


def _atomic_write(path: Path, data: bytes) -> None:
    """Temp file in the target directory, fsync, rename over ``path``, fsync the directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=TEMP_PREFIX)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
