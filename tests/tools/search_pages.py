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
