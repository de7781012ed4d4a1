"""Hybrid retrieval: four evidence channels fused by reciprocal rank (SPEC Q-6, REFERENCE 4.4).

Channels, each a ranked list of chunks ``(path, start_line)``:

- ``exact``: a case-sensitive grep (the search tool's own engines) for the *identifiers* in the
  query — words that look like code (``snake_case``, ``camelCase``, ``HTTPServer``, ``x2``, dotted
  or backticked names); chunks ranked by matching lines;
- ``lexical``: the bm25 mode's ranking for the query;
- ``symbol``: definitions (per-language regex, from the index) whose name is a query identifier or
  shares query terms;
- ``semantic``: exact cosine over the index.

Fusion: ``score = Σ_channels 1/(K + rank)`` with K = 60 and 1-based ranks, counting only a chunk's
first (best) rank per channel. Final order: chunks carrying an ``exact_identifier`` hit first,
then fused score desc, then path, then start line.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from kernel.workspace import Workspace
from tools.search import bm25
from tools.search.grep import GrepQuery, Guard, Line, build_query, pick_engine
from tools.search.retrieval import chunks as chunking

RRF_K = 60
CHANNELS = ("exact", "lexical", "symbol", "semantic")
MAX_CHANNEL_RESULTS = 50  # ranks kept per channel (deeper ranks add < 1/110 each)
MAX_EXACT_FILES = 256  # files whose matching lines the exact channel keeps
MAX_IDENTIFIERS = 8
MIN_PLAIN_TERM_CHARS = 3  # symbol channel: shorter query words are too common to be evidence

ChunkKey = tuple[str, int]  # (path, start_line)

_WORD = re.compile(r"`([^`]+)`|([A-Za-z_$][\w$]*(?:(?:\.|::|->)[A-Za-z_$][\w$]*)*)")
_STOP = frozenset(
    "a an and are as at be by do does for from how i in is it of on or the this that to what when where which who why with".split()
)


def looks_like_identifier(word: str) -> bool:
    """Code-shaped: has ``_``, an inner capital (camelCase/acronym) or a letter-digit mix."""
    if len(word) < 2:
        return False
    if "_" in word.strip("_") or "$" in word:
        return True
    if any(c.isupper() for c in word[1:]) and any(c.islower() for c in word):
        return True
    if word.isupper() and len(word) >= 3 and not word.isdigit():
        return True  # CONSTANT or acronym
    return any(c.isdigit() for c in word) and any(c.isalpha() for c in word)


def query_identifiers(query: str) -> list[str]:
    """Identifiers named in the query, in order: backticked words and code-shaped words.

    A dotted/``::`` path contributes each code-shaped part and its last part (``os.path.join`` →
    ``join``).
    """
    out: list[str] = []
    for m in _WORD.finditer(query):
        quoted, word = m.group(1), m.group(2)
        if quoted is not None:
            parts = re.findall(r"[A-Za-z_$][\w$]*", quoted)
            out.extend(parts[-1:] if parts else [])
            continue
        parts = re.split(r"\.|::|->", word)
        if len(parts) > 1:
            out.extend(p for p in parts[:-1] if looks_like_identifier(p))
            out.append(parts[-1])
        elif looks_like_identifier(word):
            out.append(word)
    seen = list(dict.fromkeys(p for p in out if len(p) >= 2))
    return seen[:MAX_IDENTIFIERS]


# --- channels --------------------------------------------------------------------------------------


class _LineSink:
    """Grep content sink that keeps only matching line numbers (no text is rendered)."""

    def __init__(self) -> None:
        self.lines: dict[str, list[int]] = {}

    def wants(self, path: str) -> bool:
        return path in self.lines or len(self.lines) < MAX_EXACT_FILES

    def add(self, path: str, lines: list[Line]) -> None:
        if path in self.lines or len(self.lines) < MAX_EXACT_FILES:
            self.lines[path] = [n for n, is_match, _ in lines if is_match]


def exact_channel(
    ws: Workspace,
    identifiers: list[str],
    *,
    path: str,
    include: str | None,
    setting: str,
    guard: Guard,
    accept: Callable[[str], bool] | None = None,
) -> list[ChunkKey]:
    """Chunks holding whole-word, case-sensitive matches of the identifiers (most matches first)."""
    if not identifiers:
        return []
    alts = "|".join(re.escape(i) for i in sorted(identifiers, key=lambda s: (-len(s), s)))
    # \b around `$`-names would not fire at the `$`; use explicit word-char look-arounds instead.
    pattern = f"(?:^|[^A-Za-z0-9_$])(?:{alts})(?:$|[^A-Za-z0-9_$])"
    q: GrepQuery = build_query(ws, pattern, path=path, include=include, case_sensitive=True, context=0)
    sink = _LineSink()
    pick_engine(setting, ws, q).content(ws, q, sink, guard)
    counts: dict[ChunkKey, int] = {}
    for p, nums in sink.lines.items():
        if accept is not None and not accept(p):
            continue
        for n in nums:
            start = chunking.chunk_start(n)
            if start is not None:
                counts[(p, start)] = counts.get((p, start), 0) + 1
    ranked = sorted(counts, key=lambda k: (-counts[k], k[0], k[1]))
    return ranked[:MAX_CHANNEL_RESULTS]


def symbol_channel(
    symbols: Iterable[tuple[str, str, chunking.Symbol]], query: str, identifiers: list[str]
) -> tuple[list[ChunkKey], dict[ChunkKey, str]]:
    """Chunks defining a symbol that the query names (exact name) or describes (shared terms).

    Returns the ranking and, per chunk, the digest of the file version the symbol came from.
    """
    exact = set(identifiers)
    folded = {i.lower() for i in identifiers}
    terms = {t for t in bm25.query_terms(query) if len(t) >= MIN_PLAIN_TERM_CHARS and t not in _STOP}
    scored: dict[ChunkKey, tuple[float, int, str]] = {}
    digests: dict[ChunkKey, str] = {}
    for path, digest, sym in symbols:
        if sym.name in exact:
            s = 100.0
        elif sym.name.lower() in folded:
            s = 50.0
        else:
            shared = len(terms & sym.terms)
            if not shared:
                continue
            # share of the name's own parts that the query covers: `parse_config` beats `parse_x_y_z`
            parts = max(1, len(sym.terms) - 1)  # the whole-word token is one of the terms
            s = shared + shared / parts
        start = chunking.chunk_start(sym.line)
        if start is None:
            continue
        key = (path, start)
        best = scored.get(key)
        if best is None or s > best[0]:
            scored[key] = (s, sym.line, sym.name)
            digests[key] = digest
    ranked = sorted(scored, key=lambda k: (-scored[k][0], k[0], scored[k][1]))
    return ranked[:MAX_CHANNEL_RESULTS], digests


# --- fusion ------------------------------------------------------------------------------------------


@dataclass(slots=True)
class Fused:
    path: str
    start_line: int
    score: float = 0.0
    ranks: dict[str, int] = field(default_factory=dict)  # channel → best 1-based rank
    exact_identifier: bool = False

    @property
    def key(self) -> ChunkKey:
        return (self.path, self.start_line)


def rrf_score(ranks: dict[str, int], k: int = RRF_K) -> float:
    return sum(1.0 / (k + r) for r in ranks.values())


def fuse(channels: dict[str, list[ChunkKey]], k: int = RRF_K) -> list[Fused]:
    """Reciprocal-rank fusion; a chunk's first (best) rank per channel counts once."""
    out: dict[ChunkKey, Fused] = {}
    for name, ranked in channels.items():
        for rank, key in enumerate(ranked, 1):
            item = out.get(key)
            if item is None:
                item = out[key] = Fused(key[0], key[1])
            if name not in item.ranks:  # later (worse) ranks of the same chunk do not count
                item.ranks[name] = rank
    for item in out.values():
        item.score = rrf_score(item.ranks, k)
        item.exact_identifier = "exact" in item.ranks
    return order(list(out.values()))


def order(items: list[Fused]) -> list[Fused]:
    """exact_identifier hits first, then fused score desc, path, start line."""
    return sorted(items, key=lambda f: (not f.exact_identifier, -f.score, f.path, f.start_line))


def describe(item: Fused) -> dict[str, Any]:
    return {
        "channels": dict(sorted(item.ranks.items(), key=lambda kv: CHANNELS.index(kv[0]))),
        "exact_identifier": item.exact_identifier,
    }
