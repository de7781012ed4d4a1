"""Result-page parsers, one per engine shape (SPEC W-1; REFERENCE 4.10 engine list).

Each parser turns a page (or a feed, or an API's JSON) into ``(title, url, snippet, published)``
tuples in page order. HTML pages are parsed with lxml using the engines' public result markup:

- DuckDuckGo HTML (``div.result``, ``a.result__a``, ``.result__snippet``; links wrapped in ``uddg=``)
- Brave (``div[data-type=web]``: first link, ``.title``, ``.snippet-description``/``.description``)
- Bing and Bing China, cn.bing.com (``li.b_algo``: ``h2 a``, ``.b_caption p`` or ``.b_algoSlug``;
  links may be ``/ck/a?u=a1<base64>`` wrappers)
- Sogou (``div.vrwrap``: ``h3.vr-title a``, or the older ``div.rb``: ``h3.pt a``; the link is an
  opaque ``/link?url=`` redirect and the destination sits in the block's ``data-url``; snippet
  ``.space-txt``/``.str-text``/``.star-wiki``/``.ft``; date ``.cite-date``)
- 360 Search, so.com (``li.res-list``: ``h3.res-title a`` whose ``data-mdurl`` holds the destination
  behind the ``so.com/link?m=`` wrapper; snippet ``.res-desc``/``.res-list-summary``/``.res-rich``)
- Wikipedia search (``li.mw-search-result``: heading link, ``.searchresult``)
- Google (``a`` containing ``h3``; snippet from the result block; ``/url?q=`` wrappers)
- Baidu (``div.result``/``div.c-container``: ``h3 a``, ``.c-abstract``/``[class*=content]``)
- RSS/Atom through ``feedparser``; SearXNG, Tavily and Brave Search API as JSON.

A parser takes the search's ``stopped`` flag and asks it before each result block: past the
deadline it raises ``ParseStopped``, so the thread a timed-out search leaves behind ends within one
block's work instead of parsing on alone for seconds (``engines._parse``).

Markup drifts; a parser that finds nothing reports an *empty* result, which the circuit breaker
counts (three in a row open it) instead of failing the search.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar
from urllib.parse import parse_qsl

import lxml.html
from lxml import etree

from tools.web_search.results import tidy

Parsed = list[tuple[str, str, str, str | None]]  # title, href, snippet, published
Stop = Callable[[], bool]
Parser = Callable[[bytes, str, Stop], Parsed]
T = TypeVar("T")


MAX_DATE_CHARS = 64  # an API row's date, as given (a result shows it)


class ParseStopped(Exception):
    """The search ended (deadline, cancel) while its page was being parsed."""


def _never() -> bool:
    return False


def _each(items: Iterable[T], stopped: Stop) -> Iterator[T]:
    """``items``, asking ``stopped`` before each: one block's work is the most a stop waits for."""
    for item in items:
        if stopped():
            raise ParseStopped
        yield item


def _doc(body: bytes, base: str) -> etree._Element | None:
    try:
        return lxml.html.document_fromstring(body, base_url=base)
    except (etree.ParserError, ValueError):
        return None


def _text(node: etree._Element | None) -> str:
    return tidy(node.text_content()) if node is not None else ""


def _first(node: etree._Element, xpath: str) -> etree._Element | None:
    found = node.xpath(xpath)
    return found[0] if found else None


def _cls(name: str) -> str:
    return f"contains(concat(' ', normalize-space(@class), ' '), ' {name} ')"


def parse_ddg(body: bytes, base: str, stopped: Stop = _never) -> Parsed:
    doc = _doc(body, base)
    out: Parsed = []
    if doc is None:
        return out
    for block in _each(doc.xpath(f"//div[{_cls('result')}]"), stopped):
        link = _first(block, f".//a[{_cls('result__a')}]")
        if link is None:
            continue
        snippet = _first(block, f".//*[{_cls('result__snippet')}]")
        out.append((_text(link), link.get("href", ""), _text(snippet), None))
    return out


def parse_brave(body: bytes, base: str, stopped: Stop = _never) -> Parsed:
    doc = _doc(body, base)
    out: Parsed = []
    if doc is None:
        return out
    for block in _each(doc.xpath("//div[@data-type='web']"), stopped):
        link = _first(block, ".//a[@href]")
        if link is None:
            continue
        title = _first(block, f".//*[{_cls('title')} or {_cls('snippet-title')}]")
        snippet = _first(
            block,
            f".//*[{_cls('snippet-description')} or {_cls('description')} or {_cls('snippet-content')}]",
        )
        out.append((_text(title) or _text(link), link.get("href", ""), _text(snippet), None))
    return out


def parse_bing(body: bytes, base: str, stopped: Stop = _never) -> Parsed:
    doc = _doc(body, base)
    out: Parsed = []
    if doc is None:
        return out
    for block in _each(doc.xpath(f"//li[{_cls('b_algo')}]"), stopped):
        link = _first(block, ".//h2//a[@href]")
        if link is None:
            continue
        snippet = _first(block, f".//div[{_cls('b_caption')}]//p")
        if snippet is None:
            snippet = _first(block, f".//*[{_cls('b_algoSlug')}] | .//p")
        out.append((_text(link), link.get("href", ""), _text(snippet), None))
    return out


_SOGOU_SNIPPET = " or ".join(
    _cls(c)
    for c in ("space-txt", "str-text", "str_info", "star-wiki", "text-layout", "attribute-centent", "ft")
)
_DATE = re.compile(r"(\d{4})[-./年](\d{1,2})[-./月](\d{1,2})")


def _date(text: str) -> str | None:
    """``-2026-3-7`` / ``2026年3月7日`` (Sogou's cite dates) → ``2026-03-07``."""
    found = _DATE.search(text)
    if not found:
        return None
    year, month, day = (int(g) for g in found.groups())
    return f"{year:04d}-{month:02d}-{day:02d}" if 1 <= month <= 12 and 1 <= day <= 31 else None


def parse_sogou(body: bytes, base: str, stopped: Stop = _never) -> Parsed:
    doc = _doc(body, base)
    out: Parsed = []
    if doc is None:
        return out
    # Rich cards (weather, dictionary, …) are vrwraps with a special-wrap inside: not web results.
    blocks = doc.xpath(f"//div[({_cls('vrwrap')} or {_cls('rb')}) and not(.//div[{_cls('special-wrap')}])]")
    for block in _each(blocks, stopped):
        link = _first(block, f".//h3[{_cls('vr-title')} or {_cls('pt')}]//a[@href]")
        if link is None:
            link = _first(block, ".//h3//a[@href]")
        if link is None:
            continue
        href = link.get("href", "")
        if href.startswith("/link?") or "sogou.com/link?" in href:
            # An opaque, server-side redirect: the destination is only in the block's data-url.
            target = _first(block, ".//*[@data-url]")
            href = target.get("data-url", "") if target is not None else ""
        snippet = _first(block, f".//*[{_SOGOU_SNIPPET}]")
        cite = _first(block, f".//*[{_cls('cite-date')}] | .//cite")
        out.append((_text(link), href, _text(snippet), _date(_text(cite))))
    return out


def parse_so360(body: bytes, base: str, stopped: Stop = _never) -> Parsed:
    doc = _doc(body, base)
    out: Parsed = []
    if doc is None:
        return out
    for block in _each(doc.xpath(f"//li[{_cls('res-list')}]"), stopped):
        link = _first(block, f".//h3[{_cls('res-title')}]//a[@href]")
        if link is None:
            link = _first(block, ".//h3//a[@href]")
        if link is None:
            continue
        # href is a so.com/link?m= wrapper; data-mdurl is where it leads.
        href = link.get("data-mdurl") or link.get("href", "")
        snippet = _first(
            block,
            f".//*[{_cls('res-desc')} or {_cls('res-list-summary')} or {_cls('res-rich')} or {_cls('res-comm-con')}]",
        )
        out.append((_text(link), href, _text(snippet), None))
    return out


def parse_wiki(body: bytes, base: str, stopped: Stop = _never) -> Parsed:
    doc = _doc(body, base)
    out: Parsed = []
    if doc is None:
        return out
    for block in _each(doc.xpath(f"//li[{_cls('mw-search-result')}]"), stopped):
        link = _first(block, f".//*[{_cls('mw-search-result-heading')}]//a[@href]")
        if link is None:
            continue
        snippet = _first(block, f".//*[{_cls('searchresult')}]")
        href = link.get("href", "")
        out.append((_text(link), href, _text(snippet), None))
    return out


def parse_google(body: bytes, base: str, stopped: Stop = _never) -> Parsed:
    doc = _doc(body, base)
    out: Parsed = []
    if doc is None:
        return out
    for link in _each(doc.xpath("//a[@href][.//h3]"), stopped):
        title = _text(_first(link, ".//h3"))
        block = _first(link, f"ancestor::div[{_cls('g')} or @data-hveid or {_cls('MjjYud')}][1]")
        snippet = ""
        if block is not None:
            node = _first(block, f".//*[{_cls('VwiC3b')} or @data-sncf or {_cls('st')}]")
            snippet = _text(node)
            if not snippet:
                snippet = _text(block).replace(title, "", 1).strip()
        out.append((title, _google_target(link.get("href", "")), snippet, None))
    return out


def _google_target(href: str) -> str:
    """Google wraps result links as a relative ``/url?q=<target>``: unwrap them on any host."""
    if href.startswith("/url?"):
        query = dict(parse_qsl(href[5:]))
        return query.get("q") or query.get("url") or ""
    return href


def parse_baidu(body: bytes, base: str, stopped: Stop = _never) -> Parsed:
    doc = _doc(body, base)
    out: Parsed = []
    if doc is None:
        return out
    for block in _each(doc.xpath(f"//div[{_cls('result')} or {_cls('c-container')}]"), stopped):
        link = _first(block, ".//h3//a[@href]")
        if link is None:
            continue
        snippet = _first(block, f".//*[{_cls('c-abstract')} or contains(@class, 'content-right')]")
        out.append((_text(link), link.get("href", ""), _text(snippet), None))
    return out


def parse_feed(body: bytes, base: str, stopped: Stop = _never) -> Parsed:
    import feedparser  # imported on first use (module import is slow-ish)

    feed = feedparser.parse(body)
    out: Parsed = []
    for entry in _each(feed.entries, stopped):
        summary = entry.get("summary", "") or ""
        if "<" in summary:
            parsed = _doc(summary.encode(), base)
            summary = _text(parsed) if parsed is not None else summary
        published = entry.get("published") or entry.get("updated")
        out.append((tidy(entry.get("title", "")), entry.get("link", "") or "", tidy(summary), published))
    return out


def _json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: "[[[[…" nested deep
        return None


def _str(value: Any) -> str:
    """A JSON field that should be a string: anything else (a number, a list) is no value."""
    return value if isinstance(value, str) else ""


def _api_date(value: Any) -> str | None:
    return value[:MAX_DATE_CHARS] if isinstance(value, str) and value else None


def _api_rows(rows: Any, snippet: str, date: str) -> Parsed:
    if not isinstance(rows, list):
        return []
    return [
        (tidy(_str(r.get("title"))), _str(r.get("url")), tidy(_str(r.get(snippet))), _api_date(r.get(date)))
        for r in rows
        if isinstance(r, dict)
    ]


def parse_searxng(body: bytes, base: str, stopped: Stop = _never) -> Parsed:
    data = _json(body)
    return _api_rows(data.get("results") if isinstance(data, dict) else None, "content", "publishedDate")


def parse_tavily(body: bytes, base: str, stopped: Stop = _never) -> Parsed:
    data = _json(body)
    return _api_rows(data.get("results") if isinstance(data, dict) else None, "content", "published_date")


def parse_brave_api(body: bytes, base: str, stopped: Stop = _never) -> Parsed:
    data = _json(body)
    web = data.get("web", {}) if isinstance(data, dict) else {}
    return _api_rows(web.get("results") if isinstance(web, dict) else None, "description", "page_age")
