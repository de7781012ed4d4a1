"""A small per-session cache of converted pages, so ``offset`` paging reads one consistent copy.

Keyed by (request URL, format, body_only); an entry lives ``TTL_S`` and the cache holds at most
``MAX_ENTRIES`` documents and ``MAX_CHARS_TOTAL`` characters (least recently used evicted). Only
a call with ``offset > 0`` reads it: a first page always fetches fresh. The cache object is not
JSON, so it never enters a session snapshot; a resumed session simply fetches again.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

SESSION_KEY = "web_fetch.cache"
TTL_S = 300.0
MAX_ENTRIES = 8
MAX_CHARS_TOTAL = 16_000_000


@dataclass(frozen=True, slots=True)
class CachedDoc:
    text: str
    final_anchor: str
    status: int
    content_type: str
    title: str | None
    redirects: int
    body_bytes: int


class FetchCache:
    def __init__(self) -> None:
        self._entries: OrderedDict[tuple[Any, ...], tuple[float, CachedDoc]] = OrderedDict()
        self._lock = threading.Lock()

    @classmethod
    def of(cls, session_state: dict[str, Any]) -> FetchCache:
        cache = session_state.get(SESSION_KEY)
        if not isinstance(cache, FetchCache):
            cache = session_state.setdefault(SESSION_KEY, cls())
        return cache

    def get(self, key: tuple[Any, ...], now: float) -> CachedDoc | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or now - entry[0] > TTL_S:
                self._entries.pop(key, None)
                return None
            self._entries.move_to_end(key)
            return entry[1]

    def put(self, key: tuple[Any, ...], doc: CachedDoc, now: float) -> None:
        if len(doc.text) > MAX_CHARS_TOTAL:
            return
        with self._lock:
            self._entries[key] = (now, doc)
            self._entries.move_to_end(key)
            while (
                len(self._entries) > MAX_ENTRIES
                or sum(len(d.text) for _, d in self._entries.values()) > MAX_CHARS_TOTAL
            ):
                self._entries.popitem(last=False)
