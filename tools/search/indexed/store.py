"""Where a workspace's persistent full-text index lives, and its on-disk pieces (SPEC Q-8).

Layout of an index directory ``D``::

    D/fts/                  the tantivy index (segments + meta.json; tantivy owns this directory)
    D/fts-manifest.msgpack  the writer's manifest: path → (digest, size, mtime_ns, chunks)
    D/fts-write.lock        flock(2)ed by the one writer; released by the kernel if it dies
    D/fts-progress.json     written by a running writer (pid, counts) so readers report progress
    D/fts-schema            the schema version the index was created with (another → rebuilt)
    D/fts-summary.json      counts of the manifest (files, chunks, complete, built_at) for readers

Where ``D`` is (``locate``):

- a local workspace: ``<workspace>/.a3s/index``;
- a ``git:REPO@REV`` workspace: ``<repository>/.a3s/index/git/<tree id>`` — one index per tree id,
  shared by every commit with that tree;
- when that directory cannot be created (read-only workspace or repository), the user cache:
  ``$A3S_INDEX_CACHE`` or ``${XDG_CACHE_HOME:-~/.cache}/a3s-fleet/index``, under ``local/<sha256
  of the real path>`` or ``git/<tree id>``. Readers look in the primary place first.

Invariants:

- every directory on the way (``.a3s``, ``index``, …) is created without following symlinks and
  must be a real directory owned by this user: a symlink planted in the workspace never redirects
  where the host writes;
- the manifest names the tantivy commit (``opstamp``) it describes and is replaced atomically
  (temp file, fsync, rename) after that commit; a manifest whose opstamp differs from the index's
  ``meta.json`` is stale (the writer died between the two) and is rebuilt from the index itself
  (``fkey`` terms: ``path NUL digest`` of each file's first chunk), never trusted;
- a crash at any point leaves the last tantivy commit as the index: tantivy replaces ``meta.json``
  atomically and ignores uncommitted segment files (the next writer collects them).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import socket
import stat as stat_mod
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from kernel.errors import Unsupported
from kernel.workspace import INTERNAL_DIR, Workspace
from tools.search.user_cache import user_cache_dir

FTS_DIR = "fts"
MANIFEST = "fts-manifest.msgpack"
LOCK = "fts-write.lock"
PROGRESS = "fts-progress.json"
SCHEMA_MARK = "fts-schema"
SUMMARY = "fts-summary.json"
MANIFEST_VERSION = 1
SCHEMA_VERSION = 1  # bump when the fields or the tokenizer change: an older index is rebuilt
CACHE_ENV = "A3S_INDEX_CACHE"
DIR_MODE = 0o700


class IndexBusy(Exception):
    """Another writer holds the index's write lock."""


class FileRecord(msgspec.Struct, array_like=True, frozen=True):
    """One indexed (or deliberately skipped) file as the writer last saw it."""

    digest: str  # blake2b-128 hex of the bytes; "" for a skipped file
    size: int  # -1 when unknown (a manifest rebuilt from the index after a crash)
    mtime_ns: int
    chunks: int  # chunk documents in the index (0 for a skipped file)
    skipped: str = ""  # "", "binary", "oversized" or "unreadable"


class Manifest(msgspec.Struct):
    version: int = MANIFEST_VERSION
    schema: int = SCHEMA_VERSION
    opstamp: int = -1  # the tantivy commit these records describe
    built_at_ns: int = 0  # wall clock when the writer that wrote this started its scan
    complete: bool = False  # the last update finished (not stopped or crashed half-way)
    files: dict[str, FileRecord] = msgspec.field(default_factory=dict)

    @property
    def chunks(self) -> int:
        return sum(r.chunks for r in self.files.values())

    @property
    def indexed_files(self) -> int:
        return sum(1 for r in self.files.values() if not r.skipped)


_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(Manifest)


@dataclass(frozen=True, slots=True)
class IndexLocation:
    """Candidate directories for one workspace's index: ``primary`` first, then ``fallback``."""

    kind: str  # "local" or "git"
    key: str  # the workspace root, or the tree id for git
    primary: Path
    fallback: Path

    def existing(self) -> Path | None:
        """The directory that holds an index of this version now (primary first), or None."""
        for d in (self.primary, self.fallback):
            if (d / FTS_DIR / "meta.json").is_file() and schema_current(d):
                return d
        return None

    def for_writing(self) -> Path:
        """The directory a writer uses: an existing index, else the primary when it can be created."""
        found = self.existing()
        if found is not None:
            return found
        try:
            return ensure_dir(self.primary)
        except OSError:
            return ensure_dir(self.fallback)


def cache_root() -> Path:
    return user_cache_dir(CACHE_ENV, "index")


def tree_id_of(ws: Any) -> str:
    """The tree id of a ``GitTreeWorkspace``'s commit (one index per tree)."""
    from kernel.gittree import open_repository

    repo = open_repository(ws.repo_path)
    try:
        return str(repo[ws.commit_id].tree.id)
    finally:
        repo.free()


def locate(ws: Workspace) -> IndexLocation:
    """Where this workspace's index lives (see the module docstring); ``unsupported`` otherwise."""
    from kernel.gittree import is_git_tree

    if is_git_tree(ws):
        tree = tree_id_of(ws)
        repo = Path(ws.repo_path)  # type: ignore[attr-defined]
        return IndexLocation(
            "git", tree, repo / INTERNAL_DIR / "index" / "git" / tree, cache_root() / "git" / tree
        )
    if ws.root is not None and "local" in ws.capabilities:
        root = Path(ws.root)
        digest = hashlib.sha256(os.fsencode(root)).hexdigest()[:32]
        return IndexLocation(
            "local", str(root), root / INTERNAL_DIR / "index", cache_root() / "local" / digest
        )
    raise Unsupported("the indexed search mode needs a local directory or a git:REPO@REV workspace")


def shared_location(ws: Workspace) -> IndexLocation:
    """Where content-addressed data shared by every index of a workspace lives (the embedding
    cache): the workspace's ``.a3s/index``; for a git tree, its repository's ``.a3s/index``."""
    from kernel.gittree import is_git_tree

    if is_git_tree(ws):
        repo = Path(ws.repo_path)  # type: ignore[attr-defined]
        digest = hashlib.sha256(os.fsencode(repo)).hexdigest()[:32]
        return IndexLocation(
            "git-repo", str(repo), repo / INTERNAL_DIR / "index", cache_root() / "repo" / digest
        )
    return locate(ws)


def ensure_dir(path: Path) -> Path:
    """Create ``path`` (and its parents) refusing symlinks and foreign owners on the way down.

    Components that already existed above the first one we create are trusted only as far as
    ``os.lstat`` shows a real directory; symlinks anywhere in the ``.a3s`` part are refused.
    """
    path = Path(os.path.abspath(path))
    parts = path.parts
    # Find the deepest existing ancestor, then create downward one level at a time.
    current = Path(parts[0])
    for part in parts[1:]:
        current = current / part
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            os.mkdir(current, DIR_MODE)
            st = os.lstat(current)
        if stat_mod.S_ISLNK(st.st_mode) and _inside_internal(current):
            raise PermissionError(f"refusing a symlink on the index path: {current}")
        if not stat_mod.S_ISDIR(os.stat(current).st_mode):
            raise NotADirectoryError(f"not a directory on the index path: {current}")
        if _inside_internal(current) and st.st_uid != os.getuid():
            raise PermissionError(f"index directory owned by another user: {current}")
    if not os.access(path, os.W_OK | os.X_OK):
        raise PermissionError(f"index directory is not writable: {path}")
    return path


def _inside_internal(p: Path) -> bool:
    return INTERNAL_DIR in p.parts or "a3s-fleet" in p.parts


def schema_current(directory: Path) -> bool:
    try:
        return (directory / SCHEMA_MARK).read_text().strip() == str(SCHEMA_VERSION)
    except OSError:
        return False


def mark_schema(directory: Path) -> None:
    if not schema_current(directory):
        _atomic_write(directory / SCHEMA_MARK, str(SCHEMA_VERSION).encode())


# --- manifest ------------------------------------------------------------------------------------


def index_opstamp(directory: Path) -> int | None:
    """The opstamp of the index's last commit (from tantivy's meta.json), or None."""
    try:
        with open(directory / FTS_DIR / "meta.json", "rb") as fh:
            return int(json.load(fh)["opstamp"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def read_manifest(directory: Path) -> Manifest | None:
    """The manifest when it describes the index's current commit, else None (absent or stale)."""
    try:
        data = (directory / MANIFEST).read_bytes()
        manifest = _DECODER.decode(data)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return None
    if manifest.version != MANIFEST_VERSION or manifest.schema != SCHEMA_VERSION:
        return None
    if manifest.opstamp != index_opstamp(directory):
        return None
    return manifest


def write_manifest(directory: Path, manifest: Manifest) -> None:
    _atomic_write(directory / MANIFEST, _ENCODER.encode(manifest))
    skipped = sum(1 for r in manifest.files.values() if r.skipped)
    summary = {
        "opstamp": manifest.opstamp,
        "files": manifest.indexed_files,
        "skipped_files": skipped,
        "chunks": manifest.chunks,
        "complete": manifest.complete,
        "built_at": manifest.built_at_ns / 1e9,
        "committed_at": time.time(),
    }
    _atomic_write(directory / SUMMARY, json.dumps(summary).encode(), durable=False)  # counts only


def read_summary(directory: Path) -> dict[str, Any] | None:
    """The counts written with the manifest; ``stale`` when the index moved on since (a crash)."""
    try:
        data = json.loads((directory / SUMMARY).read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    data["stale"] = data.get("opstamp") != index_opstamp(directory)
    return data


def _atomic_write(path: Path, data: bytes, *, durable: bool = True) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


# --- the writer lock and progress -----------------------------------------------------------------


@contextlib.contextmanager
def write_lock(directory: Path, *, wait_s: float = 0.0, should_stop: Any = None) -> Iterator[None]:
    """Hold the index's exclusive write lock; ``IndexBusy`` when another writer keeps it past ``wait_s``.

    flock(2) locks die with their process, so a killed writer never leaves the index locked.
    """
    fd = os.open(directory / LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline or (should_stop is not None and should_stop()):
                    raise IndexBusy(f"another process is updating the index in {directory}") from None
                time.sleep(0.05)
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                os.unlink(directory / PROGRESS)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def write_progress(directory: Path, data: dict[str, Any]) -> None:
    body = {"pid": os.getpid(), "host": socket.gethostname(), "updated_at": time.time(), **data}
    _atomic_write(directory / PROGRESS, json.dumps(body).encode(), durable=False)  # advisory only


def read_progress(directory: Path) -> dict[str, Any] | None:
    """A running writer's progress, or None (no writer, or a dead one's leftover file)."""
    try:
        data = json.loads((directory / PROGRESS).read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    if data.get("host") == socket.gethostname():
        try:
            os.kill(int(data.get("pid", 0)), 0)
        except (OSError, ValueError):
            return None
    return data


def directory_bytes(directory: Path) -> int:
    total = 0
    for dirpath, _, files in os.walk(directory):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, f)).st_size
    return total
