"""The tantivy schema of the persistent index and how a file becomes its documents (SPEC Q-8).

One document per 80-line chunk (the bm25 mode's chunks, without its 128-chunk cap):

- ``body``: the chunk's bm25 tokens (``tools.search.bm25``'s tokenizer: identifier splitting,
  CJK unigrams + bigrams), joined by single spaces into a ``whitespace``-tokenized field with
  term frequencies — so tantivy counts exactly the tokens the bm25 mode counts, and its BM25
  (k1 1.2, b 0.75, the same IDF) scores the same terms. Words longer than ``MAX_WORD_CHARS``
  (base64 blobs, minified lines) are left out: they are no one's query and would bloat the terms;
- ``path`` (raw, stored; deletes a file's chunks by term), ``dir`` (raw, every ancestor directory;
  the ``path`` filter), ``digest`` (stored; the freshness check), ``start``/``end`` (stored and fast:
  1-based line range);
- ``fkey`` (raw, on a file's first chunk only): ``path NUL digest``, from which a manifest lost in
  a crash is rebuilt (``Searcher.terms_with_prefix``).
"""

from __future__ import annotations

import math
from typing import Any

from tools.search import bm25

CHUNK_LINES = bm25.CHUNK_LINES
MAX_WORD_CHARS = 128
MAX_TOKEN_CACHE = 500_000  # distinct words whose joined tokens are remembered during a build

F_BODY = "body"
F_PATH = "path"
F_DIR = "dir"
F_DIGEST = "digest"
F_START = "start"
F_END = "end"
F_FKEY = "fkey"


def build_schema() -> Any:
    import tantivy

    sb = tantivy.SchemaBuilder()
    sb.add_text_field(F_PATH, stored=True, tokenizer_name="raw", index_option="basic")
    sb.add_text_field(F_DIR, stored=False, tokenizer_name="raw", index_option="basic")
    sb.add_text_field(F_DIGEST, stored=True, tokenizer_name="raw", index_option="basic")
    sb.add_text_field(F_FKEY, stored=False, tokenizer_name="raw", index_option="basic")
    sb.add_unsigned_field(F_START, stored=True, fast=True)
    sb.add_unsigned_field(F_END, stored=True, fast=True)
    sb.add_text_field(F_BODY, stored=False, tokenizer_name="whitespace", index_option="freq")
    return sb.build()


def _joined(word: str) -> str:
    if len(word) > MAX_WORD_CHARS:
        return ""
    return " ".join(bm25.tokenize_word(word))


class _StrWords(dict[str, str]):
    def __missing__(self, word: str) -> str:
        got = self[word] = _joined(word)
        return got


class _AsciiWords(dict[bytes, str]):
    def __missing__(self, word: bytes) -> str:
        got = self[word] = _joined(word.decode("ascii"))
        return got


class JoinedTokens:
    """word → its bm25 tokens joined by spaces ('' for an over-long word), computed once per word.

    Dicts with ``__missing__`` so that ``map(cache.__getitem__, words)`` runs at C speed and only
    new words reach Python; an over-long word leaves an extra space, which the ``whitespace``
    tokenizer ignores.
    """

    def __init__(self) -> None:
        self.words = _StrWords()
        self.ascii = _AsciiWords()

    def trim(self) -> None:
        if len(self.words) + len(self.ascii) > MAX_TOKEN_CACHE:
            self.words.clear()
            self.ascii.clear()

    def text_chunk(self, text: str) -> str:
        return " ".join(map(self.words.__getitem__, bm25.WORD_RE.findall(text)))

    def ascii_chunk(self, words_bytes: list[bytes]) -> str:
        return " ".join(map(self.ascii.__getitem__, words_bytes))


def chunk_bodies(text: str, raw: bytes | None, tokens: JoinedTokens) -> list[tuple[int, int, str]]:
    """Every 80-line chunk of a file as (start line, end line, joined tokens).

    ``raw`` (the bytes ``text`` was decoded from, when they are plain UTF-8 without BOM) lets an
    ASCII file take the ``bytes.translate`` fast path — the same words ``WORD_RE`` finds.
    """
    out: list[tuple[int, int, str]] = []
    if raw is not None and raw.isascii():
        lines = raw.translate(bm25._ASCII_WORDS).split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        n = len(lines)
        for c in range(math.ceil(n / CHUNK_LINES)):
            s = c * CHUNK_LINES
            e = min(s + CHUNK_LINES, n)
            out.append((s + 1, e, tokens.ascii_chunk(b" ".join(lines[s:e]).split())))
        return out
    text_lines = bm25.split_lines(text)
    n = len(text_lines)
    for c in range(math.ceil(n / CHUNK_LINES)):
        s = c * CHUNK_LINES
        e = min(s + CHUNK_LINES, n)
        out.append((s + 1, e, tokens.text_chunk("\n".join(text_lines[s:e]))))
    return out


def ancestors(path: str) -> list[str]:
    """``a/b/c.py`` → ``["a", "a/b"]``."""
    parts = path.split("/")[:-1]
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]
