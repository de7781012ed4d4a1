"""BM25 over 80-line chunks: the code-aware tokenizer, the chunk index and numpy scoring (SPEC Q-5).

Tokenizer (REFERENCE 4.4): a word is a run of alphanumeric or ``_`` characters. A word emits its
lowercase whole form, then each ``_``-separated segment, then the camelCase / acronym / letter-digit
parts of each segment (``HTTPServer2`` → ``httpserver2 http server 2``), de-duplicated in that
order. CJK characters (Han, kana, Hangul) are not part of words: each emits itself plus the bigram
with the CJK character right before it. Tokens of a document are all tokens of all its words.

Scoring: Okapi BM25, k1 = 1.2, b = 0.75, IDF = ln(1 + (N − df + 0.5)/(df + 0.5)), N = chunks
scored, average length floored at 1; only finite scores > 0 are kept; order = score desc, path
asc, start line asc. Chunks are 80 lines, at most 128 per file.

Why numpy and not tantivy: a query only needs term frequencies of its own (≤ 32) terms. Words are
mapped once to integer ids in a per-session vocabulary that also keeps token → word-id postings,
so scoring is a few vectorised gathers over the chunk's word-id array — no per-term index of the
whole corpus is ever built (tantivy, rank-bm25 and bm25s all build one), which is what makes the
cold query fast; the word-id arrays are cached per file digest, which makes the warm query fast.
"""

from __future__ import annotations

import math
import re
import threading
from array import array
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

K1 = 1.2
B = 0.75
CHUNK_LINES = 80
MAX_CHUNKS_PER_FILE = 128
MAX_VOCAB_WORDS = 2_000_000
MAX_CACHED_WORDS = 16_000_000  # word ids kept across calls (4 bytes each)

_CJK_RANGES = (
    "\u1100-\u11ff"  # Hangul Jamo
    "\u3040-\u309f"  # Hiragana
    "\u30a0-\u30ff"  # Katakana
    "\u31f0-\u31ff"  # Katakana extensions
    "\u3400-\u4dbf"  # CJK Extension A
    "\u4e00-\u9fff"  # CJK Unified Ideographs
    "\uac00-\ud7af"  # Hangul syllables
    "\uf900-\ufaff"  # CJK Compatibility Ideographs
    "\U00020000-\U0002fa1f"  # CJK Extensions B-F, compatibility supplement
)
WORD_RE = re.compile(f"[{_CJK_RANGES}]+|[^\\W{_CJK_RANGES}]+")
_CJK_RE = re.compile(f"[{_CJK_RANGES}]")


def _kind(ch: str) -> str:
    if ch.isdigit() or ch.isnumeric():
        return "D"
    if ch.isupper():
        return "U"
    return "L"  # lowercase, caseless letters and '_'-free others


_ASCII_CAMEL_RE = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")


def camel_parts(segment: str) -> list[str]:
    """``HTTPServer2`` → ``HTTP``, ``Server``, ``2``; ``parseJSON`` → ``parse``, ``JSON``."""
    if len(segment) < 2:
        return [segment] if segment else []
    if segment.isascii() and segment.isalnum():
        return _ASCII_CAMEL_RE.findall(segment)  # same cuts as the loop below, at C speed
    kinds = [_kind(c) for c in segment]
    parts: list[str] = []
    start = 0
    for i in range(1, len(segment)):
        a, b = kinds[i - 1], kinds[i]
        cut = False
        if (a == "D") != (b == "D"):
            cut = True
        elif a == "L" and b == "U":
            cut = True
        elif a == "U" and b == "U" and i + 1 < len(segment) and kinds[i + 1] == "L":
            cut = True
        if cut:
            parts.append(segment[start:i])
            start = i
    parts.append(segment[start:])
    return parts


def tokenize_word(word: str) -> list[str]:
    """The tokens one ``WORD_RE`` match emits (see the module docstring)."""
    if word.isascii() and word.isalpha() and word.islower():
        return [word]  # the common case: nothing to split
    if _CJK_RE.match(word):
        out: list[str] = []
        for i, ch in enumerate(word):
            out.append(ch)
            if i:
                out.append(word[i - 1 : i + 1])
        return out
    seen: dict[str, None] = {word.lower(): None}
    segments = [s for s in word.split("_") if s]
    for seg in segments:
        seen.setdefault(seg.lower(), None)
    for seg in segments:
        for part in camel_parts(seg):
            seen.setdefault(part.lower(), None)
    return list(seen)


def tokenize(text: str) -> list[str]:
    """All tokens of ``text`` in order (repeats kept: term frequency counts them)."""
    out: list[str] = []
    for word in WORD_RE.findall(text):
        out.extend(tokenize_word(word))
    return out


def query_terms(query: str) -> list[str]:
    """Unique tokens of a query, first occurrence order."""
    return list(dict.fromkeys(tokenize(query)))


class Vocabulary(dict[str, int]):
    """word → id; ``ntok[id]`` = tokens the word emits; ``postings[token]`` = ids emitting it.

    A dict subclass so that ``map(vocab.__getitem__, words)`` runs at C speed and only new words
    reach Python (``__missing__``). A CJK run may emit a token twice: its id is then listed twice.
    """

    def __init__(self) -> None:
        super().__init__()
        self.ntok: array[int] = array("i")
        self.postings: dict[str, list[int]] = {}

    def __missing__(self, word: str) -> int:
        wid = len(self.ntok)
        toks = tokenize_word(word)
        self[word] = wid
        self.ntok.append(len(toks))
        postings = self.postings
        for tok in toks:
            lst = postings.get(tok)
            if lst is None:
                postings[tok] = [wid]
            else:
                lst.append(wid)
        return wid


@dataclass(frozen=True, slots=True)
class FileIndex:
    """One file's chunks: word ids (flat), chunk offsets into them, 1-based line ranges."""

    ids: np.ndarray
    offsets: np.ndarray  # len = chunks + 1
    ranges: tuple[tuple[int, int], ...]


def split_lines(text: str) -> list[str]:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def index_lines(lines: list[str], vocab: Vocabulary) -> FileIndex:
    n = len(lines)
    chunks = min(math.ceil(n / CHUNK_LINES), MAX_CHUNKS_PER_FILE)
    flat: array[int] = array("i")
    offsets = [0]
    ranges = []
    findall = WORD_RE.findall
    get = vocab.__getitem__
    for c in range(chunks):
        s = c * CHUNK_LINES
        e = min(s + CHUNK_LINES, n)
        flat.extend(map(get, findall("\n".join(lines[s:e]))))
        offsets.append(len(flat))
        ranges.append((s + 1, e))
    return FileIndex(
        ids=np.frombuffer(flat, dtype=np.int32).copy() if len(flat) else np.zeros(0, np.int32),
        offsets=np.asarray(offsets, dtype=np.int64),
        ranges=tuple(ranges),
    )


@dataclass(frozen=True, slots=True)
class ScoredChunk:
    file: int  # index into the scored files
    chunk: int  # chunk number within the file
    score: float


def score(files: list[FileIndex], terms: list[str], vocab: Vocabulary) -> tuple[list[ScoredChunk], int]:
    """BM25 of every chunk of ``files`` for ``terms``; (chunks with finite score > 0, chunks scored)."""
    counts = [len(f.ranges) for f in files]
    total_chunks = sum(counts)
    if not total_chunks or not terms:
        return [], total_chunks
    ids = np.concatenate([f.ids for f in files]) if files else np.zeros(0, np.int32)
    # Global chunk offsets into `ids`.
    bounds = [np.zeros(1, np.int64)]
    base = 0
    for f in files:
        bounds.append(f.offsets[1:] + base)
        base += int(f.offsets[-1])
    offsets = np.concatenate(bounds)
    ntok = np.frombuffer(vocab.ntok, dtype=np.int32)
    cum = np.zeros(len(ids) + 1, np.int64)
    if len(ids):
        np.cumsum(ntok[ids], out=cum[1:])
    dl = (cum[offsets[1:]] - cum[offsets[:-1]]).astype(np.float64)

    posting = [np.asarray(vocab.postings.get(t, ()), dtype=np.int64) for t in terms]
    nonempty = [p for p in posting if len(p)]
    if not nonempty or not len(ids):
        return [], total_chunks
    relevant = np.unique(np.concatenate(nonempty))
    row_of = np.full(len(ntok), -1, np.int64)
    row_of[relevant] = np.arange(len(relevant))
    weights = np.zeros((len(relevant), len(terms)), np.float64)
    for t, p in enumerate(posting):
        if len(p):
            np.add.at(weights[:, t], row_of[p], 1.0)
    rows_all = row_of[ids]
    pos = np.flatnonzero(rows_all >= 0)
    rows = rows_all[pos]
    chunk_of = np.searchsorted(offsets, pos, side="right") - 1
    tf = np.zeros((total_chunks, len(terms)), np.float64)
    for t in range(len(terms)):
        w = weights[rows, t]
        if w.any():
            tf[:, t] = np.bincount(chunk_of, weights=w, minlength=total_chunks)
    df = (tf > 0).sum(axis=0).astype(np.float64)
    n = float(total_chunks)
    idf = np.log1p((n - df + 0.5) / (df + 0.5))
    avgdl = max(1.0, float(dl.mean()))
    norm = K1 * (1.0 - B + B * dl / avgdl)
    with np.errstate(divide="ignore", invalid="ignore"):
        per_term = idf * (tf * (K1 + 1.0)) / (tf + norm[:, None])
    scores = np.where(tf > 0, per_term, 0.0).sum(axis=1)
    keep = np.flatnonzero(np.isfinite(scores) & (scores > 0))
    file_of = np.repeat(np.arange(len(files)), counts)
    first_chunk = np.concatenate([[0], np.cumsum(counts)[:-1]])
    out = [
        ScoredChunk(file=int(file_of[c]), chunk=int(c - first_chunk[file_of[c]]), score=float(scores[c]))
        for c in keep
    ]
    return out, total_chunks


class Bm25Cache:
    """Per-session vocabulary + word-id arrays of files seen before, keyed by (path, digest)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.vocab = Vocabulary()
        self.files: OrderedDict[tuple[str, bytes], FileIndex] = OrderedDict()
        self.words = 0

    def get(self, key: tuple[str, bytes]) -> FileIndex | None:
        hit = self.files.get(key)
        if hit is not None:
            self.files.move_to_end(key)
        return hit

    def put(self, key: tuple[str, bytes], index: FileIndex) -> None:
        self.files[key] = index
        self.words += len(index.ids)
        while self.words > MAX_CACHED_WORDS and len(self.files) > 1:
            _, old = self.files.popitem(last=False)
            self.words -= len(old.ids)

    def maybe_reset(self) -> None:
        """Vocabulary ids are only valid with their cache: drop both when the vocabulary is too big."""
        if len(self.vocab) > MAX_VOCAB_WORDS:
            self.vocab = Vocabulary()
            self.files.clear()
            self.words = 0
