"""Search results: one row per hit, cleaned, de-duplicated and merged across engines (SPEC W-1, W-5).

- A ``Hit`` is what an engine returned: title, URL, snippet, the engine, its rank there.
- ``clean_url`` unwraps redirect wrappers (Google ``/url?q=``, DuckDuckGo ``uddg=``, Bing
  ``/ck/a?u=a1<base64>``) and drops hits that are not ``http(s)`` or that point back into a search
  engine's own navigation (``google.com/search``, ``duckduckgo.com``, ``bing.com/search`` …).
- ``merge`` de-duplicates by a normalised URL key (scheme-less, lower-case host without ``www.``,
  no fragment or tracking parameters, no trailing slash) and scores by reciprocal rank fusion
  (``1/(60 + rank)`` summed over engines); ties keep the first-seen order.
- Field limits (REFERENCE 4.10): title ≤ 2 KiB, content ≤ 4 KiB (UTF-8, cut on a character).
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

RRF_K = 60
MAX_TITLE_BYTES = 2048
MAX_CONTENT_BYTES = 4096
MAX_UNWRAPS = 8  # redirect wrappers (Google /url, DuckDuckGo uddg, Bing /ck/a) undone per link
TRACKING_PREFIXES = ("utm_", "fbclid", "gclid", "mc_cid", "mc_eid", "ref_src")
_SPACE = re.compile(r"\s+")
NAVIGATION = (
    re.compile(r"^(www\.)?google\.[a-z.]+$"),
    re.compile(r"^([a-z]+\.)?duckduckgo\.com$"),
    re.compile(r"^(www\.|cn\.)?bing\.com$"),
    re.compile(r"^search\.brave\.com$"),
    re.compile(r"^(www\.)?baidu\.com$"),
    re.compile(r"^(www\.)?sogou\.com$"),
    re.compile(r"^(www\.)?so\.com$"),
)


def cut_utf8(text: str, limit: int) -> str:
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    return data[:limit].decode("utf-8", "ignore").rstrip() + "…"


def tidy(text: str | None) -> str:
    return _SPACE.sub(" ", text or "").strip()


@dataclass
class Hit:
    title: str
    url: str
    content: str
    engine: str
    rank: int
    published_date: str | None = None


@dataclass
class Row:
    """A merged result."""

    title: str
    url: str
    content: str
    engines: set[str] = field(default_factory=set)
    score: float = 0.0  # reciprocal-rank fusion score, as shown
    published_date: str | None = None
    full_text: str | None = None
    rrf: float = 0.0  # reciprocal-rank fusion over the engines that returned it
    match: float | None = None  # query match (gate.query_match)

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {
            "title": cut_utf8(self.title, MAX_TITLE_BYTES),
            "url": self.url,
            "content": cut_utf8(self.content, MAX_CONTENT_BYTES),
            "engines": sorted(self.engines),
            "score": round(self.score, 6),
            "published_date": self.published_date,
        }
        if self.full_text is not None:
            out["full_text"] = self.full_text
        return out


def _bing_target(query: dict[str, str]) -> str | None:
    u = query.get("u", "")
    if not u.startswith("a1"):
        return None
    raw = u[2:]
    try:
        return base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return None


def clean_url(href: str | None, base: str | None = None, unwrapped: int = 0) -> str | None:
    """The destination a result link points to, or None for non-results (and for links wrapped in
    more than ``MAX_UNWRAPS`` redirect wrappers: a 75 KB href of 3,000 nested Google wrappers
    recursed past Python's limit and failed the whole search)."""
    if not href or unwrapped > MAX_UNWRAPS:
        return None
    href = href.strip()
    if href.startswith("//"):
        href = "https:" + href
    elif href.startswith("/") and base:
        parts = urlsplit(base)
        href = f"{parts.scheme}://{parts.netloc}{href}"
    try:
        parts = urlsplit(href)
    except ValueError:
        return None
    host = (parts.hostname or "").lower()
    query = dict(parse_qsl(parts.query))
    if re.match(r"^(www\.)?google\.", host) and parts.path == "/url":
        return clean_url(query.get("q") or query.get("url"), unwrapped=unwrapped + 1)
    if host.endswith("duckduckgo.com") and "uddg" in query:
        return clean_url(unquote(query["uddg"]), unwrapped=unwrapped + 1)
    if host.endswith("bing.com") and parts.path.startswith("/ck/"):
        return clean_url(_bing_target(query), unwrapped=unwrapped + 1)
    if parts.scheme not in ("http", "https") or not host:
        return None
    if any(p.match(host) for p in NAVIGATION):
        return None
    return urlunsplit((parts.scheme, parts.netloc, parts.path or "/", parts.query, ""))


def url_key(url: str) -> str:
    parts = urlsplit(url)
    host = (parts.hostname or "").lower().removeprefix("www.")
    kept = [
        (k, v)
        for k, v in parse_qsl(parts.query, keep_blank_values=True)
        if not k.lower().startswith(TRACKING_PREFIXES)
    ]
    path = parts.path.rstrip("/") or "/"
    return f"{host}{':' + str(parts.port) if parts.port else ''}{path}{'?' + urlencode(sorted(kept)) if kept else ''}"


def host_of(url: str) -> str:
    return (urlsplit(url).hostname or "").lower().removeprefix("www.")


def merge(hits: list[Hit]) -> list[Row]:
    rows: dict[str, Row] = {}
    order: list[str] = []
    for hit in hits:
        key = url_key(hit.url)
        row = rows.get(key)
        if row is None:
            row = rows[key] = Row(
                tidy(hit.title), hit.url, tidy(hit.content), published_date=hit.published_date
            )
            order.append(key)
        elif len(tidy(hit.content)) > len(row.content):
            row.content = tidy(hit.content)
        row.engines.add(hit.engine)
        row.rrf += 1.0 / (RRF_K + hit.rank)
        row.score = row.rrf
        if not row.title:
            row.title = tidy(hit.title)
    position = {key: i for i, key in enumerate(order)}
    ranked = sorted(order, key=lambda k: (-rows[k].rrf, position[k]))
    return [rows[k] for k in ranked]
