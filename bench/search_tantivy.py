"""tantivy as a bm25 peer for ``bench.search``: an in-RAM index over chunks pre-tokenized by us.

Invariants:
- tantivy sees exactly our tokens: each chunk is tokenized with ``tools.search.bm25``'s tokenizer
  (lowercase tokens, never containing whitespace) and the tokens are joined with single spaces
  into a ``whitespace``-tokenized field, so its term frequencies and chunk lengths count the same
  tokens ours do (DEPENDENCIES §6: the simplest pre-tokenized route).
- Queries are built from ``Query.term_query`` per term in one ``boolean_query`` of SHOULD clauses
  (a sum over the terms, like ours); never ``parse_query``, which would re-tokenize and treat
  words as syntax.
- ``limit`` is always ≥ 1: ``searcher.search(q, 0)`` panics with a ``BaseException``.
- One writer thread, one commit: one segment, documents in insertion order. The chunk number is
  also stored, and read back only outside the timings (to compare top results).

Why scores are compared, not asserted equal: tantivy's BM25 has our k1 = 1.2 and b = 0.75, the
same Lucene IDF ln(1 + (N − df + 0.5)/(df + 0.5)) and the same (k1 + 1) factor, but it stores each
document's length as a one-byte "fieldnorm" (exact for short documents, coarser buckets above)
and computes in f32. Chunk lengths near a bucket edge therefore change by a few percent, so
near-tied chunks can swap places and the top-10 lists may differ at the tail.
"""

from __future__ import annotations

from typing import Any

import tantivy

from tools.search import bm25

WRITER_HEAP_BYTES = 64_000_000  # tantivy needs ≥ 3 MB per writer thread; one thread here
WRITER_THREADS = 1  # one segment: deterministic doc order, and no thread hand-off cost
FIELD = "body"
NUMBER = "n"


class _JoinedTokens(dict[str, str]):
    """word → its tokens joined by spaces, computed once per distinct word (at C speed after)."""

    def __missing__(self, word: str) -> str:
        joined = self[word] = " ".join(bm25.tokenize_word(word))
        return joined


def token_docs(chunks: list[str]) -> list[str]:
    """Each chunk as our tokens joined by spaces — the fastest feed we found for tantivy.

    Same words as ours: an ASCII chunk is cut with the product's ``bytes.translate`` table (the
    words ``WORD_RE`` finds on ASCII text), any other with ``WORD_RE``; each distinct word is
    tokenized once.
    """
    cache = _JoinedTokens()
    get = cache.__getitem__
    table = bm25._ASCII_WORDS  # the product's own fast path (same words as WORD_RE on ASCII)
    out = []
    for c in chunks:
        if c.isascii():
            words = c.encode("ascii").translate(table).decode("ascii").split()
        else:
            words = bm25.WORD_RE.findall(c)
        out.append(" ".join(map(get, words)))
    return out


class TantivyBm25:
    """An in-RAM tantivy index of ``docs`` (space-joined token strings), searchable by terms."""

    def __init__(self, docs: list[str]) -> None:
        sb = tantivy.SchemaBuilder()
        # "freq": doc ids and term frequencies, no positions — all BM25 needs.
        sb.add_text_field(FIELD, stored=False, tokenizer_name="whitespace", index_option="freq")
        sb.add_unsigned_field(NUMBER, stored=True)
        self.schema = sb.build()
        self.index = tantivy.Index(self.schema)  # no path: RAM only
        writer = self.index.writer(heap_size=WRITER_HEAP_BYTES, num_threads=WRITER_THREADS)
        for n, text in enumerate(docs):
            writer.add_document(tantivy.Document(**{FIELD: text, NUMBER: n}))
        writer.commit()
        writer.wait_merging_threads()
        self.index.reload()
        self.searcher = self.index.searcher()

    def query(self, terms: list[str]) -> Any:
        clauses = [
            (tantivy.Occur.Should, tantivy.Query.term_query(self.schema, FIELD, t, index_option="freq"))
            for t in terms
        ]
        return tantivy.Query.boolean_query(clauses)

    def top(self, terms: list[str], k: int) -> list[tuple[float, Any]]:
        """The best ``k`` (score, DocAddress) for ``terms``; empty for no terms."""
        if not terms:
            return []
        return self.searcher.search(self.query(terms), max(1, k), count=False).hits

    def numbers(self, hits: list[tuple[float, Any]]) -> list[int]:
        """Chunk numbers of ``hits`` (reads stored fields: keep out of timings)."""
        return [int(self.searcher.doc(addr)[NUMBER][0]) for _, addr in hits]
