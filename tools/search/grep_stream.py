"""A file's text for the Python grep engine as runs of whole lines, so memory follows the run size.

The engine used to match a file whole: its bytes, its decoded text (up to 4 bytes a character) and
RE2's UTF-8 copy, ~6x a file of up to 64 MiB per grep. ``TextChunks`` turns the file's byte blocks
into runs of complete lines (each run ends with ``\\n`` except the file's last, which may be empty or
lack one) of about ``BLOCK_BYTES``; a line longer than that is carried whole into one run.

The decoding is ``grep_py.decode_text``'s, applied run by run, which gives the same text because
no decoding step crosses a line end: a ``\\n`` byte is never part of an invalid UTF-8 sequence (each
run decodes with U+FFFD exactly as the whole would), the UTF-8 BOM is dropped from the first run
only, a UTF-16 file (BOM) goes through the incremental decoder (equal to a one-shot decode), and a
NUL byte anywhere (a NUL character for UTF-16) marks the file ``binary`` — the caller discards what
it found in earlier runs.

Matching run by run gives the lines the whole-text search gives whenever a line's verdict does not
depend on text outside the line: true for every accepted pattern except one that turns multi-line
mode off (``(?-m:^)`` is the start of the *text*), which ``line_local`` detects; those are matched
as one run (the old memory cost, documented in docs/search.md).
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from tools.search.grep_local import UTF16_BOMS

BLOCK_BYTES = 1 << 20  # read size, and roughly the size of one run of lines
UTF8_BOM = b"\xef\xbb\xbf"
REPLACEMENT = "\ufffd".encode()
# A scoped group that turns multi-line mode off: ``^``/``$`` inside it are text anchors.
_MULTILINE_OFF = re.compile(r"\(\?[a-zA-Z]*-[a-zA-Z]*m[a-zA-Z]*:")


def line_local(pattern: str) -> bool:
    """Whether every line's verdict depends on that line alone (conservative: False when unsure)."""
    return _MULTILINE_OFF.search(pattern) is None


@dataclass(slots=True)
class Run:
    hay: Any  # UTF-8 bytes (RE2) or str (Python ``re``): whole lines
    # False: the required literal is not in it, so no line of it matches; ``hay`` is then the raw
    # UTF-8 bytes, kept only for line numbers and context lines (decoded with U+FFFD when shown).
    may_match: bool


class TextChunks:
    """Iterate ``Run``s of a file's text; then ``binary`` says whether the file was binary and
    ``needle_seen`` whether the raw bytes held the required literal (see ``file_may_match``)."""

    def __init__(self, blocks: Iterable[bytes], linear: bool, needle: bytes | None, whole: bool) -> None:
        self.blocks = blocks
        self.linear = linear
        self.needle = needle
        self.whole = whole  # one run for the whole file (patterns that are not ``line_local``)
        self.binary = False
        self.utf16 = False
        self.needle_seen = False

    def file_may_match(self) -> bool:
        """The whole-file pre-check of old, exactly: a UTF-8 file without the literal's bytes is
        skipped. Runs are skipped the same way, which only differs when the literal holds U+FFFD (a
        replaced invalid byte can then match a run that lacks the literal's bytes)."""
        return self.needle is None or self.utf16 or self.needle_seen

    def __iter__(self) -> Iterator[Run]:
        it = iter(self.blocks)
        first = b""
        while len(first) < 2:  # the BOM decides the decoding (a reader's first block is 64 KiB)
            block = next(it, None)
            if block is None:
                break
            first += block
        if first[:2] in UTF16_BOMS:
            self.utf16 = True
            yield from self._utf16(first, it)
        else:
            yield from self._utf8(first, it)

    def _utf8(self, first: bytes, rest: Iterator[bytes]) -> Iterator[Run]:
        needle = self.needle
        skip_runs = needle is not None and REPLACEMENT not in needle
        first_run = True
        for raw in _runs(_text_blocks(first, rest, self), self.whole):
            if self.binary:
                return
            seen = needle is None or needle in raw
            self.needle_seen = self.needle_seen or seen
            if first_run and raw.startswith(UTF8_BOM):  # the first run holds the BOM whole: no "\n" in it
                raw = raw[len(UTF8_BOM) :]
            first_run = False
            if skip_runs and not seen:
                yield Run(raw, False)  # for line numbers only: the engine never searches it
                continue
            yield Run(_utf8_hay(raw) if self.linear else raw.decode("utf-8", "replace"), True)

    def _utf16(self, first: bytes, rest: Iterator[bytes]) -> Iterator[Run]:
        decoder = codecs.getincrementaldecoder("utf-16")("replace")

        def texts() -> Iterator[str]:
            for block in _chain(first, rest):
                yield decoder.decode(block)
            yield decoder.decode(b"", True)

        for text in _runs(_nul_free(texts(), self), self.whole):
            if self.binary:
                return
            yield Run(text.encode("utf-8", "surrogatepass") if self.linear else text, True)


def _chain(first: bytes, rest: Iterator[bytes]) -> Iterator[bytes]:
    yield first
    yield from rest


def _text_blocks(first: bytes, rest: Iterator[bytes], state: TextChunks) -> Iterator[bytes]:
    """The raw blocks up to the first one holding a NUL byte (which marks the file binary)."""
    for block in _chain(first, rest):
        if b"\x00" in block:
            state.binary = True
            return
        yield block


def _nul_free(texts: Iterator[str], state: TextChunks) -> Iterator[str]:
    for text in texts:
        if "\x00" in text:
            state.binary = True
            return
        yield text


def _runs(pieces: Iterator[Any], whole: bool) -> Iterator[Any]:
    """Re-cut ``pieces`` (all bytes or all str) after their last line end: whole lines per run, the
    file's last (possibly empty, possibly without a line end) run last. The carry is kept as a
    list and joined once, so a line spanning many blocks costs one copy, not one per block."""
    pending: list[Any] = []
    empty: Any = None
    for piece in pieces:
        if empty is None:
            empty = piece[:0]
        if whole:
            pending.append(piece)
            continue
        cut = piece.rfind(b"\n" if isinstance(piece, bytes) else "\n")
        if cut < 0:
            pending.append(piece)
            continue
        if cut == len(piece) - 1:
            pending.append(piece)
            yield empty.join(pending)
            pending = []
            continue
        pending.append(piece[: cut + 1])
        yield empty.join(pending)
        pending = [piece[cut + 1 :]]
    yield (empty if empty is not None else b"").join(pending)


def _utf8_hay(raw: bytes) -> bytes:
    """RE2's haystack: ``raw`` itself when it is valid UTF-8, else its text with U+FFFD re-encoded
    (what ``decode_text(...).encode()`` gave for the whole file)."""
    if raw.isascii():
        return raw
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("utf-8", "replace").encode("utf-8", "surrogatepass")
    return raw
