"""Result pages in each engine's public markup, for the web_search tests to serve from loopback.

``RESULTS`` are on-topic for ``QUERY`` (five hosts); ``OFF_TOPIC`` are well-formed results about
something else. Each ``*_page(results)`` renders them the way that engine's result page does, with
the engine's own link wrappers (DuckDuckGo ``uddg``, Google ``/url?q=``, Bing ``/ck/a``) and the
page chrome (navigation links back into the engine) that the parsers must drop.
"""

from __future__ import annotations

import base64
import json
from html import escape
from urllib.parse import quote

QUERY = "rust ownership borrowing rules"
RESULTS = [
    (
        "Understanding Ownership - The Rust Programming Language",
        "https://doc.rust-lang.org/book/ch04-00-understanding-ownership.html",
        "Ownership is Rust's most unique feature: borrowing rules let you use values without taking ownership.",
    ),
    (
        "Rust ownership and borrowing explained",
        "https://blog.example.org/rust-ownership-borrowing",
        "A practical guide to Rust ownership, borrowing rules and lifetimes with examples.",
    ),
    (
        "References and Borrowing - Rust By Example",
        "https://doc.rust-lang.org/rust-by-example/scope/borrow.html",
        "Borrowing rules in Rust: one mutable reference or many shared references.",
    ),
    (
        "The borrow checker: Rust ownership rules",
        "https://developers.example.com/rust/borrow-checker",
        "How the borrow checker enforces Rust ownership and borrowing rules at compile time.",
    ),
    (
        "Rust ownership borrowing rules cheat sheet",
        "https://cheats.example.net/rust-ownership",
        "Cheat sheet of Rust ownership and borrowing rules.",
    ),
    (
        "Why Rust ownership matters",
        "https://news.example.com/why-rust-ownership",
        "Rust ownership rules prevent data races; borrowing keeps code safe.",
    ),
]
OFF_TOPIC = [
    (
        "Best banana bread recipe",
        "https://food.example.com/banana-bread",
        "Moist banana bread with walnuts and brown sugar.",
    ),
    (
        "Gardening tips for spring",
        "https://garden.example.org/spring",
        "Plant tomatoes after the last frost.",
    ),
    ("Cheap flights to Lisbon", "https://travel.example.net/lisbon", "Compare fares and book today."),
    (
        "Knitting for beginners",
        "https://craft.example.com/knitting",
        "Cast on, knit, purl: your first scarf.",
    ),
    ("Football scores tonight", "https://sports.example.org/scores", "Live results from every league."),
]
# Chinese results for ``CJK_QUERY`` (five hosts), for the China-market engines.
CJK_QUERY = "Rust 所有权 借用规则"
CJK_RESULTS = [
    (
        "Rust 所有权与借用规则详解",
        "https://rust.example.cn/ownership",
        "Rust 的所有权系统和借用规则：一个可变引用或多个共享引用。",
    ),
    (
        "理解 Rust 所有权 - Rust 程序设计语言",
        "https://kaisery.example.cn/ch04",
        "所有权是 Rust 最独特的功能，借用规则让你无需获取所有权即可使用值。",
    ),
    (
        "Rust 借用规则与所有权入门",
        "https://blog.example.com.cn/rust-borrow",
        "入门讲解 Rust 所有权、借用规则和生命周期。",
    ),
    ("Rust 所有权和借用规则速查表", "https://cheat.example.net/rust-zh", "Rust 所有权与借用规则速查。"),
    (
        "为什么 Rust 所有权很重要",
        "https://news.example.org/rust-ownership-zh",
        "Rust 所有权规则防止数据竞争，借用规则保证安全。",
    ),
]
CHROME = "<a href='/settings'>Settings</a><a href='https://duckduckgo.com/about'>About</a><a href='https://www.google.com/search?q=next'>Next</a>"


def ddg_page(results: list[tuple[str, str, str]]) -> str:
    items = "".join(
        f"<div class='result results_links web-result'><h2 class='result__title'>"
        f"<a class='result__a' href='//duckduckgo.com/l/?uddg={quote(url, safe='')}&amp;rut=x'>{escape(t)}</a></h2>"
        f"<a class='result__snippet' href='#'>{escape(s)}</a></div>"
        for t, url, s in results
    )
    return f"<html><body>{CHROME}<div id='links'>{items}</div></body></html>"


def brave_page(results: list[tuple[str, str, str]]) -> str:
    items = "".join(
        f"<div class='snippet svelte' data-type='web'><a href='{escape(url)}'><div class='title'>{escape(t)}</div></a>"
        f"<div class='snippet-description'>{escape(s)}</div></div>"
        for t, url, s in results
    )
    return f"<html><body>{CHROME}<main id='results'>{items}</main></body></html>"


def _bing_wrap(url: str) -> str:
    token = base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")
    return f"https://www.bing.com/ck/a?!&amp;&amp;p=abc&amp;u=a1{token}&amp;ntb=1"


def bing_page(results: list[tuple[str, str, str]]) -> str:
    items = "".join(
        f"<li class='b_algo'><h2><a href='{_bing_wrap(url)}'>{escape(t)}</a></h2>"
        f"<div class='b_caption'><p class='b_lineclamp2'>{escape(s)}</p></div></li>"
        for t, url, s in results
    )
    return f"<html><body>{CHROME}<ol id='b_results'>{items}</ol></body></html>"


def bing_cn_page(results: list[tuple[str, str, str]]) -> str:
    """cn.bing.com: Bing's markup, wrappers on cn.bing.com, the snippet in a ``b_algoSlug``."""
    items = "".join(
        f"<li class='b_algo'><div class='b_tpcn'><a class='tilk' href='{_bing_wrap(url).replace('www.', 'cn.')}'>"
        f"<div class='tptt'>site</div></a></div><h2><a href='{_bing_wrap(url).replace('www.', 'cn.')}'>{escape(t)}</a></h2>"
        f"<p class='b_lineclamp2 b_algoSlug'><span class='algoSlug_icon'></span>{escape(s)}</p></li>"
        for t, url, s in results
    )
    return (
        f"<html><head><meta charset='utf-8'></head><body>{CHROME}<a href='https://cn.bing.com/search?q=x&first=11'>下一页</a>"
        f"<ol id='b_results'>{items}</ol></body></html>"
    )


def sogou_page(results: list[tuple[str, str, str]]) -> str:
    """sogou.com/web: ``div.vrwrap`` blocks whose title link is an opaque ``/link?url=`` redirect;
    the destination is only in the block's ``data-url``. A rich card (``special-wrap``) leads."""
    card = (
        "<div class='vrwrap'><div class='special-wrap'><h3 class='vr-title'>"
        "<a href='/link?url=CARD'>天气预报</a></h3></div></div>"
    )
    items = "".join(
        f"<div class='vrwrap' id='sogou_vr_30000000_{i}'><h3 class='vr-title'>"
        f"<a id='sogou_vr_30000000_title_{i}' target='_blank' href='/link?url=hedJjaC291M{i}Xz'>{escape(t)}</a></h3>"
        f"<div class='fz-mid space-txt'>{escape(s)}</div>"
        f"<div class='citeurl'><span>{escape(url.split('/')[2])}</span><span class='cite-date'>&nbsp;-&nbsp;2026-3-{i + 1}</span></div>"
        f"<div class='r-sech ext_query' data-url='{escape(url)}' data-query='q'></div></div>"
        for i, (t, url, s) in enumerate(results)
    )
    return (
        "<html><head><meta charset='utf-8'></head><body><div id='main'>"
        f"<a href='https://www.sogou.com/web?query=next&page=2'>下一页</a>{card}{items}</div></body></html>"
    )


def so360_page(results: list[tuple[str, str, str]]) -> str:
    """so.com/s: ``li.res-list``; the title link goes through ``so.com/link?m=`` and carries the
    destination in ``data-mdurl``."""
    items = "".join(
        f"<li class='res-list' data-lazyload='1'><h3 class='res-title'>"
        f"<a href='https://www.so.com/link?m=e{i}abc' data-mdurl='{escape(url)}' target='_blank'>{escape(t)}</a></h3>"
        f"<p class='res-desc'>{escape(s)}</p><p class='g-linkinfo'><cite>{escape(url.split('/')[2])}</cite></p></li>"
        for i, (t, url, s) in enumerate(results)
    )
    return (
        "<html><head><meta charset='utf-8'></head><body><a href='https://www.so.com/s?q=x&pn=2'>下一页</a>"
        f"<ul class='result'>{items}</ul></body></html>"
    )


def wiki_page(results: list[tuple[str, str, str]]) -> str:
    items = "".join(
        f"<li class='mw-search-result mw-search-result-ns-0'><div class='mw-search-result-heading'>"
        f"<a href='{escape(url)}' title='{escape(t)}'>{escape(t)}</a></div>"
        f"<div class='searchresult'>{escape(s)}</div></li>"
        for t, url, s in results
    )
    return f"<html><body><ul class='mw-search-results'>{items}</ul></body></html>"


def google_page(results: list[tuple[str, str, str]]) -> str:
    items = "".join(
        f"<div class='g'><div><a href='/url?q={quote(url, safe='')}&amp;sa=U'><h3>{escape(t)}</h3></a></div>"
        f"<div class='VwiC3b'>{escape(s)}</div></div>"
        for t, url, s in results
    )
    return f"<html><body>{CHROME}<div id='search'>{items}</div></body></html>"


def baidu_page(results: list[tuple[str, str, str]]) -> str:
    items = "".join(
        f"<div class='result c-container'><h3 class='t'><a href='{escape(url)}'>{escape(t)}</a></h3>"
        f"<div class='c-abstract'>{escape(s)}</div></div>"
        for t, url, s in results
    )
    return f"<html><body><div id='content_left'>{items}</div></body></html>"


def rss_feed(results: list[tuple[str, str, str]]) -> str:
    items = "".join(
        f"<item><title>{escape(t)}</title><link>{escape(url)}</link><description>{escape(s)}</description>"
        f"<pubDate>Mon, 01 Dec 2026 10:00:00 GMT</pubDate></item>"
        for t, url, s in results
    )
    return f"<?xml version='1.0'?><rss version='2.0'><channel><title>Search</title>{items}</channel></rss>"


def searxng_json(results: list[tuple[str, str, str]]) -> str:
    return json.dumps(
        {
            "query": QUERY,
            "results": [
                {"title": t, "url": url, "content": s, "engine": "duckduckgo", "engines": ["duckduckgo"]}
                for t, url, s in results
            ],
        }
    )


def js_rendered_bing_page(results: list[tuple[str, str, str]]) -> str:
    """A Bing-shaped page whose results exist only after its script ran (a browser is needed)."""
    data = json.dumps([[t, url, s] for t, url, s in results])
    return f"""<!doctype html><html><head><meta charset='utf-8'></head><body><ol id='b_results'></ol>
<script>
const rows = {data};
setTimeout(() => {{
  const list = document.getElementById('b_results');
  for (const [t, u, s] of rows) {{
    const li = document.createElement('li'); li.className = 'b_algo';
    li.innerHTML = '<h2><a></a></h2><div class="b_caption"><p></p></div>';
    li.querySelector('a').href = u; li.querySelector('a').textContent = t;
    li.querySelector('p').textContent = s;
    list.appendChild(li);
  }}
}}, 50);
</script></body></html>"""
