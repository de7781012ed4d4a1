"""``ObjectStoreWorkspace``: a read-only bucket of objects, listed with a scan cap (SPEC S-3, Q-3).

Object stores list keys page by page and have no directories, so a listing is capped: at most
``max_scan_objects`` keys are visited per scan, in key order. A scan that hit the cap says so —
``walk_files`` returns a ``CappedScan`` whose ``truncated`` is set once it stops early — and the
search tool turns that into ``metadata.search.truncated`` plus a warning, so totals and path lists
are never silently incomplete. ``list_dir`` answers one level like a delimiter listing (for
``ls``); whole-tree scans go through ``walk_files`` (``flat_listing`` tells the search walk so).

Non-local and read-only: ``read`` and ``search`` are offered; ``write``/``edit``/``patch``/``bash``/
``download``/``git`` are not. The objects live in memory here (a mapping of key → bytes); a real
S3/GCS client implements the same methods (``open_file`` as ranged GETs).

Reads are bounded like a directory's: ``open_file`` streams an object (here: a view of the stored
bytes, never a copy), ``read_bytes`` refuses objects over ``MAX_READ_BYTES`` (``invalid_argument``,
reason ``too_large``) before fetching them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import BinaryIO

from kernel.beneath import names_directory, not_a_directory
from kernel.errors import InvalidArgument, NotFound
from kernel.workspace import Entry, MemoryFile, check_read_size, normalize_relative

DEFAULT_MAX_SCAN_OBJECTS = 10_000


class CappedScan:
    """An iterator over a scan's entries; ``truncated`` is True once the cap stopped it."""

    def __init__(self, entries: Iterator[Entry], cap: int) -> None:
        self._entries = entries
        self._left = cap
        self.truncated = False

    def __iter__(self) -> CappedScan:
        return self

    def __next__(self) -> Entry:
        entry = next(self._entries)  # StopIteration ends the scan normally
        if self._left == 0:
            self.truncated = True
            raise StopIteration
        self._left -= 1
        return entry


class ObjectStoreWorkspace:
    # Scans must use walk_files (flat, capped), not a directory-by-directory list_dir walk.
    flat_listing = True

    def __init__(
        self,
        bucket: str,
        objects: Mapping[str, bytes],
        *,
        mtime_ns: int = 0,
        max_scan_objects: int = DEFAULT_MAX_SCAN_OBJECTS,
    ) -> None:
        if max_scan_objects < 1:
            raise InvalidArgument("max_scan_objects must be >= 1")
        self._bucket = bucket
        self._objects = {normalize_relative(k): bytes(v) for k, v in objects.items()}
        self._keys = sorted(self._objects)
        self._mtime_ns = mtime_ns
        self.max_scan_objects = max_scan_objects

    @property
    def name(self) -> str:
        return f"objectstore:{self._bucket}"

    @property
    def capabilities(self) -> frozenset[str]:
        return frozenset({"read", "search"})

    @property
    def root(self) -> Path | None:
        return None

    def normalize(self, path: str) -> str:
        return normalize_relative(path)

    def _entry(self, key: str) -> Entry:
        return Entry(path=key, kind="file", size=len(self._objects[key]), mtime_ns=self._mtime_ns, mode=0o444)

    def stat(self, path: str) -> Entry:
        key = normalize_relative(path)
        if key in self._objects:
            if names_directory(path):
                raise not_a_directory(path)  # an object is a file: 'key/' is ENOTDIR (kernel.beneath)
            return self._entry(key)
        if not key or any(k.startswith(key + "/") for k in self._keys):
            return Entry(path=key, kind="dir", size=0, mtime_ns=self._mtime_ns, mode=0o555)
        raise NotFound(f"no such object: {path}", path=path)

    def _object(self, path: str) -> bytes:
        key = normalize_relative(path)
        if key in self._objects and names_directory(path):
            raise not_a_directory(path)
        try:
            return self._objects[key]
        except KeyError:
            raise NotFound(f"File not found: {path}", path=path) from None

    def read_bytes(self, path: str) -> bytes:
        data = self._object(path)
        check_read_size(path, len(data))
        return data

    def open_file(self, path: str) -> BinaryIO:
        """The object as a stream (``size``: its length); the stored bytes are shared, not copied."""
        return MemoryFile(self._object(path))

    def list_dir(self, path: str) -> list[Entry]:
        """One level of keys under ``path``, as an object store's delimiter listing gives it
        (common prefixes become directories). Scans use ``walk_files``, which honours the cap."""
        prefix = normalize_relative(path)
        if prefix in self._objects:
            raise InvalidArgument(f"{path} is an object, not a prefix")
        start = prefix + "/" if prefix else ""
        out: dict[str, Entry] = {}
        for key in self._keys:
            if not key.startswith(start):
                continue
            head, sep, _ = key[len(start) :].partition("/")
            child = start + head
            if sep:
                out.setdefault(
                    child, Entry(path=child, kind="dir", size=0, mtime_ns=self._mtime_ns, mode=0o555)
                )
            else:
                out[child] = self._entry(child)
        if prefix and not out:
            raise NotFound(f"no such prefix: {path}", path=path)
        return sorted(out.values(), key=lambda e: e.name)

    def walk_files(self, path: str = "") -> CappedScan:
        prefix = normalize_relative(path)
        if prefix in self._objects:
            return CappedScan(iter([self._entry(prefix)]), self.max_scan_objects)
        start = prefix + "/" if prefix else ""
        keys = (k for k in self._keys if k.startswith(start))
        return CappedScan((self._entry(k) for k in keys), self.max_scan_objects)
