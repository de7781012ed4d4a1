"""``web_search`` settings: engines, their URL templates, tiers, API keys (SPEC W-1, W-3, W-5).

``SearchConfig`` is built once per process from ``config.settings.Settings`` (the process edge) and
handed to sessions as ``ctx.services["web_search"]``. Engine URL templates are settings
(``A3S_SEARCH_ENGINE_URLS="ddg=http://127.0.0.1:8080/ddg?q={query} …"``) so tests and private
deployments serve result pages from wherever they like; ``{query}`` (URL-encoded) and ``{limit}``
are filled in. API keys come from this process's environment and never leave it: they are not in
``fingerprint()`` (the coalescing key), ``repr`` or any snapshot. Every engine request still goes
through the safe transport: a private SearXNG must be named in ``A3S_NET_ALLOW``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kernel.state import BreakerConfig

DEFAULT_ENGINE_URLS: dict[str, str] = {
    # http tier: result pages as HTML, or a feed
    "ddg": "https://html.duckduckgo.com/html/?q={query}",
    "brave": "https://search.brave.com/search?q={query}&source=web",
    "bing": "https://www.bing.com/search?q={query}&count={limit}",
    "wiki": "https://en.wikipedia.org/w/index.php?search={query}&fulltext=1&ns0=1&limit={limit}",
    "bing_rss": "https://www.bing.com/search?format=rss&q={query}&count={limit}",
    "sogou": "https://www.sogou.com/web?query={query}",
    "so360": "https://www.so.com/s?q={query}",
    "bing_cn": "https://cn.bing.com/search?q={query}&count={limit}",
    # headless tier: rendered in Chromium
    "google": "https://www.google.com/search?q={query}&num={limit}&hl=en",
    "baidu": "https://www.baidu.com/s?wd={query}&rn={limit}",
    "bing_browser": "https://www.bing.com/search?q={query}&count={limit}",
    "brave_browser": "https://search.brave.com/search?q={query}&source=web",
    # api tier
    "searxng": "{base}/search?q={query}&format=json&pageno=1",
    "tavily": "https://api.tavily.com/search",
    "brave_api": "https://api.search.brave.com/res/v1/web/search?q={query}&count={limit}",
}
DEFAULT_CASCADE = ("headless", "http", "api")
TIERS = frozenset(DEFAULT_CASCADE)
DEFAULT_TIMEOUT_S = 10.0
DEFAULT_MAX_CONCURRENT = 4


def parse_engine_urls(text: str) -> dict[str, str]:
    """``"ddg=https://… bing=https://…"`` (space or newline separated) → ``{name: template}``."""
    out: dict[str, str] = {}
    for item in text.split():
        name, sep, url = item.partition("=")
        if not sep or not name or not url:
            raise ValueError(f"search engine url {item!r} is not name=url")
        out[name.strip().lower()] = url.strip()
    return out


@dataclass(frozen=True)
class SearchConfig:
    urls: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_ENGINE_URLS))
    searxng_url: str | None = None
    api_keys: Mapping[str, str] = field(default_factory=dict, repr=False)
    cascade: tuple[str, ...] = DEFAULT_CASCADE
    chromium_path: str = "/usr/bin/chromium"
    max_concurrent: int = DEFAULT_MAX_CONCURRENT
    default_timeout_s: float = DEFAULT_TIMEOUT_S
    engines: tuple[str, ...] = ()  # A3S_SEARCH_ENGINES: used when a call names none
    max_failures: int | None = None  # health.max_failures: both breaker thresholds
    suspend_seconds: float | None = None  # health.suspend_seconds: the transient open time

    @classmethod
    def from_settings(cls, settings: Any) -> SearchConfig:
        urls = dict(DEFAULT_ENGINE_URLS)
        urls.update(parse_engine_urls(getattr(settings, "search_engine_urls", "") or ""))
        keys: dict[str, str] = {}
        for engine, attr in (("tavily", "tavily_api_key"), ("brave_api", "brave_api_key")):
            secret = getattr(settings, attr, None)
            value = secret.get_secret_value() if hasattr(secret, "get_secret_value") else secret
            if value:
                keys[engine] = str(value)
        cascade = tuple(
            t.strip() for t in (getattr(settings, "search_cascade", "") or "").split(",") if t.strip()
        )
        if any(t not in TIERS for t in cascade):
            raise ValueError(f"search_cascade tiers must be among {sorted(TIERS)}, got {cascade}")
        return cls(
            urls=urls,
            searxng_url=(getattr(settings, "searxng_url", None) or None),
            api_keys=keys,
            cascade=cascade or DEFAULT_CASCADE,
            chromium_path=getattr(settings, "chromium_path", "/usr/bin/chromium"),
            max_concurrent=max(1, int(getattr(settings, "search_max_concurrent", DEFAULT_MAX_CONCURRENT))),
            engines=tuple(
                e.strip() for e in (getattr(settings, "search_engines", "") or "").split(",") if e.strip()
            ),
            max_failures=getattr(settings, "search_health_max_failures", None),
            suspend_seconds=getattr(settings, "search_health_suspend_seconds", None),
        )

    def breaker_config(self) -> BreakerConfig:
        return BreakerConfig.from_health(self.max_failures, self.suspend_seconds)

    def fingerprint(self) -> str:
        """What makes two searches comparable for coalescing (never the keys themselves)."""
        shape = {
            "urls": dict(sorted(self.urls.items())),
            "searxng": self.searxng_url,
            "keyed": sorted(self.api_keys),
            "cascade": list(self.cascade),
            "engines": list(self.engines),
            "health": [self.max_failures, self.suspend_seconds],
        }
        return hashlib.sha256(json.dumps(shape, sort_keys=True).encode()).hexdigest()[:16]


SERVICE_KEY = "web_search"


def config_of(services: Mapping[str, Any]) -> SearchConfig:
    found = services.get(SERVICE_KEY)
    return found if isinstance(found, SearchConfig) else SearchConfig()
