"""The engines ``web_search`` knows, by tier, and how one engine request is made (SPEC W-1, W-3, W-5).

| tier | engines (automatic selection marked *) |
|---|---|
| headless | google* (alias ``g``), baidu*, bing_browser*, brave_browser* |
| http | ddg*, brave*, bing*, wiki*, bing_rss (RSS through feedparser), sogou, so360 (alias ``360``), bing_cn |
| api | searxng* (when ``A3S_SEARXNG_URL`` is set), tavily* and brave_api* (when their keys are set) |

``query_engine`` makes one engine's request — through the safe transport for the http and api
tiers, through the call's ``BrowserPool`` for the headless tier — and returns an
``EngineOutcome``: ``success`` with hits, ``empty``, or ``failure`` with a breaker failure kind
typed from the status (429 → ``rate_limited`` with ``Retry-After``; 401 →
``provider_authentication``; 402 → ``provider_quota``; 403 → ``provider_permission``; 400/422 →
``provider_invalid_request``; 408/5xx and I/O → ``transport``; the engine's budget → ``timeout``;
the request's proxy refusing its credentials → ``proxy_authentication``, neither transient nor
counted by the engine's breaker); any other exception → ``transport`` for that engine, never the
call. A response body is never used to classify a failure.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import quote_plus

from kernel.errors import InvalidArgument, RateLimited, ToolError, Transport, Unsupported
from tools._offthread import stoppable
from tools.net import ProxyAuthFailed, SafeHttp, parse_url, read_body, retry_after_ms
from tools.web_search.browser import BrowserPool
from tools.web_search.config import SearchConfig
from tools.web_search.parsers import (
    Parsed,
    Parser,
    parse_baidu,
    parse_bing,
    parse_brave,
    parse_brave_api,
    parse_ddg,
    parse_feed,
    parse_google,
    parse_searxng,
    parse_so360,
    parse_sogou,
    parse_tavily,
    parse_wiki,
)
from tools.web_search.results import Hit, clean_url

Tier = Literal["headless", "http", "api"]
MAX_RESULT_PAGE_BYTES = 5 * 1024 * 1024
ENGINE_SLACK_S = 0.1  # an engine gets its tier's budget minus this (REFERENCE 4.10)
PROXY_AUTHENTICATION = "proxy_authentication"
TRANSIENT_KINDS = frozenset({"transport", "timeout", "rate_limited", "provider_rate_limited"})
EN = "en-US,en;q=0.8"
ZH = "zh-CN,zh;q=0.9,en;q=0.5"


@dataclass(frozen=True)
class Engine:
    name: str
    tier: Tier
    provider: str
    shortcut: str
    parser: Parser
    automatic: bool = True
    wait_for: str | None = None  # headless: a selector that means "results are on the page"
    method: str = "GET"
    accept: str = "text/html,application/xhtml+xml;q=0.9,*/*;q=0.5"
    language: str = EN  # Accept-Language


ENGINES: dict[str, Engine] = {
    e.name: e
    for e in (
        Engine("google", "headless", "google", "g", parse_google, wait_for="h3"),
        Engine("baidu", "headless", "baidu", "bd", parse_baidu, wait_for="h3"),
        Engine("bing_browser", "headless", "bing", "bib", parse_bing, wait_for="li.b_algo"),
        Engine("brave_browser", "headless", "brave", "brb", parse_brave, wait_for="div[data-type=web]"),
        Engine("ddg", "http", "duckduckgo", "ddg", parse_ddg),
        Engine("brave", "http", "brave", "br", parse_brave),
        Engine("bing", "http", "bing", "bi", parse_bing),
        Engine("wiki", "http", "wikipedia", "wp", parse_wiki),
        Engine(
            "bing_rss",
            "http",
            "bing",
            "bir",
            parse_feed,
            automatic=False,
            accept="application/rss+xml,*/*;q=0.5",
        ),
        # China-market engines: explicit only, as in the reference (its automatic HTTP tier is
        # ddg, brave, bing, wiki): a default search is not sent to three more providers.
        Engine("sogou", "http", "sogou", "sogou", parse_sogou, automatic=False, language=ZH),
        Engine("so360", "http", "360", "360", parse_so360, automatic=False, language=ZH),
        Engine("bing_cn", "http", "bing", "bing_cn", parse_bing, automatic=False, language=ZH),
        Engine("searxng", "api", "searxng", "sx", parse_searxng, accept="application/json"),
        Engine("tavily", "api", "tavily", "tv", parse_tavily, method="POST", accept="application/json"),
        Engine("brave_api", "api", "brave", "ba", parse_brave_api, accept="application/json"),
    )
}
ALIASES = {
    "g": "google",
    "duckduckgo": "ddg",
    "wikipedia": "wiki",
    "brave_search": "brave",
    "searx": "searxng",
    "360": "so360",
    "360search": "so360",
    "bing_china": "bing_cn",
}


def resolve_engine(name: str) -> Engine:
    key = name.strip().lower()
    key = ALIASES.get(key, key)
    engine = ENGINES.get(key)
    if engine is None:
        known = ", ".join(sorted(ENGINES))
        raise InvalidArgument(f"unknown search engine {name!r}; known engines: {known}")
    return engine


def configured(engine: Engine, config: SearchConfig) -> str | None:
    """Why ``engine`` cannot run with this configuration, or None when it can."""
    if engine.name == "searxng" and not config.searxng_url:
        return "searxng needs A3S_SEARXNG_URL"
    if engine.name in ("tavily", "brave_api") and engine.name not in config.api_keys:
        return f"{engine.name} needs an API key in this process's environment"
    if engine.name not in config.urls:
        return f"no URL template for {engine.name}"
    return None


def automatic_engines(config: SearchConfig) -> list[Engine]:
    return [e for e in ENGINES.values() if e.automatic and configured(e, config) is None]


def engine_url(engine: Engine, config: SearchConfig, query: str, limit: int) -> str:
    template = config.urls[engine.name]
    base = (config.searxng_url or "").rstrip("/")
    return (
        template.replace("{base}", base).replace("{query}", quote_plus(query)).replace("{limit}", str(limit))
    )


@dataclass
class EngineOutcome:
    engine: Engine
    status: Literal["success", "empty", "failure", "skipped"]
    hits: list[Hit] = field(default_factory=list)
    failure_kind: str | None = None
    message: str = ""
    retry_after_ms: int | None = None
    duration_ms: int = 0

    @property
    def transient(self) -> bool:
        return self.failure_kind in TRANSIENT_KINDS

    def outcome_json(self) -> dict[str, object]:
        return {
            "engine": self.engine.name,
            "shortcut": self.engine.shortcut,
            "provider": self.engine.provider,
            "tier": self.engine.tier,
            "kind": self.status
            if self.status in ("success", "empty")
            else (self.failure_kind or self.status),
            "result_count": len(self.hits),
            "duration_ms": self.duration_ms,
            "failure_kind": self.failure_kind,
            "retry_after_seconds": None if self.retry_after_ms is None else self.retry_after_ms / 1000,
        }


def status_kind(status: int) -> str:
    if status == 429:
        return "rate_limited"
    return {401: "provider_authentication", 402: "provider_quota", 403: "provider_permission"}.get(
        status, "provider_invalid_request" if status in (400, 422) else "transport"
    )


def _hits(engine: Engine, parsed: list[tuple[str, str, str, str | None]], base: str, limit: int) -> list[Hit]:
    out: list[Hit] = []
    for title, href, snippet, published in parsed:
        url = clean_url(href, base)
        if url is None or not title:
            continue
        out.append(Hit(title, url, snippet, engine.name, len(out) + 1, published))
        if len(out) >= limit:
            break
    return out


async def _fetch_page(
    http: SafeHttp, engine: Engine, config: SearchConfig, url: str, query: str, limit: int, now_ms: int
) -> bytes:
    headers = {"Accept": engine.accept, "Accept-Language": engine.language}
    body = None
    if engine.name == "tavily":
        headers["Authorization"] = f"Bearer {config.api_keys['tavily']}"
        body = {"query": query, "max_results": limit, "search_depth": "basic"}
    elif engine.name == "brave_api":
        headers["X-Subscription-Token"] = config.api_keys["brave_api"]
    async with http.open(
        parse_url(url), method=engine.method, headers=headers, json=body, op="web_search"
    ) as got:
        status = got.response.status_code
        if not 200 <= status < 300:
            kind = status_kind(status)
            delay = retry_after_ms(got.response.headers.get("retry-after"), now_ms)
            if kind == "rate_limited":
                raise RateLimited(f"{engine.name}: HTTP 429", retry_after_ms=delay, failure_kind=kind)
            raise ToolError(f"{engine.name}: HTTP {status}", failure_kind=kind, retry_after_ms=delay)
        return await read_body(got.response, MAX_RESULT_PAGE_BYTES, "web_search", got.url)


async def _parse(engine: Engine, body: bytes, url: str) -> Parsed:
    """The engine's parser off the event loop, within the engine's deadline. A page can make it
    slow (250 nested result blocks around 4 MiB of filler: about 9 s of CPU, each block searching
    the filler), so it asks the stop flag ``stoppable`` sets at the deadline before each block: the
    thread ends within one block's work (it parsed on alone for 9 s before), its outcome retrieved."""
    try:
        return await stoppable(threading.Event(), lambda stopped: engine.parser(body, url, stopped))
    except Exception as exc:  # an answer no parser expected fails this engine, never the search
        raise Transport(
            f"{engine.name}: its answer could not be read ({type(exc).__name__})", op="web_search"
        ) from None


async def query_engine(
    engine: Engine,
    *,
    config: SearchConfig,
    http: SafeHttp,
    browser: BrowserPool | None,
    query: str,
    limit: int,
    budget_s: float,
    now_ms: int,
    monotonic: Callable[[], float],
) -> EngineOutcome:
    """One engine, bounded by ``budget_s``; never raises for engine failures."""
    started = monotonic()
    outcome = EngineOutcome(engine, "failure")
    try:
        missing = configured(engine, config)
        if missing:
            raise Unsupported(missing)
        url = engine_url(engine, config, query, limit)
        async with asyncio.timeout(max(0.05, budget_s - ENGINE_SLACK_S)):
            if engine.tier == "headless":
                if browser is None:
                    raise Unsupported("the headless tier is not available")
                body = await browser.render(url, engine.wait_for, budget_s)
            else:
                body = await _fetch_page(http, engine, config, url, query, limit, now_ms)
            parsed = await _parse(engine, body, url)
        hits = _hits(engine, parsed, url, limit)
        outcome.hits = hits
        outcome.status = "success" if hits else "empty"
    except TimeoutError:
        outcome.failure_kind, outcome.message = "timeout", f"{engine.name}: no answer within {budget_s:.1f}s"
    except RateLimited as exc:
        outcome.failure_kind, outcome.message = "rate_limited", exc.message
        outcome.retry_after_ms = exc.data.get("retry_after_ms")
    except Unsupported as exc:
        outcome.failure_kind, outcome.message = "unavailable", exc.message
    except InvalidArgument as exc:  # the guard refused the engine's address: a configuration problem
        outcome.failure_kind, outcome.message = "provider_permission", exc.message
    except ProxyAuthFailed as exc:  # the engine was never reached: not its health, not transient
        outcome.failure_kind, outcome.message = PROXY_AUTHENTICATION, exc.message
    except Transport as exc:
        outcome.failure_kind, outcome.message = "transport", exc.message
    except ToolError as exc:
        outcome.failure_kind = str(exc.data.get("failure_kind") or "transport")
        outcome.message = exc.message
        outcome.retry_after_ms = exc.data.get("retry_after_ms")
    except Exception as exc:  # the rest of a server's surprises: this engine fails
        # (a lone surrogate, a SOCKS5 reply, a Retry-After of 5,000 digits each failed the whole
        # call before they were handled where they arise). Only the type: a message may hold a URL.
        outcome.failure_kind = "transport"
        outcome.message = f"{engine.name}: failed unexpectedly ({type(exc).__name__})"
    outcome.duration_ms = int((monotonic() - started) * 1000)
    return outcome
