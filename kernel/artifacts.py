"""Immutable, content-addressed artifacts for lossy tool outputs and large change sides (SPEC R-6, B-3).

URIs are ``a3s://tool-output/<sanitized_tool>/<sha256hex>``; ``put`` is idempotent on identical
content. Stores: in memory (embedded tests) and on disk (``<workspace>/.a3s/artifacts/``, see
``kernel/artifact_files.py``).

Retention (REFERENCE §6.6): at most ``max_artifacts`` objects and ``max_bytes`` bytes; beyond that
the oldest are evicted first, skipping pinned (retained) URIs. The artifact just stored is never
the one evicted, so the URI ``put`` returns is always readable right after, even when that one
object alone exceeds ``max_bytes``. ``gc_unreferenced`` drops everything not pinned.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections import OrderedDict
from collections.abc import Iterable
from typing import Protocol, runtime_checkable

from kernel.errors import NotFound

ARTIFACT_SCHEME = "a3s://tool-output/"
DEFAULT_MAX_ARTIFACTS = 256
DEFAULT_MAX_ARTIFACT_BYTES = 16 * 1024 * 1024
# Bounds the tool segment of a URI, so the artifact line always fits the 512-byte marker reserve
# (SPEC R-4) and a file store never meets a name longer than a file name may be.
MAX_TOOL_SEGMENT_CHARS = 128
_TOOL_SAFE = re.compile(r"[^A-Za-z0-9_-]")
_HEX64 = re.compile(r"[0-9a-f]{64}")


def sanitize_tool_name(tool: str) -> str:
    """``[A-Za-z0-9_-]`` only (anything else becomes ``_``), at most ``MAX_TOOL_SEGMENT_CHARS``."""
    return _TOOL_SAFE.sub("_", tool)[:MAX_TOOL_SEGMENT_CHARS] or "_"


def uri_for_digest(tool: str, sha256_hex: str) -> str:
    return f"{ARTIFACT_SCHEME}{sanitize_tool_name(tool)}/{sha256_hex}"


def artifact_uri(tool: str, data: bytes) -> str:
    return uri_for_digest(tool, hashlib.sha256(data).hexdigest())


def artifact_id(tool: str, sha256_hex: str) -> str:
    """The reference's ``tool-output:<tool>:<hex>`` identity for the same object."""
    return f"tool-output:{sanitize_tool_name(tool)}:{sha256_hex}"


def parse_uri(uri: str) -> tuple[str, str]:
    """``(tool, sha256hex)`` of an artifact URI; ``not_found`` for anything else."""
    if not uri.startswith(ARTIFACT_SCHEME):
        raise NotFound(f"not an artifact URI: {uri}", path=uri)
    rest = uri[len(ARTIFACT_SCHEME) :]
    tool, _, digest = rest.partition("/")
    if (
        not tool
        or len(tool) > MAX_TOOL_SEGMENT_CHARS
        or _TOOL_SAFE.search(tool)
        or not _HEX64.fullmatch(digest)
    ):
        raise NotFound(f"malformed artifact URI: {uri}", path=uri)
    return tool, digest


class ArtifactStore(Protocol):
    def put(self, tool: str, data: bytes) -> str:
        """Store ``data`` (idempotent) and return its URI."""
        ...

    def get(self, uri: str) -> bytes:
        """The exact stored bytes; ``not_found`` if evicted or never stored."""
        ...


@runtime_checkable
class PrehashedArtifactStore(Protocol):
    """A store that accepts the SHA-256 the caller already computed (saves a pass over 10 MiB)."""

    def put_prehashed(self, tool: str, data: bytes, sha256_hex: str) -> str: ...


class MemoryArtifactStore:
    """Bounded in-memory store; evicts oldest first beyond the count/byte limits, skipping pins."""

    def __init__(
        self, max_artifacts: int = DEFAULT_MAX_ARTIFACTS, max_bytes: int = DEFAULT_MAX_ARTIFACT_BYTES
    ) -> None:
        self.max_artifacts = max_artifacts
        self.max_bytes = max_bytes
        self._items: OrderedDict[str, bytes] = OrderedDict()
        self._retained: set[str] = set()
        self._total = 0
        self._lock = threading.Lock()

    def put(self, tool: str, data: bytes) -> str:
        return self.put_prehashed(tool, data, hashlib.sha256(data).hexdigest())

    def put_prehashed(self, tool: str, data: bytes, sha256_hex: str) -> str:
        uri = uri_for_digest(tool, sha256_hex)
        with self._lock:
            if uri in self._items:
                return uri
            self._items[uri] = bytes(data)
            self._total += len(data)
            self._evict(keep=uri)
        return uri

    def get(self, uri: str) -> bytes:
        parse_uri(uri)
        with self._lock:
            try:
                return self._items[uri]
            except KeyError:
                raise NotFound(f"artifact not found: {uri}", path=uri) from None

    def __contains__(self, uri: object) -> bool:
        with self._lock:
            return uri in self._items

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    @property
    def total_bytes(self) -> int:
        with self._lock:
            return self._total

    def pin(self, uris: Iterable[str]) -> None:
        """Protect ``uris`` from eviction and GC until unpinned."""
        with self._lock:
            self._retained.update(u for u in uris if u)

    def set_retained_uris(self, uris: Iterable[str]) -> None:
        with self._lock:
            self._retained = {u for u in uris if u}

    def retained_uris(self) -> set[str]:
        with self._lock:
            return set(self._retained)

    def gc_unreferenced(self) -> int:
        """Remove every unpinned artifact; returns how many were removed."""
        with self._lock:
            doomed = [u for u in self._items if u not in self._retained]
            for uri in doomed:
                self._total -= len(self._items.pop(uri))
            return len(doomed)

    def _evict(self, keep: str) -> None:
        for uri in list(self._items):
            if len(self._items) <= self.max_artifacts and self._total <= self.max_bytes:
                return
            if uri == keep or uri in self._retained:
                continue
            self._total -= len(self._items.pop(uri))
