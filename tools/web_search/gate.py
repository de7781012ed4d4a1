"""The structural retrieval gate (SPEC W-1, W-2; REFERENCE 4.10 ``RetrievalRequirements::for_limit``).

With ``target = min(limit, 5)``, evaluated on the ranked head (the first ``target`` usable rows):

- usable results ≥ ``target`` (an http(s) URL and a title);
- unique hosts ≥ ``min(target, 3)``;
- contributing engines ≥ 1;
- aligned results ≥ ``ceil(target / 2)``, a row being aligned when its query match ≥ 0.35;
- mean query match ≥ 0.30.

``rank`` orders the merged rows first — aligned rows before the rest, reciprocal-rank fusion within
each group — so the head holds the on-topic rows of every tier that ran.

Query match = 0.50·title + 0.45·snippet + 0.05·URL coverage. Coverage is the mean, over the
query's *units*, of how well each unit occurs in the field: 1 for an exact (case-folded)
occurrence, else the share of the unit's character 1–3-grams found in the field when that share is
at least ``FUZZY_FLOOR`` (so ``retries`` still matches ``retry``), else 0. Units are the query's
words (English stop words dropped unless nothing else is left) and, for CJK text, character
bigrams (single characters for one-character runs). A row whose script does not match the query's
(a CJK query answered by Latin-only text, or the reverse) has its match halved. No external
semantic validator or reranker is involved.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from tools.web_search.results import Row, host_of

ALIGNED_MATCH = 0.35
MIN_MEAN_MATCH = 0.30
MAX_TARGET = 5
FUZZY_FLOOR = 0.6
WEIGHTS = (0.50, 0.45, 0.05)  # title, snippet, url
MIXED_SCRIPT_PENALTY = 0.5
STOP_WORDS = frozenset(
    "a an and are as at be by for from how in is it of on or that the this to was what when where which who why with".split()
)
_WORD = re.compile(r"\w+", re.UNICODE)
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")
_LATIN = re.compile(r"[A-Za-z\u00c0-\u024f]")


@dataclass(frozen=True)
class Requirements:
    target: int
    min_usable_results: int
    min_unique_hosts: int
    min_contributing_engines: int
    min_aligned_results: int
    aligned_match: float = ALIGNED_MATCH
    min_mean_match: float = MIN_MEAN_MATCH

    @classmethod
    def for_limit(cls, limit: int) -> Requirements:
        target = max(1, min(limit, MAX_TARGET))
        return cls(target, target, min(target, 3), 1, math.ceil(target / 2))

    def to_json(self) -> dict[str, float | int]:
        return {
            "target": self.target,
            "min_usable_results": self.min_usable_results,
            "min_unique_hosts": self.min_unique_hosts,
            "min_contributing_engines": self.min_contributing_engines,
            "min_aligned_results": self.min_aligned_results,
            "aligned_match": self.aligned_match,
            "min_mean_match": self.min_mean_match,
        }


@dataclass(frozen=True)
class Health:
    usable_results: int
    unique_hosts: int
    contributing_engines: int
    aligned_results: int
    mean_match: float
    evaluated: int
    met: bool

    def to_json(self) -> dict[str, float | int | bool]:
        return {
            "usable_results": self.usable_results,
            "unique_hosts": self.unique_hosts,
            "contributing_engines": self.contributing_engines,
            "aligned_results": self.aligned_results,
            "mean_match": round(self.mean_match, 4),
            "evaluated": self.evaluated,
            "met": self.met,
        }


def _grams(text: str) -> set[str]:
    return {text[i : i + n] for n in (1, 2, 3) for i in range(len(text) - n + 1)}


def query_units(query: str) -> list[str]:
    words = [w.lower() for w in _WORD.findall(query)]
    units: list[str] = []
    for word in words:
        if _CJK.search(word):
            for run in re.findall(f"{_CJK.pattern}+", word):
                units.extend([run] if len(run) == 1 else [run[i : i + 2] for i in range(len(run) - 1)])
            rest = _CJK.sub(" ", word).split()
            units.extend(rest)
        else:
            units.append(word)
    content = [u for u in units if u not in STOP_WORDS]
    return list(dict.fromkeys(content or units))


def coverage(units: list[str], field: str) -> float:
    if not units:
        return 0.0
    text = field.lower()
    grams = _grams(text) if text else set()
    total = 0.0
    for unit in units:
        if unit in text:
            total += 1.0
            continue
        mine = _grams(unit)
        share = len(mine & grams) / len(mine) if mine else 0.0
        if len(unit) >= 4 and share >= FUZZY_FLOOR:
            total += share
    return total / len(units)


def query_match(query: str, row: Row) -> float:
    units = query_units(query)
    wt, ws, wu = WEIGHTS
    score = (
        wt * coverage(units, row.title) + ws * coverage(units, row.content) + wu * coverage(units, row.url)
    )
    body = f"{row.title} {row.content}"
    if _CJK.search(query) and not _CJK.search(body):
        score *= MIXED_SCRIPT_PENALTY
    elif (
        not _CJK.search(query) and _LATIN.search(query) and not _LATIN.search(row.title) and _CJK.search(body)
    ):
        score *= MIXED_SCRIPT_PENALTY
    return min(1.0, score)


def rank(rows: list[Row], query: str) -> list[Row]:
    """Aligned rows (query match ≥ 0.35) first, each group in reciprocal-rank-fusion order.

    Merging tiers by fusion rank alone would interleave a first tier's off-topic rows with a later
    tier's on-topic ones; the ranked head must lead with what matches the query, while the
    engines' own order still decides among relevant rows.
    """
    for row in rows:
        row.match = query_match(query, row)
    order = {id(r): i for i, r in enumerate(rows)}
    return sorted(rows, key=lambda r: (-int((r.match or 0.0) >= ALIGNED_MATCH), -r.rrf, order[id(r)]))


def usable(row: Row) -> bool:
    return bool(row.title) and row.url.startswith(("http://", "https://"))


def evaluate(rows: list[Row], query: str, req: Requirements) -> Health:
    head = [r for r in rows if usable(r)][: req.target]
    matches = [r.match if r.match is not None else query_match(query, r) for r in head]
    hosts = {host_of(r.url) for r in head}
    engines = set().union(*(r.engines for r in head)) if head else set()
    aligned = sum(1 for m in matches if m >= req.aligned_match)
    mean = sum(matches) / len(matches) if matches else 0.0
    met = (
        len(head) >= req.min_usable_results
        and len(hosts) >= req.min_unique_hosts
        and len(engines) >= req.min_contributing_engines
        and aligned >= req.min_aligned_results
        and mean >= req.min_mean_match
    )
    return Health(len(head), len(hosts), len(engines), aligned, mean, len(head), met)
