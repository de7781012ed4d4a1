"""The ``web_search`` tool (SPEC W-1…W-5; REFERENCE 4.10).

Invariants:

- Parameters: ``query`` (non-blank; URLs in it are reduced to their anchors so no query string or
  credential is sent to an engine), ``engines`` (a list or a comma string; explicit engines run
  only their tiers), ``limit`` (1–50, default 10), ``timeout`` (1–60 s, default the configured 10),
  ``proxy`` (``http(s)://`` or ``socks5://[user:password@]host:port``; its host must pass the SSRF
  guard; its credentials are masked in events and digested in the coalescing key), ``format`` (``text`` |
  ``json``), ``full_text_bytes`` (512–32768, JSON only). An unknown key is refused, with a hint for
  ``engine`` → ``engines``.
- Concurrency (W-4): identical concurrent searches are coalesced through the shared state store
  (single flight: ``leader``/``shared``/``bypass``/``abandoned``, reported in
  ``search_coalescing``); each search that actually runs holds a slot of the search bulkhead
  (``A3S_SEARCH_MAX_CONCURRENT``, default 4) shared by the run (the session and the ``task``
  children it delegated) — or by the whole fleet with ``search_breaker_scope="fleet"``. The
  circuit breakers are per session, per run (``"run"``) or fleet-wide (``"fleet"``). In embedded mode the
  store is in memory; with a broker it is Redis, so every worker sees the same breakers, bulkhead
  and flights.
- The whole call — bulkhead wait, every tier, browser shutdown — is bounded by ``timeout`` (plus
  the 2 s browser close); the call's deadline gives ``timeout{op:"web_search"}``.
- Every engine request goes through the safe transport; the headless tier's Chromium has no
  network of its own (``browser.py``).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from kernel.capabilities import ToolCapabilities
from kernel.context import ToolContext
from kernel.errors import InvalidArgument, Timeout
from kernel.result import ToolResult
from kernel.spec import ToolSpec
from kernel.state import BreakerScope, MemoryStateStore, StateStore
from tools.net import SafeHttp, anchor_of, parse_url, read_body, redact_proxy_arg, safe_http
from tools.net.proxy import check_proxy_url
from tools.web_search import render
from tools.web_search.browser import CLOSE_BUDGET_S
from tools.web_search.cascade import Cascade, CascadeReport
from tools.web_search.config import SearchConfig, config_of
from tools.web_search.engines import Engine, automatic_engines, resolve_engine
from tools.web_search.retries import BrowserRetries

NAME = "web_search"
MAX_LIMIT = 50
MAX_TIMEOUT_S = 60.0
MAX_QUERY_CHARS = 2048
FULL_TEXT_CONCURRENCY = 4
FULL_TEXT_PAGE_BYTES = 5 * 1024 * 1024
STORE_KEY = "web_search.state_store"
_URL_IN_QUERY = re.compile(r"https?://[^\s\"'<>]+", re.IGNORECASE)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS, description="What to search for.")
    engines: list[str] | str | None = Field(
        default=None, description="Engines to use (list or comma string); default: the tiered cascade."
    )
    limit: int = Field(default=10, ge=1, le=MAX_LIMIT, description="Results to return (max 50).")
    timeout: float | None = Field(
        default=None, ge=1, le=MAX_TIMEOUT_S, description="Seconds (1-60, default 10)."
    )
    proxy: str | None = Field(
        default=None,
        max_length=2048,
        description="Proxy for this search: http://, https:// or socks5://[user:password@]host:port.",
    )
    format: Literal["text", "json"] = Field(default="text", description="text (default) or json.")
    full_text_bytes: int | None = Field(
        default=None,
        ge=512,
        le=32768,
        description="JSON only: include up to this many bytes of each page's text.",
    )

    @model_validator(mode="before")
    @classmethod
    def _hint_engines(cls, data: Any) -> Any:
        if isinstance(data, dict) and "engine" in data and "engines" not in data:
            raise ValueError("unknown parameter 'engine'; did you mean 'engines' (a list or comma string)?")
        return data


def capabilities(_params: Params) -> ToolCapabilities:
    return ToolCapabilities.parallel_safe_read(8)


def sanitize_query(query: str) -> str:
    text = _URL_IN_QUERY.sub(lambda m: anchor_of(m.group(0)), query)
    return re.sub(r"\s+", " ", _CONTROL.sub(" ", text)).strip()


def select_engines(requested: list[str] | str | None, config: SearchConfig) -> tuple[str, list[Engine]]:
    """``(engine_selection_source, engines)``: the request's engines, else the configured
    ``A3S_SEARCH_ENGINES``, else the automatic selection."""
    source = "request"
    if requested is None or (isinstance(requested, str) and not requested.strip()) or requested == []:
        if not config.engines:
            return "default", automatic_engines(config)
        source, requested = "config", list(config.engines)
    names = requested.split(",") if isinstance(requested, str) else list(requested)
    engines: list[Engine] = []
    for name in names:
        if not name.strip():
            continue
        engine = resolve_engine(name)
        if engine not in engines:
            engines.append(engine)
    if not engines:
        raise InvalidArgument("engines names no engine")
    return source, engines


def tiers_of(engines: list[Engine], config: SearchConfig) -> list[tuple[str, list[Engine]]]:
    order = list(config.cascade) + [t for t in ("headless", "http", "api") if t not in config.cascade]
    return [
        (tier, [e for e in engines if e.tier == tier])
        for tier in order
        if any(e.tier == tier for e in engines)
    ]


def state_store(ctx: ToolContext) -> StateStore:
    store = ctx.services.get("state_store")
    if store is None:  # no shared store configured (e.g. a bare test context): one per session
        store = ctx.session_state.get(STORE_KEY)
        if not isinstance(store, MemoryStateStore):
            store = ctx.session_state.setdefault(STORE_KEY, MemoryStateStore())
    return store  # type: ignore[no-any-return]


def run_of(session_id: str) -> str:
    """The run a session belongs to: delegated children are ``<parent>.<task_id>``, so the run is
    the root session's id."""
    return session_id.split(".", 1)[0] or "default"


def _scope(ctx: ToolContext) -> BreakerScope:
    """Who shares the circuit breakers (``search_breaker_scope``: session, run or fleet)."""
    kind = getattr(ctx.settings, "search_breaker_scope", "session")
    if kind == "fleet":
        return BreakerScope("fleet", NAME)
    if kind == "run":
        return BreakerScope("run", run_of(ctx.session_id or "default"))
    return BreakerScope("session", ctx.session_id or "default")


def _bulkhead(ctx: ToolContext) -> str:
    """Who shares the search bulkhead (W-4: delegated research shares it): the run, or the fleet."""
    if getattr(ctx.settings, "search_breaker_scope", "session") == "fleet":
        return f"{NAME}:fleet:{NAME}"
    return f"{NAME}:run:{run_of(ctx.session_id or 'default')}"


def _flight_key(
    query: str, engines: list[Engine], params: Params, timeout: float, config: SearchConfig
) -> str:
    proxy_url = None if params.proxy is None else check_proxy_url(params.proxy)
    # The proxy's anchor and a digest of its credentials (never the credentials): searches through
    # the same proxy under different users' credentials do not share a flight.
    proxy = None if proxy_url is None else [proxy_url.anchor, proxy_url.credential_digest]
    shape = [
        query,
        [e.name for e in engines],
        params.limit,
        timeout,
        params.format,
        params.full_text_bytes,
        proxy,
        config.fingerprint(),
    ]
    return hashlib.sha256(json.dumps(shape).encode()).hexdigest()


async def _full_texts(
    http: SafeHttp, report: CascadeReport, limit: int, max_bytes: int, left: float
) -> dict[str, str]:
    from tools.web_fetch.convert import convert
    from tools.web_fetch.extract import classify

    gate = asyncio.Semaphore(FULL_TEXT_CONCURRENCY)
    # One deadline for the whole stage, the wait for the gate included: a per-page timeout started
    # when a page got the gate, so 12 stalling pages at 4 at a time took 3 × ``left`` and the outer
    # deadline failed a search that had met its gate (a 2 s search: ``timeout`` after 5 s).
    until = asyncio.get_running_loop().time() + max(0.5, left)

    async def one(url: str) -> tuple[str, str | None]:
        try:
            async with asyncio.timeout_at(until), gate:
                async with http.open(parse_url(url), op=NAME) as got:
                    if got.response.status_code != 200:
                        return url, None
                    ctype = got.response.headers.get("content-type")
                    body = await read_body(got.response, FULL_TEXT_PAGE_BYTES, NAME, got.url)
                page = await asyncio.to_thread(classify, body, ctype)  # decoding may take 0.6 s
                text = page.text  # HTML: in a child the timeout kills (quadratic parser paths)
                if page.kind == "html":
                    text = (await convert(page.text, "text", True, url, NAME, max_chars=max_bytes))[0]
        except Exception:  # a page we cannot read (or not within the stage's time) has no full_text
            return url, None
        return url, text.encode("utf-8")[:max_bytes].decode("utf-8", "ignore")

    pairs = await asyncio.gather(*(one(r.url) for r in report.rows[:limit]))
    return {url: text for url, text in pairs if text}


async def _search(
    ctx: ToolContext,
    params: Params,
    query: str,
    source: str,
    engines: list[Engine],
    timeout_s: float,
    config: SearchConfig,
    store: StateStore,
) -> dict[str, Any]:
    """Run one search (the coalesced leader); the result is JSON (it may cross Redis)."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    deadline = ctx.clock.monotonic() + timeout_s
    scope = _scope(ctx)
    async with store.bulkheads().hold(_bulkhead(ctx), config.max_concurrent, timeout_s=timeout_s):
        http = safe_http(ctx, timeout=timeout_s, request_proxy=params.proxy)
        async with http:
            cascade = Cascade(
                config=config,
                http=http,
                breakers=store.breakers(scope, config.breaker_config()),
                query=query,
                limit=params.limit,
                tiers=tiers_of(engines, config),
                retries=BrowserRetries(store.bulkheads(), run_of(ctx.session_id or "default")),
                now_ms=ctx.clock.now_ms,
                monotonic=ctx.clock.monotonic,
                deadline=deadline,
            )
            report = await cascade.run()
            full: dict[str, str] = {}
            if params.full_text_bytes and report.health.met:
                full = await _full_texts(
                    http, report, params.limit, params.full_text_bytes, deadline - ctx.clock.monotonic()
                )
    duration_ms = int((loop.time() - started) * 1000)
    selected = [e.name for e in engines]
    if report.health.met:
        output, returned, limited = render.success(report, query, params.format, params.limit, full)
        meta = render.metadata(
            report, selection_source=source, selected=selected, returned=returned, output_limited=limited
        )
        return {"output": output, "exit_code": 0, "metadata": meta, "error_kind": None}
    output, kind, shown = render.failed(report, query, params.format, params.limit, duration_ms)
    meta = render.metadata(
        report, selection_source=source, selected=selected, returned=0, output_limited=False
    )
    meta["candidate_count"] = shown
    return {"output": output, "exit_code": 1, "metadata": meta, "error_kind": kind}


async def run(ctx: ToolContext, params: Params) -> ToolResult:
    query = sanitize_query(params.query)
    if not query:
        raise InvalidArgument("query must not be blank")
    if params.full_text_bytes is not None and params.format != "json":
        raise InvalidArgument("full_text_bytes is only available with format='json'")
    if params.proxy is not None:
        check_proxy_url(params.proxy)
    config = config_of(ctx.services)
    source, engines = select_engines(params.engines, config)
    if not engines:
        raise InvalidArgument("no search engine is configured")
    timeout = float(params.timeout or config.default_timeout_s)
    store = state_store(ctx)
    coalescer = store.coalescer(NAME)
    key = _flight_key(query, engines, params, timeout, config)
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        async with asyncio.timeout(timeout + CLOSE_BUDGET_S + 1.0):
            flight = await coalescer.run(
                key, lambda: _search(ctx, params, query, source, engines, timeout, config, store)
            )
    except TimeoutError:
        raise Timeout(
            f"web_search timed out after {timeout:.0f}s",
            op=NAME,
            duration_ms=int((loop.time() - started) * 1000),
        ) from None
    except Timeout as exc:  # no bulkhead slot within the call's time
        raise Timeout(
            f"web_search: {exc.message}", op=NAME, duration_ms=exc.data.get("duration_ms")
        ) from None
    value = flight.value
    meta = dict(value["metadata"])
    meta["search_coalescing"] = {**coalescer.stats(), "role": flight.role}
    result = ToolResult(
        name=NAME,
        output=value["output"],
        exit_code=int(value["exit_code"]),
        metadata=meta,
        error_kind=value["error_kind"],
    )
    result.trust = "external"
    return result


TOOL = ToolSpec(
    name=NAME,
    description=(
        "Search the web. Engines run in tiers (headless browser, then HTML/RSS pages, then APIs) until "
        "the results are structurally sound (enough usable, on-topic results from several hosts); "
        "otherwise the call fails closed with the candidates and the retrieval health. format='json' "
        "returns a results array."
    ),
    params=Params,
    run=run,
    capabilities=capabilities,
    trust="external",
    examples=({"query": "rust ownership borrowing rules", "limit": 5},),
    builtin=True,
    event_args=redact_proxy_arg,
)
