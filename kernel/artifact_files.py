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
- Nothing below ``base`` is ever followed through a symlink (issue 15 item 3): the store directory
  is opened from ``base`` one component at a time with ``O_NOFOLLOW`` (``kernel.statedir``), and
  ``objects/``, ``objects/<tool>/``, objects, the manifest and the lock are opened, created,
  renamed and unlinked relative to those verified descriptors (``kernel.beneath``). A symlink in
  the store is refused (writes) or skipped (scans). ``for_workspace(root)`` anchors the store at
  the workspace root, so a planted ``.a3s`` or ``.a3s/artifacts/objects/<tool>`` symlink is refused.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import stat as stat_mod
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
from kernel.beneath import O_PATH_DIR, O_READ, Fd, atomic_write_at, open_subdir, read_regular_at
from kernel.errors import KernelFault, NotFound, ToolError

MANIFEST_NAME = "artifacts.json"
MANIFEST_SCHEMA = "a3s.fleet.artifact-manifest.v1"
MAX_MANIFEST_BYTES = 256 * 1024 * 1024
OBJECTS_DIR = "objects"
INTERNAL_DIR = ".a3s"
ARTIFACTS_DIR = "artifacts"
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
    """See the module docstring. ``root_dir`` is the store directory; ``base`` a trusted directory
    above it (default: ``root_dir`` itself) from which every component is opened without following
    symlinks."""

    def __init__(
        self,
        root_dir: str | os.PathLike[str],
        max_artifacts: int = DEFAULT_MAX_ARTIFACTS,
        max_bytes: int = DEFAULT_MAX_ARTIFACT_BYTES,
        *,
        base: str | os.PathLike[str] | None = None,
    ) -> None:
        self.root = Path(root_dir)
        self._base = Path(base) if base is not None else self.root
        try:
            inner = self.root.relative_to(self._base).parts
        except ValueError:
            raise ValueError(f"artifact store {self.root} is not below its base {self._base}") from None
        if any(p in ("..", ".") for p in inner):
            raise ValueError(f"artifact store path must be plain below its base: {self.root}")
        self._inner: tuple[str, ...] = inner
        self.max_artifacts = max_artifacts
        self.max_bytes = max_bytes
        self._thread_lock = threading.Lock()
        self._fd: Fd | None = None  # the store directory, while the lock is held

    @classmethod
    def for_workspace(
        cls,
        workspace_root: str | os.PathLike[str],
        max_artifacts: int = DEFAULT_MAX_ARTIFACTS,
        max_bytes: int = DEFAULT_MAX_ARTIFACT_BYTES,
    ) -> FileArtifactStore:
        """The store of a workspace: ``<root>/.a3s/artifacts``, anchored at the (trusted) root."""
        root = Path(workspace_root)
        return cls(root / INTERNAL_DIR / ARTIFACTS_DIR, max_artifacts, max_bytes, base=root)

    # -- the ArtifactStore protocol ---------------------------------------------------------

    def put(self, tool: str, data: bytes) -> str:
        return self.put_prehashed(tool, data, hashlib.sha256(data).hexdigest())

    def put_prehashed(self, tool: str, data: bytes, sha256_hex: str) -> str:
        uri = uri_for_digest(tool, sha256_hex)
        tool_name, digest = parse_uri(uri)
        try:
            with self._locked() as state:
                with self._tool_dir(tool_name, create=True) as tool_fd:
                    assert tool_fd is not None
                    try:
                        st = os.stat(digest, dir_fd=tool_fd.fd, follow_symlinks=False)
                        present = stat_mod.S_ISREG(st.st_mode) and st.st_size == len(data)
                    except FileNotFoundError:
                        present = False
                    if not present:
                        # Absent, damaged (wrong size) or not a regular file: (re)write it whole.
                        atomic_write_at(tool_fd.fd, digest, data, prefix=TEMP_PREFIX)
                        state.sizes.pop(uri, None)
                if uri not in state.sizes:
                    state.sizes[uri] = len(data)
                    self._evict(state, keep=uri)
                    self._write_manifest(state)
        except ToolError:
            raise
        except OSError as exc:
            raise KernelFault(f"artifact store write failed under {self.root}: {_describe(exc)}") from exc
        return uri

    def get(self, uri: str) -> bytes:
        tool, digest = parse_uri(uri)
        try:
            with self._open_store(create=False) as store:
                if store is None:
                    raise FileNotFoundError(errno.ENOENT, "no artifact store", str(self.root))
                with _open_child(store, OBJECTS_DIR) as objects, _open_child(objects, tool) as tool_fd:
                    fd = os.open(digest, O_READ, dir_fd=tool_fd.fd)
            with os.fdopen(fd, "rb") as fh:
                if not stat_mod.S_ISREG(os.fstat(fh.fileno()).st_mode):
                    raise FileNotFoundError(errno.ENOENT, "not a regular file", uri)
                data = fh.read()
        except FileNotFoundError:
            raise NotFound(f"artifact not found: {uri}", path=uri) from None
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise NotFound(
                    f"artifact not found: {uri} (a symlink in the store is never followed)"
                ) from None
            raise KernelFault(f"artifact store read failed for {uri}: {exc}") from exc
        if hashlib.sha256(data).hexdigest() != digest:
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

    def _open_store(self, *, create: bool) -> Fd | _NoStore:
        """The store directory from ``base``, never through a symlink (``_NoStore`` when absent)."""
        if create:
            os.makedirs(self._base, exist_ok=True)  # the host's own, trusted path
        try:
            current = Fd(os.open(os.fspath(self._base), O_PATH_DIR))
        except FileNotFoundError:
            if create:
                raise
            return _NoStore()
        try:
            for part in self._inner:
                try:
                    nxt = open_subdir(current.fd, part, create=create)
                except FileNotFoundError:
                    if create:
                        raise
                    current.close()
                    return _NoStore()
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EEXIST):
                        raise OSError(
                            exc.errno, f"{part} is a symlink or not a directory (never followed)"
                        ) from None
                    raise
                current.close()
                current = nxt
            return current
        except BaseException:
            current.close()
            raise

    @contextlib.contextmanager
    def _tool_dir(self, tool: str, *, create: bool) -> Iterator[Fd | None]:
        assert self._fd is not None
        try:
            objects = _open_child(self._fd, OBJECTS_DIR, create=create)
        except FileNotFoundError:
            if create:
                raise
            yield None
            return
        with objects:
            try:
                tool_fd = _open_child(objects, tool, create=create)
            except FileNotFoundError:
                if create:
                    raise
                yield None
                return
            with tool_fd:
                yield tool_fd

    @contextlib.contextmanager
    def _locked(self, write: bool = True) -> Iterator[_State]:
        """Thread lock + exclusive flock; yields the manifest reconciled with the disk."""
        with self._thread_lock:
            store = self._open_store(create=write)
            if isinstance(store, _NoStore):
                yield _State()
                return
            try:
                fd = os.open(
                    LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=store.fd
                )
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                    self._fd = store
                    yield self._load()
                finally:
                    self._fd = None
                    os.close(fd)  # closing the descriptor releases the flock
            finally:
                store.close()

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
        """Every object on disk (regular files only; symlinks and foreign names are ignored)."""
        found: dict[str, tuple[int, float]] = {}
        assert self._fd is not None
        try:
            objects = _open_child(self._fd, OBJECTS_DIR, readable=True)
        except OSError:
            return found
        now = time.time()
        with objects:
            with os.scandir(objects.fd) as it:
                tools = [de.name for de in it if de.is_dir(follow_symlinks=False)]
            for tool in tools:
                try:
                    tool_fd = _open_child(objects, tool, readable=True)
                except OSError:
                    continue
                with tool_fd, os.scandir(tool_fd.fd) as it:
                    for entry in it:
                        try:
                            st = entry.stat(follow_symlinks=False)
                        except FileNotFoundError:
                            continue
                        if entry.name.startswith(TEMP_PREFIX):
                            if now - st.st_mtime > STALE_TEMP_S:
                                with contextlib.suppress(FileNotFoundError):
                                    os.unlink(entry.name, dir_fd=tool_fd.fd)
                            continue
                        if not stat_mod.S_ISREG(st.st_mode):
                            continue
                        try:
                            uri = uri_for_digest(tool, entry.name)
                            if parse_uri(uri) == (tool, entry.name):
                                found[uri] = (st.st_size, st.st_mtime)
                        except NotFound:
                            continue  # not an object name: ignore foreign files
        return found

    def _read_manifest(self) -> dict[str, Any]:
        assert self._fd is not None
        try:
            raw = read_regular_at(self._fd.fd, MANIFEST_NAME, MAX_MANIFEST_BYTES)
            doc = json.loads(raw) if raw is not None else {}
        except (OSError, ValueError):
            return {}  # missing, damaged or not a regular file: the scan of the objects is the truth
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
        assert self._fd is not None
        atomic_write_at(self._fd.fd, MANIFEST_NAME, body, prefix=TEMP_PREFIX)

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
        tool, digest = parse_uri(uri)
        with contextlib.suppress(OSError), self._tool_dir(tool, create=False) as tool_fd:
            if tool_fd is not None:
                os.unlink(digest, dir_fd=tool_fd.fd)


class _NoStore:
    """The store directory does not exist (yet): reads see an empty store."""

    def close(self) -> None:
        pass

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        pass


def _open_child(parent: Fd, name: str, *, create: bool = False, readable: bool = False) -> Fd:
    """A directory below a verified one, never through a symlink (readable: for scandir)."""
    try:
        if readable:
            flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
            return Fd(os.open(name, flags, dir_fd=parent.fd))
        return open_subdir(parent.fd, name, create=create)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EEXIST):
            raise OSError(exc.errno, f"{name} is a symlink or not a directory (never followed)") from None
        raise


def _describe(exc: OSError) -> str:
    return f"{exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else "")
