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
mapped once to integer ids in a per-session vocabulary that also keeps each word's token ids,
so a file's index is just its word-id array (cached per (path, content digest)); ASCII files are
cut into words with one ``bytes.translate`` + ``split`` (same words as ``WORD_RE`` on ASCII text,
five times faster). A ``Corpus`` is one candidate set's chunks (cached per tuple of (path,
digest), so a changed file makes a new corpus): chunk lengths once, and on first use its
inverted index — every (token, chunk) with its BM25 contribution, grouped by token, from one
SIMD sort of 32-bit keys — so any query, a new one too, is a gather of its terms' postings and
one ``bincount`` (bm25s' eager-scores design, built with vectorised numpy instead of per-token
Python).
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
MAX_CACHED_WORDS = 16_000_000  # token ids kept across calls (4 bytes each)
MAX_CACHED_CORPORA = 4
MAX_CACHED_CORPUS_WORDS = 16_000_000  # token ids held by cached corpora (4 bytes each)

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
    if word.isascii():
        return _tokenize_ascii_word(word)
    return _tokenize_word(word)


def _tokenize_ascii_word(word: str) -> list[str]:
    """``_tokenize_word`` for an ASCII word ([A-Za-z0-9_]+), at C speed where possible.

    One camel-regex pass over the whole word equals the passes over its ``_`` segments (no part
    contains ``_``, and ``_`` stops a run as the end of a segment would); an alphabetic word that
    is lower, upper or title case splits into nothing but itself.
    """
    low = word.lower()
    if word.isalpha() and (word.islower() or word.isupper() or word.istitle()):
        return [low]
    seen = dict.fromkeys([low])
    if "_" in word:
        seen.update(dict.fromkeys(seg for seg in low.split("_") if seg))
    seen.update(dict.fromkeys(map(str.lower, _ASCII_CAMEL_RE.findall(word))))
    return list(seen)


def _tokenize_word(word: str) -> list[str]:
    """The general rule (any script); ``tokenize_word`` dispatches ASCII words to a fast twin."""
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
    """word → id, plus each word's tokens as token ids: ``token_ids[token]`` and, for word ``w``,
    ``wtok[wtok_off[w]:wtok_off[w + 1]]`` (a CJK run may emit a token twice).

    A dict subclass so that ``map(vocab.__getitem__, words)`` runs at C speed and only new words
    reach Python (``__missing__``).
    """

    def __init__(self) -> None:
        super().__init__()
        self.token_ids: dict[str, int] = {}
        self.wtok: array[int] = array("i")
        self.wtok_off: array[int] = array("q", [0])
        self.ascii = _AsciiVocabulary(self)

    def __missing__(self, word: str) -> int:
        wid = len(self.wtok_off) - 1
        toks = tokenize_word(word)
        self[word] = wid
        token_ids = self.token_ids
        for tok in toks:
            tid = token_ids.get(tok)
            if tid is None:
                tid = token_ids[tok] = len(token_ids)
            self.wtok.append(tid)
        self.wtok_off.append(len(self.wtok))
        return wid

    def word_tokens(self, wid: int) -> array[int]:
        """The token ids word ``wid`` emits."""
        return self.wtok[self.wtok_off[wid] : self.wtok_off[wid + 1]]


class _AsciiVocabulary(dict[bytes, int]):
    """ASCII word bytes → the same ids as the str vocabulary (so both paths share one id space)."""

    def __init__(self, words: Vocabulary) -> None:
        super().__init__()
        self.words = words

    def __missing__(self, word: bytes) -> int:
        wid = self.words[word.decode("ascii")]
        self[word] = wid
        return wid


# ASCII bytes → themselves when part of a word ([A-Za-z0-9_]), '\n' kept, anything else → ' '.
_ASCII_WORDS = bytes(
    c if (c < 128 and (chr(c).isalnum() or c == 0x5F)) or c == 0x0A else 0x20 for c in range(256)
)


@dataclass(frozen=True, slots=True)
class FileIndex:
    """One file's chunks: token ids (flat, the document as BM25 counts it), chunk offsets into
    them, 1-based line ranges."""

    tokens: np.ndarray
    offsets: np.ndarray  # len = chunks + 1
    ranges: tuple[tuple[int, int], ...]


def _expand(starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """The concatenation of ``range(starts[i], starts[i] + lens[i])`` for every i, vectorised."""
    return np.arange(int(lens.sum()), dtype=np.int64) + np.repeat(starts - (np.cumsum(lens) - lens), lens)


def _file_index(
    flat: array[int], offsets: list[int], ranges: list[tuple[int, int]], vocab: Vocabulary
) -> FileIndex:
    """Word ids per chunk → the token ids they emit, per chunk."""
    words = np.frombuffer(flat, dtype=np.int32) if len(flat) else np.zeros(0, np.int32)
    wtok_off = np.frombuffer(vocab.wtok_off, dtype=np.int64)  # views: never kept (the arrays grow)
    start = wtok_off[words]
    lens = wtok_off[words + 1] - start
    del wtok_off
    cum = np.zeros(len(words) + 1, np.int64)
    np.cumsum(lens, out=cum[1:])
    tokens = np.frombuffer(vocab.wtok, dtype=np.int32)[_expand(start, lens)]  # a copy (fancy index)
    return FileIndex(tokens=tokens, offsets=cum[np.asarray(offsets, dtype=np.int64)], ranges=tuple(ranges))


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
    return _file_index(flat, offsets, ranges, vocab)


def index_text(text: str, vocab: Vocabulary, raw: bytes | None = None) -> FileIndex:
    """The index of one file's text; ``raw`` (its bytes, when ``text`` is their UTF-8 decoding)
    lets an ASCII file take the ``bytes.translate`` fast path. Same result as ``index_lines``."""
    if raw is None or not raw.isascii():
        return index_lines(split_lines(text), vocab)
    lines = raw.translate(_ASCII_WORDS).split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    n = len(lines)
    chunks = min(math.ceil(n / CHUNK_LINES), MAX_CHUNKS_PER_FILE)
    flat: array[int] = array("i")
    offsets = [0]
    ranges = []
    get = vocab.ascii.__getitem__
    for c in range(chunks):
        s = c * CHUNK_LINES
        e = min(s + CHUNK_LINES, n)
        flat.extend(map(get, b" ".join(lines[s:e]).split()))
        offsets.append(len(flat))
        ranges.append((s + 1, e))
    return _file_index(flat, offsets, ranges, vocab)


@dataclass(frozen=True, slots=True)
class ScoredChunk:
    file: int  # index into the scored files
    chunk: int  # chunk number within the file
    score: float


class Corpus:
    """The chunks of one ordered list of files, ready to score (BM25 over exactly these chunks).

    Built once per candidate set: token ids concatenated, chunk lengths, length norms. On first
    use it also builds its inverted index (``_Postings``: every (token, chunk) with its BM25
    contribution, grouped by token — one SIMD sort of 32-bit keys over corpus-local token ids),
    so a query, new or not, costs only its own postings: a gather of its terms' slices and one
    ``bincount``. Chunk ``i`` of the corpus is chunk ``chunk_in_file[i]`` of file ``file_of[i]``; chunk
    order is file order, then line order.
    """

    def __init__(self, files: list[FileIndex], vocab: Vocabulary) -> None:
        counts = np.asarray([len(f.ranges) for f in files], dtype=np.int64)
        self.n = int(counts.sum())
        self.vocab = vocab
        self.tokens = np.concatenate([f.tokens for f in files]) if files else np.zeros(0, np.int32)
        bounds = [np.zeros(1, np.int64)]
        base = 0
        for f in files:
            bounds.append(f.offsets[1:] + base)
            base += int(f.offsets[-1])
        self.offsets = np.concatenate(bounds)
        dl = np.diff(self.offsets).astype(np.float64)
        avgdl = max(1.0, float(dl.mean())) if self.n else 1.0
        self.norm = K1 * (1.0 - B + B * dl / avgdl)
        self.file_of = np.repeat(np.arange(len(files)), counts)
        first = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
        self.chunk_in_file = np.arange(self.n) - first[self.file_of] if self.n else np.zeros(0, np.int64)
        self.ranges = [r for f in files for r in f.ranges]  # 1-based (start, end) line of each chunk
        self._postings: _Postings | None = None

    @property
    def words(self) -> int:
        """Tokens held (what the caches count)."""
        return len(self.tokens)

    def _build_postings(self) -> _Postings:
        """Every (token, chunk) of the corpus with its BM25 contribution, grouped by token."""
        n = self.n
        vocab = self.vocab
        tokens = self.tokens
        chunk_of = np.repeat(np.arange(n, dtype=np.int64), np.diff(self.offsets))
        seen = np.zeros(len(vocab.token_ids), dtype=bool)
        seen[tokens] = True
        present = np.flatnonzero(seen)  # sorted global token ids in this corpus
        table = np.cumsum(seen, dtype=np.int64) - 1  # global token id → local id (where present)
        local = table[tokens]
        del seen, table
        # (local token, chunk) as one sortable key; 32 bits when it fits (a SIMD sort, ~10x faster)
        key_type = np.int32 if len(present) * n < 2**31 else np.int64
        key = local.astype(key_type) * key_type(n) + chunk_of.astype(key_type)
        del local, chunk_of
        key.sort()
        first = np.empty(len(key), dtype=bool)
        first[:1] = True
        np.not_equal(key[1:], key[:-1], out=first[1:])
        starts = np.flatnonzero(first)
        tf = np.diff(np.append(starts, len(key))).astype(np.float64)
        pairs = key[starts].astype(np.int64)
        token = pairs // n
        chunk = pairs - token * n
        counts = np.bincount(token, minlength=len(present))
        indptr = np.zeros(len(present) + 1, np.int64)
        np.cumsum(counts, out=indptr[1:])
        df = counts.astype(np.float64)
        idf = np.log1p((n - df + 0.5) / (df + 0.5))  # numpy's log1p, not libm's
        score = idf[token] * (tf * (K1 + 1.0)) / (tf + self.norm[chunk])
        return _Postings(present, indptr, chunk, score)

    def scores(self, terms: list[str]) -> np.ndarray:
        """BM25 of every chunk for ``terms`` (unique), summed in term order."""
        n = self.n
        if not n or not len(self.tokens) or not terms:
            return np.zeros(n, np.float64)
        if self._postings is None:
            self._postings = self._build_postings()
        post = self._postings
        get = self.vocab.token_ids.get
        tids = np.asarray([get(t, -1) for t in terms], dtype=np.int64)
        pos = np.minimum(np.searchsorted(post.tokens, tids), len(post.tokens) - 1)
        pos = pos[post.tokens[pos] == tids]  # tokens absent from this corpus drop out here
        start = post.indptr[pos]
        lens = post.indptr[pos + 1] - start
        # every term's postings slice, gathered at once, in term order: bincount then adds each
        # chunk's contributions term by term (the same sum, in the same order, as the formula)
        idx = _expand(start, lens)
        return np.bincount(post.chunk[idx], weights=post.score[idx], minlength=n)

    def ranked(self, terms: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(chunk numbers with a finite score > 0 by score desc then chunk order, all scores)."""
        scores = self.scores(terms)
        keep = np.flatnonzero(np.isfinite(scores) & (scores > 0))
        order = np.argsort(-scores[keep], kind="stable")
        return keep[order], scores


@dataclass(frozen=True, slots=True)
class _Postings:
    """A corpus' inverted index: ``tokens`` (sorted global token ids present); token
    ``tokens[i]``'s chunks are ``chunk[indptr[i]:indptr[i + 1]]`` (ascending) with their BM25
    contributions ``score`` (idf · tf·(k1+1) / (tf + norm))."""

    tokens: np.ndarray
    indptr: np.ndarray
    chunk: np.ndarray
    score: np.ndarray


def score(files: list[FileIndex], terms: list[str], vocab: Vocabulary) -> tuple[list[ScoredChunk], int]:
    """BM25 of every chunk of ``files`` for ``terms``; (chunks with finite score > 0, chunks scored)."""
    corpus = Corpus(files, vocab)
    if not corpus.n or not terms:
        return [], corpus.n
    scores = corpus.scores(terms)
    keep = np.flatnonzero(np.isfinite(scores) & (scores > 0))
    out = [
        ScoredChunk(file=int(corpus.file_of[c]), chunk=int(corpus.chunk_in_file[c]), score=float(scores[c]))
        for c in keep
    ]
    return out, corpus.n


class Bm25Cache:
    """Per-session vocabulary, word-id arrays of files seen before (keyed by (path, digest)), and
    the corpora of recent candidate sets (keyed by their tuple of (path, digest) keys)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.vocab = Vocabulary()
        self.files: OrderedDict[tuple[str, bytes], FileIndex] = OrderedDict()
        self.words = 0
        self.corpora: OrderedDict[tuple[tuple[str, bytes], ...], Corpus] = OrderedDict()
        self.corpus_words = 0

    def get(self, key: tuple[str, bytes]) -> FileIndex | None:
        hit = self.files.get(key)
        if hit is not None:
            self.files.move_to_end(key)
        return hit

    def put(self, key: tuple[str, bytes], index: FileIndex) -> None:
        self.files[key] = index
        self.words += len(index.tokens)
        while self.words > MAX_CACHED_WORDS and len(self.files) > 1:
            _, old = self.files.popitem(last=False)
            self.words -= len(old.tokens)

    def corpus(self, keys: tuple[tuple[str, bytes], ...], files: list[FileIndex]) -> Corpus:
        """The corpus of exactly these files (a content change changes a digest, hence the key)."""
        hit = self.corpora.get(keys)
        if hit is not None:
            self.corpora.move_to_end(keys)
            return hit
        corpus = Corpus(files, self.vocab)
        self.corpora[keys] = corpus
        self.corpus_words += corpus.words
        while len(self.corpora) > 1 and (
            len(self.corpora) > MAX_CACHED_CORPORA or self.corpus_words > MAX_CACHED_CORPUS_WORDS
        ):
            _, old = self.corpora.popitem(last=False)
            self.corpus_words -= old.words
        return corpus

    def maybe_reset(self) -> None:
        """Vocabulary ids are only valid with their cache: drop everything when it is too big."""
        if len(self.vocab) > MAX_VOCAB_WORDS:
            self.vocab = Vocabulary()
            self.files.clear()
            self.words = 0
            self.corpora.clear()
            self.corpus_words = 0
