"""Immutable, content-addressed artifacts for lossy tool outputs and large change sides (SPEC R-6).

URIs are ``a3s://tool-output/<sanitized_tool>/<sha256hex>``; ``put`` is idempotent on identical
content. Stores: in memory (embedded tests) and on disk (``<workspace>/.a3s/artifacts/``, see
``kernel/artifact_files.py``).
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections import OrderedDict
from typing import Protocol

from kernel.errors import NotFound

ARTIFACT_SCHEME = "a3s://tool-output/"
DEFAULT_MAX_ARTIFACTS = 256
DEFAULT_MAX_ARTIFACT_BYTES = 16 * 1024 * 1024
_TOOL_SAFE = re.compile(r"[^A-Za-z0-9_-]")


def sanitize_tool_name(tool: str) -> str:
    return _TOOL_SAFE.sub("_", tool) or "_"


def artifact_uri(tool: str, data: bytes) -> str:
    return f"{ARTIFACT_SCHEME}{sanitize_tool_name(tool)}/{hashlib.sha256(data).hexdigest()}"


def parse_uri(uri: str) -> tuple[str, str]:
    """``(tool, sha256hex)`` of an artifact URI; ``not_found`` for anything else."""
    if not uri.startswith(ARTIFACT_SCHEME):
        raise NotFound(f"not an artifact URI: {uri}", path=uri)
    rest = uri[len(ARTIFACT_SCHEME) :]
    tool, _, digest = rest.partition("/")
    if not tool or len(digest) != 64 or _TOOL_SAFE.search(tool) or not re.fullmatch(r"[0-9a-f]{64}", digest):
        raise NotFound(f"malformed artifact URI: {uri}", path=uri)
    return tool, digest


class ArtifactStore(Protocol):
    def put(self, tool: str, data: bytes) -> str:
        """Store ``data`` (idempotent) and return its URI."""
        ...

    def get(self, uri: str) -> bytes:
        """The exact stored bytes; ``not_found`` if evicted or never stored."""
        ...


class MemoryArtifactStore:
    """Bounded in-memory store; evicts oldest first beyond the count/byte limits."""

    def __init__(
        self, max_artifacts: int = DEFAULT_MAX_ARTIFACTS, max_bytes: int = DEFAULT_MAX_ARTIFACT_BYTES
    ) -> None:
        self.max_artifacts = max_artifacts
        self.max_bytes = max_bytes
        self._items: OrderedDict[str, bytes] = OrderedDict()
        self._total = 0
        self._lock = threading.Lock()

    def put(self, tool: str, data: bytes) -> str:
        uri = artifact_uri(tool, data)
        with self._lock:
            if uri in self._items:
                return uri
            self._items[uri] = bytes(data)
            self._total += len(data)
            while self._items and (len(self._items) > self.max_artifacts or self._total > self.max_bytes):
                if len(self._items) == 1:
                    break
                _, old = self._items.popitem(last=False)
                self._total -= len(old)
        return uri

    def get(self, uri: str) -> bytes:
        parse_uri(uri)
        with self._lock:
            try:
                return self._items[uri]
            except KeyError:
                raise NotFound(f"artifact not found: {uri}", path=uri) from None
