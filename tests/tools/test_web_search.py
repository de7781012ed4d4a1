"""``web_search`` against loopback result pages (SPEC W-1…W-5, F-4; REFERENCE 4.10).

Engine URL templates are settings, so every engine here is a route on a loopback server the test
started; the browser tier renders a loopback page in Debian's Chromium.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sys
import threading
import time
from dataclasses import replace

import pytest

from kernel.options import SessionOptions
from tests.tools import search_pages as P
from tests.tools.netserver import LoopbackServer, redirect, send, static
from tests.tools.socks5server import Socks5Server
from tools.web_search.config import DEFAULT_ENGINE_URLS, SearchConfig
from tools.web_search.engines import automatic_engines, resolve_engine
from tools.web_search.gate import Requirements, evaluate, query_match
from tools.web_search.parsers import parse_baidu, parse_google
from tools.web_search.results import Row, clean_url
from tools.web_search.tool import select_engines

HTML = "text/html; charset=utf-8"
HTTP_ENGINES = ("ddg", "brave", "bing", "wiki", "bing_rss", "sogou", "so360", "bing_cn")
CN_ENGINES = ("sogou", "so360", "bing_cn")


@pytest.fixture()
def server():
    srv = LoopbackServer()
    yield srv
    srv.close()


def config_for(srv: LoopbackServer, **extra: str) -> SearchConfig:
    urls = dict(DEFAULT_ENGINE_URLS)
    for name in (
        "ddg",
        "brave",
        "bing",
        "wiki",
        "bing_rss",
        "sogou",
        "so360",
        "bing_cn",
        "google",
        "baidu",
        "bing_browser",
        "brave_browser",
    ):
        urls[name] = srv.url(f"/{name}?q={{query}}&n={{limit}}")
    urls.update(extra)
    return SearchConfig(urls=urls, searxng_url=srv.url("/sx"))


def session(agent, tmp_path, srv, session_id=None, **opts):
    cfg = opts.pop("config", None) or config_for(srv)
    services = {"web_search": cfg, **opts.pop("services", {})}
    options = SessionOptions(net_allow=("127.0.0.1",), services=services, **opts)
    return agent.session(tmp_path, options, session_id=session_id)


def serve_all(srv: LoopbackServer, results=P.RESULTS) -> None:
    srv.route("/ddg", static(200, P.ddg_page(results), content_type=HTML))
    srv.route("/brave", static(200, P.brave_page(results), content_type=HTML))
    srv.route("/bing", static(200, P.bing_page(results), content_type=HTML))
    srv.route("/wiki", static(200, P.wiki_page(results), content_type=HTML))
    srv.route("/bing_rss", static(200, P.rss_feed(results), content_type="application/rss+xml"))
    srv.route("/sogou", static(200, P.sogou_page(results), content_type=HTML))
    srv.route("/so360", static(200, P.so360_page(results), content_type=HTML))
    srv.route("/bing_cn", static(200, P.bing_cn_page(results), content_type=HTML))
    srv.route("/sx/search", static(200, P.searxng_json(results), content_type="application/json"))


def urls_of(res) -> list[str]:
    return [row["url"] for row in json.loads(res.output)]


def test_w1_searxng_shaped_endpoint(agent, tmp_path, server) -> None:
    serve_all(server)
    s = session(agent, tmp_path, server)
    res = s.tool("web_search", {"query": P.QUERY, "engines": ["searxng"], "format": "json", "limit": 5})
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)
    assert [r["url"] for r in rows] == [u for _, u, _ in P.RESULTS[:5]]
    assert rows[0]["engines"] == ["searxng"] and rows[0]["title"].startswith("Understanding Ownership")
    assert set(rows[0]) == {"title", "url", "content", "engines", "score", "published_date"}
    meta = res.metadata
    assert meta["status"] == "complete" and meta["engine_selection_source"] == "request"
    assert meta["selected_engines"] == ["searxng"] and meta["returned_result_count"] == 5
    hit = server.hits("/sx/search")[0]
    assert "format=json" in hit.path and "q=rust+ownership+borrowing+rules" in hit.path
    for key in (
        "retrieval_health",
        "retrieval_requirements",
        "search_tiers",
        "engine_outcomes",
        "search_metrics",
        "search_coalescing",
        "engine_errors",
        "engine_failures",
        "available_result_count",
        "output_limited",
        "source_anchors",
        "notices",
    ):
        assert key in meta, key


@pytest.mark.parametrize("engine", HTTP_ENGINES)
def test_w1_each_http_engine_parses_its_served_page(agent, tmp_path, server, engine) -> None:
    serve_all(server)
    s = session(agent, tmp_path, server)
    res = s.tool("web_search", {"query": P.QUERY, "engines": [engine], "format": "json"})
    assert res.exit_code == 0, res.output
    assert urls_of(res) == [u for _, u, _ in P.RESULTS]  # wrappers unwrapped, page chrome dropped
    rows = json.loads(res.output)
    assert all(r["content"] for r in rows) and all(r["engines"] == [engine] for r in rows)
    if engine == "bing_rss":
        assert rows[0]["published_date"] == "Mon, 01 Dec 2026 10:00:00 GMT"
    if engine == "sogou":  # the cite date, normalised
        assert [r["published_date"] for r in rows[:2]] == ["2026-03-01", "2026-03-02"]
    hits = server.hits(f"/{engine}")
    assert len(hits) == 1
    language = hits[0].headers["accept-language"]
    assert language.startswith("zh-CN") if engine in CN_ENGINES else language.startswith("en-US")


@pytest.mark.parametrize("engine", CN_ENGINES)
def test_w1_china_engines_parse_chinese_result_pages(agent, tmp_path, server, engine) -> None:
    """UTF-8 Chinese pages: titles and snippets come through intact and pass the gate (CJK bigrams)."""
    serve_all(server, P.CJK_RESULTS)
    s = session(agent, tmp_path, server)
    res = s.tool("web_search", {"query": P.CJK_QUERY, "engines": engine, "format": "json", "limit": 5})
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)
    assert [r["url"] for r in rows] == [u for _, u, _ in P.CJK_RESULTS]
    assert rows[0]["title"] == P.CJK_RESULTS[0][0] and rows[0]["content"] == P.CJK_RESULTS[0][2]
    assert res.metadata["status"] == "complete"


def test_w1_china_engines_are_explicit_only_and_360_is_an_alias(agent, tmp_path, server) -> None:
    """The reference's automatic HTTP tier is ddg, brave, bing, wiki: sogou, so360 and bing_cn run
    only when named (``360`` names so360, ``bing_china`` names bing_cn)."""
    cfg = config_for(server)
    assert not {e.name for e in automatic_engines(cfg)} & set(CN_ENGINES)
    assert select_engines("sogou, 360,bing_china", cfg)[1] == [resolve_engine(n) for n in CN_ENGINES]
    serve_all(server)
    s = session(agent, tmp_path, server)
    res = s.tool("web_search", {"query": P.QUERY, "engines": ["360"], "format": "json"})
    assert res.exit_code == 0, res.output
    assert res.metadata["selected_engines"] == ["so360"]
    assert res.metadata["engine_outcomes"][0]["shortcut"] == "360"


def test_w1_headless_engine_parsers_read_their_markup() -> None:
    for parser, page in ((parse_google, P.google_page), (parse_baidu, P.baidu_page)):
        parsed = parser(page(P.RESULTS).encode(), "https://engine.example/")
        urls = [clean_url(href) for _, href, _, _ in parsed]
        assert [u for u in urls if u] == [u for _, u, _ in P.RESULTS]
        assert parsed[0][2].startswith("Ownership is Rust")


def test_w1_navigation_and_non_http_links_are_dropped() -> None:
    assert clean_url("https://www.google.com/search?q=x") is None
    assert clean_url("https://duckduckgo.com/about") is None
    assert clean_url("javascript:alert(1)") is None
    assert (
        clean_url("/url?q=https://x.example.com/a&sa=U", "https://www.google.com/search")
        == "https://x.example.com/a"
    )


def test_w2_fails_closed_on_empty_results(agent, tmp_path, server) -> None:
    server.route("/ddg", static(200, P.ddg_page([]), content_type=HTML))
    s = session(agent, tmp_path, server)
    res = s.tool("web_search", {"query": P.QUERY, "engines": ["ddg"]})
    assert res.exit_code == 1
    assert res.error_kind["type"] == "retrieval_requirements_not_met"
    assert res.error_kind["retrieval_requirements"]["min_usable_results"] == 5
    assert res.metadata["status"] == "failed"
    assert res.metadata["engine_outcomes"][0]["kind"] == "empty"


def test_w2_fails_closed_on_off_topic_results_with_the_envelope(agent, tmp_path, server) -> None:
    serve_all(server, P.OFF_TOPIC)
    s = session(agent, tmp_path, server)
    res = s.tool("web_search", {"query": P.QUERY, "engines": ["ddg"], "format": "json"})
    assert res.exit_code == 1 and res.error_kind["type"] == "retrieval_requirements_not_met"
    envelope = json.loads(res.output)
    assert envelope["status"] == "retrieval_requirements_not_met"
    assert [r["url"] for r in envelope["results"]] == [u for _, u, _ in P.OFF_TOPIC]  # candidate rows
    health, req = envelope["retrieval_health"], envelope["retrieval_requirements"]
    assert health["usable_results"] == 5 and health["aligned_results"] == 0 and not health["met"]
    assert req == {
        "target": 5,
        "min_usable_results": 5,
        "min_unique_hosts": 3,
        "min_contributing_engines": 1,
        "min_aligned_results": 3,
        "aligned_match": 0.35,
        "min_mean_match": 0.3,
    }
    text = s.tool("web_search", {"query": P.QUERY, "engines": ["ddg"]})
    assert text.exit_code == 1 and "Candidates (not verified as relevant)" in text.output


def test_w1_the_gate_thresholds() -> None:
    req = Requirements.for_limit(10)
    assert (req.target, req.min_unique_hosts, req.min_aligned_results) == (5, 3, 3)
    assert Requirements.for_limit(2).min_aligned_results == 1
    rows = [Row(t, u, s, {"e"}) for t, u, s in P.RESULTS]
    assert evaluate(rows, P.QUERY, req).met
    same_host = [
        Row(t, "https://one.example.com/" + str(i), s, {"e"}) for i, (t, _, s) in enumerate(P.RESULTS)
    ]
    assert not evaluate(same_host, P.QUERY, req).met  # one host only
    assert query_match(P.QUERY, rows[0]) >= 0.35
    assert query_match("所有权 借用 规则", rows[0]) < 0.35  # mixed scripts are penalised


def test_w1_cascade_goes_to_the_next_tier_only_when_the_gate_is_missed(agent, tmp_path, server) -> None:
    server.route("/ddg", static(200, P.ddg_page(P.OFF_TOPIC), content_type=HTML))
    server.route("/sx/search", static(200, P.searxng_json(P.RESULTS), content_type="application/json"))
    s = session(agent, tmp_path, server)
    res = s.tool("web_search", {"query": P.QUERY, "engines": "ddg, searxng", "format": "json", "limit": 5})
    assert res.exit_code == 0, res.output
    tiers = res.metadata["search_tiers"]
    assert [t["tier"] for t in tiers] == ["http", "api"] and [t["decision"] for t in tiers] == [
        "continue",
        "stop",
    ]
    assert res.metadata["engine_fallback"] == "structurally_gated_tiers"
    assert res.metadata["search_fallback"]["attempted"] == ["http", "api"]
    serve_all(server)  # now the http tier is enough: the api tier is never asked
    before = len(server.hits("/sx/search"))
    res = s.tool("web_search", {"query": P.QUERY + " guide", "engines": ["ddg", "searxng"]})
    assert res.exit_code == 0 and [t["tier"] for t in res.metadata["search_tiers"]] == ["http"]
    assert len(server.hits("/sx/search")) == before


def test_w5_explicit_engines_run_only_their_tiers(agent, tmp_path, server) -> None:
    serve_all(server)
    s = session(agent, tmp_path, server)
    res = s.tool("web_search", {"query": P.QUERY, "engines": ["searxng"]})
    assert res.exit_code == 0
    assert [h.path.split("?")[0] for h in server.hits()] == ["/sx/search"]


def test_w1_partial_when_an_engine_errors_but_requirements_are_met(agent, tmp_path, server) -> None:
    serve_all(server)
    server.route("/bing", static(500, "boom"))
    s = session(agent, tmp_path, server)
    res = s.tool("web_search", {"query": P.QUERY, "engines": ["ddg", "bing"]})
    assert res.exit_code == 0 and res.metadata["status"] == "partial"
    assert res.metadata["engine_failures"] == [
        {
            "engine": "bing",
            "provider": "bing",
            "kind": "transport",
            "transient": True,
            "retry_after_seconds": None,
        }
    ]


def test_w3_a_rate_limited_engines_breaker_skips_the_next_call(agent, tmp_path, server) -> None:
    server.route("/ddg", static(429, "slow down", {"Retry-After": "120"}))
    s = session(agent, tmp_path, server)
    first = s.tool("web_search", {"query": P.QUERY, "engines": ["ddg"]})
    assert first.exit_code == 1
    assert first.error_kind == {"type": "rate_limited", "retry_after_ms": 120_000}
    assert first.metadata["engine_outcomes"][0]["kind"] == "rate_limited"
    second = s.tool("web_search", {"query": P.QUERY + " again", "engines": ["ddg"]})
    assert second.exit_code == 1
    outcome = second.metadata["engine_outcomes"][0]
    assert outcome["kind"] == "circuit_open" and 0 < outcome["retry_after_seconds"] <= 120
    assert len(server.hits("/ddg")) == 1  # the second call never reached the engine


def test_w3_breakers_are_per_session_by_default(agent, tmp_path, server) -> None:
    server.route("/ddg", static(429, "slow down", {"Retry-After": "120"}))
    session(agent, tmp_path, server).tool("web_search", {"query": P.QUERY, "engines": ["ddg"]})
    session(agent, tmp_path, server).tool("web_search", {"query": P.QUERY, "engines": ["ddg"]})
    assert len(server.hits("/ddg")) == 2


def test_w3_run_scope_breakers_are_shared_by_a_run_and_its_delegated_children(
    agent, tmp_path, server
) -> None:
    """``search_breaker_scope="run"``: a session and its ``task`` children (``<parent>.<task_id>``)
    share one breaker; another run keeps its own."""
    server.route("/ddg", static(429, "slow down", {"Retry-After": "120"}))
    args = {"query": P.QUERY, "engines": ["ddg"]}
    parent = session(agent, tmp_path, server, session_id="run1", search_breaker_scope="run")
    assert parent.tool("web_search", args).error_kind["type"] == "rate_limited"
    child = session(agent, tmp_path, server, session_id="run1.task-1", search_breaker_scope="run")
    res = child.tool("web_search", {**args, "query": P.QUERY + " child"})
    assert res.metadata["engine_outcomes"][0]["kind"] == "circuit_open"
    assert len(server.hits("/ddg")) == 1
    other = session(agent, tmp_path, server, session_id="run2", search_breaker_scope="run")
    assert other.tool("web_search", args).metadata["engine_outcomes"][0]["kind"] == "rate_limited"
    # The default session scope: the child of a tripped parent still asks the engine.
    session(agent, tmp_path, server, session_id="run3").tool("web_search", args)
    session(agent, tmp_path, server, session_id="run3.task-1").tool("web_search", args)
    assert len(server.hits("/ddg")) == 4


class PeakCounter:
    """A route handler that answers ``page`` after 0.2 s and records the peak of requests in flight."""

    def __init__(self, page: bytes) -> None:
        self.page = page
        self.peak = 0
        self._now = 0
        self._lock = threading.Lock()

    def __call__(self, h) -> None:
        with self._lock:
            self._now += 1
            self.peak = max(self.peak, self._now)
        time.sleep(0.2)
        with self._lock:
            self._now -= 1
        send(h, 200, self.page, content_type=HTML)


def test_w4_delegated_children_share_the_run_search_bulkhead(agent, tmp_path, server) -> None:
    """W-4: the bulkhead bounds a run's searches together, the parent's and its children's."""
    counted = PeakCounter(P.ddg_page(P.RESULTS).encode())
    server.route("/ddg", counted)
    cfg = replace(config_for(server), max_concurrent=1)
    sessions = [session(agent, tmp_path, server, session_id=sid, config=cfg) for sid in ("r", "r.t1", "r.t2")]
    futures = [
        s.tool_async("web_search", {"query": f"{P.QUERY} {i}", "engines": ["ddg"], "timeout": 30})
        for i, s in enumerate(sessions)
    ]
    assert all(f.result(60).exit_code == 0 for f in futures)  # type: ignore[attr-defined]
    assert len(server.hits("/ddg")) == 3 and counted.peak == 1


def test_w3_health_settings_override_the_breaker_thresholds_and_open_time(agent, tmp_path, server) -> None:
    """REFERENCE 4.10: ``health.max_failures`` replaces both thresholds (3) and
    ``health.suspend_seconds`` the transient open time (60 s)."""
    from config.settings import Settings

    settings = Settings(search_health_max_failures=1, search_health_suspend_seconds=5)
    cfg = SearchConfig.from_settings(settings)
    assert (cfg.max_failures, cfg.suspend_seconds) == (1, 5)
    server.route("/ddg", static(500, "boom"))
    s = session(
        agent, tmp_path, server, config=replace(config_for(server), max_failures=1, suspend_seconds=5)
    )
    first = s.tool("web_search", {"query": P.QUERY, "engines": ["ddg"]})
    assert first.metadata["engine_outcomes"][0]["kind"] == "transport"
    second = s.tool("web_search", {"query": P.QUERY + " again", "engines": ["ddg"]})
    outcome = second.metadata["engine_outcomes"][0]
    assert outcome["kind"] == "circuit_open" and 0 < outcome["retry_after_seconds"] <= 5
    assert len(server.hits("/ddg")) == 1  # one transport failure opened it, not three


def test_w1_configured_engines_are_the_selection_when_a_call_names_none(agent, tmp_path, server) -> None:
    """A3S_SEARCH_ENGINES: metadata engine_selection_source "config" (REFERENCE 4.10)."""
    from config.settings import Settings

    assert SearchConfig.from_settings(Settings(search_engines="bing, 360")).engines == ("bing", "360")
    serve_all(server)
    s = session(agent, tmp_path, server, config=replace(config_for(server), engines=("bing", "360")))
    res = s.tool("web_search", {"query": P.QUERY})
    assert res.exit_code == 0, res.output
    meta = res.metadata
    assert meta["engine_selection_source"] == "config" and meta["selected_engines"] == ["bing", "so360"]
    assert {h.path.split("?")[0] for h in server.hits()} == {"/bing", "/so360"}
    res = s.tool("web_search", {"query": P.QUERY, "engines": "wiki"})
    assert res.metadata["engine_selection_source"] == "request"
    bad = session(agent, tmp_path, server, config=replace(config_for(server), engines=("nope",)))
    res = bad.tool("web_search", {"query": P.QUERY})
    assert res.error_kind["type"] == "invalid_argument" and "unknown search engine" in res.output


def test_f4_fleet_scope_breakers_on_redis_are_shared_by_sessions(agent, tmp_path, server, redis_urls) -> None:
    """Two sessions (as two workers would be) share one Redis-backed breaker with fleet scope."""
    import uuid

    from workers.state import RedisStateStore

    store = RedisStateStore.from_url(redis_urls(3), prefix=f"t-{uuid.uuid4().hex[:8]}")
    server.route("/ddg", static(429, "slow down", {"Retry-After": "120"}))
    opts = {"search_breaker_scope": "fleet", "services": {"state_store": store}}
    a = session(agent, tmp_path, server, **opts)
    b = session(agent, tmp_path, server, **opts)
    assert a.tool("web_search", {"query": P.QUERY, "engines": ["ddg"]}).error_kind["type"] == "rate_limited"
    res = b.tool("web_search", {"query": P.QUERY + " other", "engines": ["ddg"]})
    assert res.metadata["engine_outcomes"][0]["kind"] == "circuit_open"
    assert len(server.hits("/ddg")) == 1
    store.client.close()


def test_w5_all_engines_timing_out_is_a_timeout(agent, tmp_path, server) -> None:
    def hang(h):
        time.sleep(6)

    server.route("/ddg", hang)
    server.route("/bing", hang)
    s = session(agent, tmp_path, server)
    res = s.tool("web_search", {"query": P.QUERY, "engines": ["ddg", "bing"], "timeout": 1})
    assert res.exit_code == 1 and res.error_kind["type"] == "timeout" and res.error_kind["op"] == "web_search"


def test_w4_identical_concurrent_searches_are_coalesced(agent, tmp_path, server) -> None:
    release = threading.Event()
    page = P.ddg_page(P.RESULTS)

    def slow(h):
        release.wait(20)
        send(h, 200, page.encode(), content_type=HTML)

    server.route("/ddg", slow)
    s = session(agent, tmp_path, server)
    args = {"query": P.QUERY, "engines": ["ddg"], "timeout": 30}
    first = s.tool_async("web_search", args)
    deadline = time.monotonic() + 20
    while not server.hits("/ddg") and time.monotonic() < deadline:
        time.sleep(0.01)
    second = s.tool_async("web_search", args)
    time.sleep(0.3)  # let the follower join the flight (any later join would still be correct)
    release.set()
    results = [first.result(30), second.result(30)]  # type: ignore[attr-defined]
    roles = sorted(r.metadata["search_coalescing"]["role"] for r in results)
    assert all(r.exit_code == 0 for r in results)
    assert len(server.hits("/ddg")) == 1 and roles == ["leader", "shared"]
    assert results[0].output == results[1].output


def test_w4_the_search_bulkhead_bounds_concurrent_searches(agent, tmp_path, server) -> None:
    counted = PeakCounter(P.ddg_page(P.RESULTS).encode())
    server.route("/ddg", counted)
    cfg = replace(config_for(server), max_concurrent=1)
    s = session(agent, tmp_path, server, config=cfg)
    futures = [
        s.tool_async("web_search", {"query": f"{P.QUERY} {i}", "engines": ["ddg"], "timeout": 30})
        for i in range(3)
    ]
    assert all(f.result(60).exit_code == 0 for f in futures)  # type: ignore[attr-defined]
    assert len(server.hits("/ddg")) == 3 and counted.peak == 1


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ({"query": "x", "engine": "ddg"}, "did you mean 'engines'"),
        ({"query": "   "}, "blank"),
        ({"query": "x", "engines": ["nope"]}, "unknown search engine"),
        ({"query": "x", "proxy": "ftp://p:1"}, "proxy"),
        ({"query": "x", "proxy": "socks4://p:1080"}, "socks5://host:port"),
        ({"query": "x", "proxy": "http://noport"}, "port"),
        ({"query": "x", "full_text_bytes": 1024}, "format='json'"),
        ({"query": "x", "limit": 51}, "limit"),
        ({"query": "x", "timeout": 61}, "timeout"),
    ],
)
def test_w5_invalid_arguments_are_typed(agent, tmp_path, server, args, needle) -> None:
    s = session(agent, tmp_path, server)
    res = s.tool("web_search", args)
    assert res.exit_code == 1 and res.error_kind["type"] == "invalid_argument" and needle in res.output
    assert server.hits() == []


def test_w1_urls_in_the_query_are_reduced_to_anchors(agent, tmp_path, server) -> None:
    serve_all(server)
    s = session(agent, tmp_path, server)
    s.tool(
        "web_search",
        {
            "query": "rust ownership https://user:pw@doc.example.com/a?token=SECRET#f borrowing rules",
            "engines": ["ddg"],
        },
    )
    sent = server.hits("/ddg")[0].path
    assert "SECRET" not in sent and "user" not in sent and "doc.example.com" in sent


def test_w1_full_text_of_returned_pages(agent, tmp_path, server) -> None:
    pages = []
    for i in range(5):
        path = f"/page{i}"
        body = (
            f"<html><head><title>Rust ownership {i}</title></head><body><main><p>Rust ownership borrowing rules, page {i}. "
            + "Long text. " * 50
            + "</p></main></body></html>"
        )
        server.route(path, static(200, body, content_type=HTML))
        host = ("127.0.0.1", "localhost", "docs.localhost")[i % 3]  # three loopback hosts
        pages.append(
            (
                f"Rust ownership borrowing rules part {i}",
                server.url(path, host=host),
                "Rust ownership and borrowing rules explained.",
            )
        )
    server.route("/sx/search", static(200, P.searxng_json(pages), content_type="application/json"))
    s = session(agent, tmp_path, server)
    res = s.tool(
        "web_search",
        {"query": P.QUERY, "engines": ["searxng"], "format": "json", "limit": 5, "full_text_bytes": 600},
    )
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)
    assert rows and all(
        len(r["full_text"].encode()) <= 600 and "Rust ownership borrowing rules, page" in r["full_text"]
        for r in rows
    )


def test_w1_stalling_full_text_pages_cannot_fail_a_search_that_met_its_gate(agent, tmp_path, server) -> None:
    """W-1, W-5: the full-text stage shares the call's deadline. Each page's timeout started when it
    got one of the 4 fetch slots, so 10 result pages that never answer took 3 rounds of the time
    left and the call's outer deadline turned a search that had met its gate into ``timeout``
    (measured: a 2 s search failed after 5 s). Now the stage ends at the deadline, the stalled rows
    have no ``full_text`` and the others keep theirs."""
    released = threading.Event()
    pages = []
    for i in range(12):
        path = f"/ft{i}"
        if i < 2:
            body = f"<html><body><main><p>Rust ownership borrowing rules, fast page {i}.</p></main></body></html>"
            server.route(path, static(200, body, content_type=HTML))
        else:
            server.route(path, lambda h: released.wait(60))
        host = ("127.0.0.1", "localhost", "docs.localhost")[i % 3]
        pages.append(
            (f"Rust ownership borrowing rules part {i}", server.url(path, host=host), "Rust ownership.")
        )
    server.route("/sx/search", static(200, P.searxng_json(pages), content_type="application/json"))
    s = session(agent, tmp_path, server)
    try:
        res = s.tool(
            "web_search",
            {
                "query": P.QUERY,
                "engines": ["searxng"],
                "format": "json",
                "limit": 12,
                "full_text_bytes": 600,
                "timeout": 4,
            },
        )
    finally:
        released.set()
    assert res.exit_code == 0 and res.error_kind is None, (res.error_kind, res.output[:300])
    rows = {r["url"].rsplit("/", 1)[1]: r for r in json.loads(res.output)}
    assert "fast page 0" in rows["ft0"]["full_text"] and "fast page 1" in rows["ft1"]["full_text"]
    assert all("full_text" not in rows[f"ft{i}"] for i in range(2, 12) if f"ft{i}" in rows)


NESTED_WRAPPERS = "https://www.google.com/url?q=" * 3000 + "https://deep.example.com/"


@pytest.mark.parametrize(
    "bad",
    [
        {"title": 5, "url": "https://n.example.com/", "content": "Rust ownership", "publishedDate": 7},
        {"title": ["x"], "url": ["https://l.example.com/"], "content": {"a": 1}, "publishedDate": {"x": 1}},
        {"title": "Rust ownership borrowing rules, wrapped", "url": NESTED_WRAPPERS, "content": "Rust"},
    ],
    ids=["number_title", "list_fields", "nested_wrappers"],
)
def test_w5_one_malformed_api_row_does_not_fail_the_search(agent, tmp_path, server, bad) -> None:
    """W-5: an engine's answer is data from outside. A SearXNG row whose title was a number made
    ``tidy`` raise ``TypeError`` (the call ended as ``internal_error``), and a result URL of 3,000
    nested Google ``/url?q=`` wrappers made ``clean_url`` recurse past Python's limit (the call
    ended as ``invalid_argument`` "input nested too deeply", blaming the model). Now such a row is
    skipped and the others are the results."""
    rows = json.loads(P.searxng_json(P.RESULTS))
    rows["results"].insert(1, bad)
    server.route("/sx/search", static(200, json.dumps(rows), content_type="application/json"))
    s = session(agent, tmp_path, server)
    res = s.tool("web_search", {"query": P.QUERY, "engines": ["searxng"], "format": "json"})
    assert res.exit_code == 0 and res.error_kind is None, (res.error_kind, res.output[:300])
    urls = [r["url"] for r in json.loads(res.output)]
    assert sorted(urls) == sorted(url for _t, url, _s in P.RESULTS)


def test_w5_an_engine_answer_nested_too_deep_fails_that_engine_only(agent, tmp_path, server) -> None:
    """W-5: ``json.loads`` of 200,000 ``[`` raises ``RecursionError``, which escaped the engine and
    failed the call as ``invalid_argument`` ("input nested too deeply"). Now it is an answer without
    results: the search fails closed like any empty answer, typed ``retrieval_requirements_not_met``.
    A parser that raises anything else fails its engine as ``transport``, never the call."""
    server.route("/sx/search", static(200, b"[" * 200_000, content_type="application/json"))
    s = session(agent, tmp_path, server)
    res = s.tool("web_search", {"query": P.QUERY, "engines": ["searxng"]})
    assert res.exit_code == 1 and res.error_kind["type"] == "retrieval_requirements_not_met", res.error_kind
    assert res.metadata["engine_outcomes"][0]["kind"] == "empty"


async def test_w5_a_parser_that_raises_fails_its_engine_as_transport() -> None:
    """W-5: the engine's contract is to fail, typed, never to raise out of the search."""
    from kernel.errors import Transport
    from tools.web_search.engines import _parse

    def boom(body, base, stopped):
        raise KeyError("surprise")

    engine = replace(resolve_engine("searxng"), parser=boom)
    with pytest.raises(Transport, match="searxng: its answer could not be read"):
        await _parse(engine, b"{}", "https://sx.example.com/")


def test_w5_an_engine_failing_in_an_unforeseen_way_fails_alone(agent, tmp_path, server, monkeypatch) -> None:
    """W-5: ``query_engine`` never raises for an engine's failure. Exceptions nobody foresaw (this
    round found a lone surrogate, a malformed SOCKS5 reply, a 5,000-digit ``Retry-After``) escaped
    it and failed the whole call as ``internal_error``, the other engines' results lost. Now the
    engine fails as ``transport`` (its message names only the exception's type) and the rest stand."""
    from tools.web_search import engines as E

    serve_all(server)
    real = E._fetch_page

    async def flaky(http, engine, *args):
        if engine.name == "ddg":
            raise RuntimeError("surprise with https://secret.example/?token=abc")
        return await real(http, engine, *args)

    monkeypatch.setattr(E, "_fetch_page", flaky)
    s = session(agent, tmp_path, server)
    res = s.tool("web_search", {"query": P.QUERY, "engines": ["ddg", "bing", "brave"], "format": "json"})
    assert res.exit_code == 0 and res.error_kind is None, (res.error_kind, res.output[:300])
    assert json.loads(res.output)
    ddg = next(o for o in res.metadata["engine_outcomes"] if o["engine"] == "ddg")
    assert ddg["failure_kind"] == "transport"
    assert "token=abc" not in json.dumps(res.metadata)


def test_d3_engine_endpoints_pass_the_guard_too(agent, tmp_path, server) -> None:
    serve_all(server)
    cfg = config_for(server)
    s = agent.session(tmp_path, SessionOptions(services={"web_search": cfg}))  # guard closed
    res = s.tool("web_search", {"query": P.QUERY, "engines": ["ddg"]})
    assert res.exit_code == 1 and server.hits() == []
    assert "SSRF guard" in res.metadata["engine_errors"][0]["message"]


def test_s2_web_search_is_registered_with_a_visible_schema(agent, tmp_path) -> None:
    s = agent.session(tmp_path)
    schema = next(d for d in s.tool_definitions() if d["name"] == "web_search")["parameters"]
    assert schema["required"] == ["query"] and schema["additionalProperties"] is False


def test_w4_a_request_level_proxy_carries_the_engine_requests(agent, tmp_path, server) -> None:
    """The 'proxy' is a loopback server answering absolute-form requests for a public-looking host."""
    server.route("http://engine.example.com/ddg", static(200, P.ddg_page(P.RESULTS), content_type=HTML))
    cfg = config_for(server, ddg="http://engine.example.com/ddg?q={query}")
    s = session(agent, tmp_path, server, config=cfg)
    res = s.tool("web_search", {"query": P.QUERY, "engines": ["ddg"], "proxy": server.url("")})
    assert res.exit_code == 0, res.output
    assert [h.path.split("?")[0] for h in server.hits()] == ["http://engine.example.com/ddg"]


def test_w4_a_socks5_proxy_carries_the_engine_requests(agent, tmp_path, server) -> None:
    """REFERENCE 4.10: ``proxy`` may be socks5://host:port. The test's SOCKS5 server tunnels every
    CONNECT to the loopback server, so the engine's public-looking host is never contacted."""
    server.route("/ddg", static(200, P.ddg_page(P.RESULTS), content_type=HTML))
    cfg = config_for(server, ddg="http://engine.example.com/ddg?q={query}")
    socks = Socks5Server(("127.0.0.1", server.port))
    try:
        s = session(agent, tmp_path, server, config=cfg)
        res = s.tool("web_search", {"query": P.QUERY, "engines": ["ddg"], "proxy": socks.url()})
        assert res.exit_code == 0, res.output
        assert socks.connects == [("engine.example.com", 80)]
        assert [h.headers["host"] for h in server.hits("/ddg")] == ["engine.example.com"]
        # The same proxy with the guard closed: refused before the proxy sees a connection.
        closed = agent.session(tmp_path, SessionOptions(services={"web_search": cfg}))
        res = closed.tool("web_search", {"query": P.QUERY, "engines": ["ddg"], "proxy": socks.url()})
        assert res.exit_code == 1 and socks.accepted == 1
        assert "SSRF guard" in res.metadata["engine_errors"][0]["message"]
    finally:
        socks.close()


def test_w4_proxy_credentials_carry_the_search_and_are_never_shown(agent, tmp_path, server, caplog) -> None:
    """REFERENCE 4.10 ``proxy`` with ``user:password@`` (percent-encoded): a SOCKS5 proxy (RFC 1929)
    and an HTTP proxy (Basic) that require them carry the search; wrong or missing credentials are
    ``transport{proxy:"authentication_failed"}`` with a clear message, do not count against the
    engine's breaker, and the secret is in no result, metadata, event or log line."""
    import logging

    from tests.tools.httpproxy import HttpProxy

    caplog.set_level(logging.DEBUG)
    server.route("/ddg", static(200, P.ddg_page(P.RESULTS), content_type=HTML))
    cfg = config_for(server, ddg="http://engine.example.com/ddg?q={query}")
    creds = ("searcher", "s3cr:t pw")
    socks = Socks5Server(("127.0.0.1", server.port), credentials=creds)
    proxy = HttpProxy(("127.0.0.1", server.port), credentials=creds)
    userinfo = "searcher:s3cr%3At%20pw"
    try:
        s = session(agent, tmp_path, server, config=cfg)
        args = {"query": P.QUERY, "engines": ["ddg"]}
        results = []
        for bad in (socks.url(userinfo="searcher:WRONGPW"), proxy.url("searcher:WRONGPW"), proxy.url()):
            res = s.tool("web_search", {**args, "proxy": bad})
            assert res.error_kind == {
                "type": "transport",
                "op": "web_search",
                "proxy": "authentication_failed",
            }
            assert res.metadata["engine_outcomes"][0]["kind"] == "proxy_authentication"
            assert (
                "refused the user name and password" in res.output or "requires authentication" in res.output
            )
            results.append(res)
        assert server.hits("/ddg") == []
        # Three refusals in a row did not open ddg's breaker: the right credentials go through.
        for good in (socks.url(userinfo=userinfo), proxy.url(userinfo)):
            res = s.tool("web_search", {**args, "proxy": good})
            assert res.exit_code == 0, res.output
            results.append(res)
        assert socks.auth_attempts == [("searcher", "WRONGPW"), creds]
        assert [r[2] is not None for r in proxy.requests] == [True, False, True]
        assert len(server.hits("/ddg")) == 2
        starts = [e for e in s.events() if e.type == "tool_start"]
        assert starts[0].data["args"]["proxy"] == f"socks5://***@127.0.0.1:{socks.port}"
        shown = json.dumps([r.to_json() for r in results] + [e.to_json() for e in s.events()])
        for secret in ("s3cr", "WRONGPW", "searcher"):
            assert secret not in shown and secret not in caplog.text
    finally:
        socks.close()
        proxy.close()


def test_w4_searches_through_one_proxy_with_different_credentials_do_not_share_a_flight() -> None:
    from tools.web_search.tool import Params, _flight_key

    cfg = SearchConfig()
    engines = [resolve_engine("ddg")]

    def key(proxy: str | None) -> str:
        return _flight_key("q", engines, Params(query="q", proxy=proxy), 10.0, cfg)

    alice = key("socks5://alice:pw1@proxy.example.com:1080")
    assert alice == key("socks5://alice:pw1@proxy.example.com:1080")
    others = {
        key("socks5://bob:pw2@proxy.example.com:1080"),
        key("socks5://alice:pw2@proxy.example.com:1080"),
        key("socks5://proxy.example.com:1080"),
    }
    assert alice not in others and len(others) == 3


@pytest.mark.parametrize(
    ("engine", "header"), [("brave_api", "x-subscription-token"), ("tavily", "authorization")]
)
def test_w1_an_api_key_never_follows_a_redirect_to_another_origin(
    agent, tmp_path, server, engine, header
) -> None:
    """Brave's key travels in ``X-Subscription-Token``, which a cross-origin hop did not drop (only
    ``Authorization``, ``Proxy-Authorization``, ``Cookie`` and ``If-Range`` were): a redirect from
    the API's endpoint handed the operator's key to whatever host it named."""
    secret = "operator-key-0123456789"
    elsewhere = LoopbackServer("127.0.0.2")
    try:
        elsewhere.route("/landing", static(200, "{}", content_type="application/json"))
        server.route("/api", redirect(elsewhere.url("/landing"), status=307))
        cfg = replace(
            config_for(server, **{engine: server.url("/api?q={query}&count={limit}")}),
            api_keys={engine: secret},
        )
        services = {"web_search": cfg}
        options = SessionOptions(net_allow=("127.0.0.1", "127.0.0.2"), services=services)
        s = agent.session(tmp_path, options)
        s.tool("web_search", {"query": P.QUERY, "engines": [engine], "format": "json"})
        assert secret in server.hits("/api")[0].headers[header]  # sent to the configured endpoint
        landed = elsewhere.hits("/landing")
        assert landed, "the redirect was not followed"
        assert all(header not in hit.headers for hit in landed), landed[0].headers
        assert all(secret not in json.dumps(hit.headers) for hit in landed)
    finally:
        elsewhere.close()


def test_w5_an_engine_page_slow_to_parse_neither_freezes_the_loop_nor_outlives_the_timeout(
    agent, tmp_path, server
) -> None:
    """An engine's page was parsed on the event loop after its deadline: 250 nested result blocks
    around 4 MiB of filler made ``parse_ddg`` search the filler once per block (about 9 s of CPU
    here), during which the whole host process stood still and the call overran its timeout."""
    filler = "<p><span>x</span></p>" * 190_000
    page = "<html><body>" + '<div class="result">' * 250 + filler + "</div>" * 250 + "</body></html>"
    server.route("/ddg", static(200, page, content_type=HTML))
    s = session(agent, tmp_path, server)
    ticks: list[float] = []
    stop = threading.Event()

    async def heartbeat() -> None:  # runs on the session's loop while the search does
        loop = asyncio.get_running_loop()
        while not stop.is_set():
            ticks.append(loop.time())
            await asyncio.sleep(0.05)

    started = time.monotonic()
    beat = s._loop.submit(heartbeat())
    try:
        res = s.tool("web_search", {"query": P.QUERY, "engines": ["ddg"], "timeout": 2})
    finally:
        stop.set()
        beat.result(timeout=30)
    took = time.monotonic() - started
    assert res.exit_code != 0  # nothing parsed in time
    assert took < 5, f"a 2 s search took {took:.1f} s"
    gaps = [b - a for a, b in itertools.pairwise(ticks)]
    assert max(gaps) < 1.0, f"the event loop stood still for {max(gaps):.1f} s"


def test_w5_k6_an_engine_page_parse_stops_at_the_search_deadline(agent, tmp_path, server) -> None:
    """The parse ran in a thread the deadline left behind, which went on alone for seconds (the
    rest of about 9 s of CPU) burning a core and holding a default-executor thread. Now the parser
    checks the search's stop flag between result blocks: the thread ends within one block's work."""
    filler = "<p><span>x</span></p>" * 190_000
    page = "<html><body>" + '<div class="result">' * 250 + filler + "</div>" * 250 + "</body></html>"
    server.route("/ddg", static(200, page, content_type=HTML))
    s = session(agent, tmp_path, server)
    res = s.tool("web_search", {"query": P.QUERY, "engines": ["ddg"], "timeout": 2})
    assert res.exit_code != 0  # nothing parsed in time

    ended = time.monotonic()
    while _parsing() and time.monotonic() - ended < 20:
        time.sleep(0.01)
    late = time.monotonic() - ended
    assert late < 0.5, f"the parse went on for {late:.1f} s after the call ended"


def _parsing() -> bool:
    """Whether some thread of this process is inside an engine parser now."""
    for frame in sys._current_frames().values():
        while frame is not None:
            if frame.f_code.co_filename.endswith("web_search/parsers.py"):
                return True
            frame = frame.f_back
    return False
