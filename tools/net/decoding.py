"""Content decoding that stops at a byte limit while it decodes (SPEC D-3, W-6).

httpx undoes ``Content-Encoding`` chunk by chunk with no bound on what one chunk inflates to:
gzip layered on gzip turns a kilobyte of body into a gigabyte in a single step, before a limit
that counts decoded bytes gets to look. ``BoundedDecoder`` decodes the raw body itself: every
layer yields at most ``STEP`` bytes per step, and the decoded total is checked after each step,
so memory stays near the limit whatever the server sends.

The compressed side is bounded too. Bytes after the end of a compressed stream (a second gzip
member, trailing junk) are dropped unread — zlib appends them to ``unused_data`` one copy at a
time, so an endless tail cost quadratic CPU on the event loop and unbounded memory (256 MiB of
tail: 45 s and 513 MiB). And each layer takes at most ``max_input(limit)`` bytes: no valid
encoding of ``limit`` decoded bytes is longer (deflate adds under 0.1 %), so a stream that decodes
to nothing — empty deflate blocks, an endless gzip file name, a tail — stops there as too large.

Encodings: ``gzip``/``x-gzip``, ``deflate`` (zlib-wrapped, or raw as some servers send it — httpx's
rule) and ``identity``; any other is passed through as it is, as httpx does (``SafeHttp`` asks for
``gzip, deflate`` only). At most ``MAX_LAYERS`` encodings.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator

import httpx

STEP = 64 * 1024
MAX_LAYERS = 4
ACCEPT_ENCODING = "gzip, deflate"
_GZIP = ("gzip", "x-gzip")


def max_input(limit: int) -> int:
    """The most compressed bytes one layer may take for ``limit`` decoded ones (generous slack)."""
    return limit + limit // 256 + STEP


class BodyTooLarge(Exception):
    """The decoded body passed the limit (nothing past one ``STEP`` beyond it was produced), or a
    layer's compressed input passed ``max_input(limit)``."""


class _Layer:
    def __init__(self, name: str, max_in: int) -> None:
        self.max_in = max_in
        self.taken = 0
        self.raw_fallback = name == "deflate"  # a deflate body may lack the zlib wrapper
        self.z = zlib.decompressobj(zlib.MAX_WBITS | 16 if name in _GZIP else zlib.MAX_WBITS)

    def steps(self, data: bytes) -> Iterator[bytes]:
        """``data`` decoded, at most ``STEP`` bytes at a time."""
        self.taken += len(data)
        if self.taken > self.max_in:
            raise BodyTooLarge
        while not self.z.eof:  # past the end: dropped, never handed to zlib (see the module doc)
            try:
                out = self.z.decompress(data, STEP)
            except zlib.error as exc:
                if not self.raw_fallback:
                    raise httpx.DecodingError(f"bad compressed body: {exc}") from None
                self.raw_fallback = False
                self.z = zlib.decompressobj(-zlib.MAX_WBITS)
                continue
            self.raw_fallback = False
            data = self.z.unconsumed_tail
            if out:
                yield out
            if not data and len(out) < STEP:
                return

    def finish(self) -> bytes:
        # Every input byte was consumed by ``steps``: only zlib's last few buffered bytes remain.
        try:
            return self.z.flush()
        except zlib.error as exc:  # pragma: no cover - zlib keeps truncation silent here
            raise httpx.DecodingError(f"bad compressed body: {exc}") from None


class BoundedDecoder:
    """Feed raw body chunks; get decoded bytes; ``BodyTooLarge`` as soon as they pass ``limit``."""

    def __init__(self, content_encoding: str, limit: int) -> None:
        names = [n.strip().lower() for n in content_encoding.split(",")]
        known = [n for n in names if n in (*_GZIP, "deflate")]
        if len(known) > MAX_LAYERS:
            raise httpx.DecodingError(f"more than {MAX_LAYERS} content encodings ({content_encoding[:80]!r})")
        # the last one applied is undone first
        self.layers = [_Layer(n, max_input(limit)) for n in reversed(known)]
        self.limit = limit
        self.total = 0

    def feed(self, raw: bytes) -> bytes:
        out: list[bytes] = []
        self._push(0, raw, out)
        return b"".join(out)

    def finish(self) -> bytes:
        out: list[bytes] = []
        for i, layer in enumerate(self.layers):
            self._push(i + 1, layer.finish(), out)
        return b"".join(out)

    def _push(self, i: int, data: bytes, out: list[bytes]) -> None:
        if not data:
            return
        if i == len(self.layers):
            self.total += len(data)
            if self.total > self.limit:
                raise BodyTooLarge
            out.append(data)
            return
        for piece in self.layers[i].steps(data):
            self._push(i + 1, piece, out)
