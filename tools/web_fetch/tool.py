"""The ``web_fetch`` tool: a web page as markdown, text or HTML, paged by characters (SPEC W-6, B-1).

Invariants:

- Every request goes through the safe transport (``tools/net``): the SSRF guard before each hop,
  pinned connections, at most ``MAX_REDIRECTS`` hops — a prompt HTML meta refresh counts as one.
  The request URL drops userinfo, the fragment and secret-looking query keys (``api_key`` …);
  results, metadata and events show URL anchors only.
- The body is at most ``MAX_BODY_BYTES`` (5 MiB), checked against ``Content-Length`` and while
  streaming (after content decoding, so a compression bomb stops at the limit too).
- Failures are typed from the status and the transport alone, never from the page's text:
  request/body I/O failures, 408 and 5xx → ``transport{op}``; 429 → ``rate_limited`` with the
  parsed ``Retry-After``; the call's ``timeout`` → ``timeout{op, duration_ms}``; other statuses
  are plain failures naming the status. A 200 page that *says* "429" is content.
- HTML conversion (CPU-bound, and quadratic on some hostile pages) runs in a child process
  (``convert.py``) that the call's deadline or cancel kills; the converted document is kept in a small per-session
  cache (``cache.py``) so paging through it with ``offset`` reads one consistent copy without
  fetching again.
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from kernel.capabilities import ToolCapabilities
from kernel.context import ToolContext
from kernel.errors import InvalidArgument, Timeout, ToolError
from kernel.result import ToolResult
from kernel.spec import ToolSpec
from tools.net import MAX_REDIRECTS, SafeUrl, parse_url, read_body, safe_http, status_error
from tools.net.client import TooManyRedirects
from tools.net.urls import redact_url_arg
from tools.web_fetch.cache import CachedDoc, FetchCache
from tools.web_fetch.convert import convert
from tools.web_fetch.extract import classify, meta_refresh
from tools.web_fetch.paging import DEFAULT_MAX_CHARS, page

NAME = "web_fetch"
MAX_BODY_BYTES = 5 * 1024 * 1024
DEFAULT_TIMEOUT_S = 30
MAX_TIMEOUT_S = 120
ACCEPT = "text/html,application/xhtml+xml,text/plain;q=0.9,application/json;q=0.8,*/*;q=0.5"


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str = Field(min_length=1, max_length=8192, description="http(s) URL of the page.")
    format: Literal["markdown", "text", "html"] = Field(
        default="markdown", description="markdown (default), text, or html."
    )
    timeout: int = Field(default=DEFAULT_TIMEOUT_S, ge=1, le=MAX_TIMEOUT_S, description="Seconds (max 120).")
    body_only: bool = Field(
        default=True, description="Main content only (default); false converts the whole document."
    )
    offset: int = Field(default=0, ge=0, description="Character offset to continue from.")
    max_chars: int = Field(
        default=DEFAULT_MAX_CHARS,
        ge=1,
        description="Characters to return (at most 100000; larger is clamped).",
    )


def capabilities(_params: Params) -> ToolCapabilities:
    return ToolCapabilities.read_only_paginated(8)


def _host(params: Params) -> str | None:
    try:
        return parse_url(params.url).host
    except ToolError:
        return None


def _refresh_url(target: str, base: SafeUrl) -> SafeUrl | None:
    """A meta refresh's target as a request URL, or None when it is none (``javascript:``,
    ``about:blank``, whitespace, bad punycode): then the refresh is page content. It failed the
    call as ``invalid_argument`` before, blaming a URL the model got right. The guard still
    judges a target that parses, as for any redirect."""
    try:
        return parse_url(target, base=base, drop_secret_query=True)
    except InvalidArgument:
        return None


async def _fetch(ctx: ToolContext, params: Params, url: SafeUrl) -> CachedDoc:
    """Fetch (following redirects and meta refreshes) and convert; raises typed errors."""
    http = safe_http(ctx, timeout=float(params.timeout))
    redirects = 0
    current = url
    async with http:
        while True:
            async with http.open(
                current, headers={"Accept": ACCEPT}, redirects_used=redirects, op=NAME
            ) as got:
                redirects += got.redirects
                final = got.url
                status = got.response.status_code
                if not 200 <= status < 300:
                    raise status_error(NAME, status, got.response.headers, final.anchor, ctx.clock.now_ms())
                content_type = got.response.headers.get("content-type")
                body = await read_body(got.response, MAX_BODY_BYTES, NAME, final)
            # Off the loop: decoding 5 MiB may take 0.6 s (``extract._sliced`` lets the loop in).
            doc = await asyncio.to_thread(classify, body, content_type)
            target = meta_refresh(doc.text) if doc.kind == "html" else None
            nxt = _refresh_url(target, final) if target is not None else None
            if nxt is not None and nxt.url != final.url:
                if redirects >= MAX_REDIRECTS:
                    raise TooManyRedirects(
                        f"{NAME}: more than {MAX_REDIRECTS} redirects (last: {final.anchor})"
                    )
                redirects += 1
                current = nxt
                continue
            break
    if doc.kind == "html":  # in a child the deadline kills: parsers have quadratic paths
        text, title = await convert(doc.text, params.format, params.body_only, str(final.url), NAME)
    else:
        text, title = doc.text, None
    return CachedDoc(
        text=text,
        final_anchor=final.anchor,
        status=status,
        content_type=doc.media_type,
        title=title,
        redirects=redirects,
        body_bytes=len(body),
    )


async def run(ctx: ToolContext, params: Params) -> ToolResult:
    url = parse_url(params.url, drop_secret_query=True)
    safe_http(ctx).check(url)  # literal SSRF checks before anything else
    cache = FetchCache.of(ctx.session_state)
    key = (str(url.url), params.format, params.body_only)
    doc = cache.get(key, ctx.clock.monotonic()) if params.offset > 0 else None
    cached = doc is not None
    if doc is None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            async with asyncio.timeout(params.timeout):
                doc = await _fetch(ctx, params, url)
        except TimeoutError:
            raise Timeout(
                f"web_fetch of {url.anchor} timed out after {params.timeout}s",
                op=NAME,
                duration_ms=int((loop.time() - started) * 1000),
            ) from None
        cache.put(key, doc, ctx.clock.monotonic())
    text, rng = page(doc.text, params.offset, params.max_chars)
    meta: dict[str, Any] = {
        "url": url.anchor,
        "final_url": doc.final_anchor,
        "source_anchors": [doc.final_anchor],
        "status": doc.status,
        "content_type": doc.content_type,
        "format": params.format,
        "body_only": params.body_only,
        "title": doc.title,
        "redirects": doc.redirects,
        "bytes": doc.body_bytes,
        "cached": cached,
        "range": rng,
    }
    result = ToolResult.success(NAME, text, meta)
    result.trust = "external"
    return result


TOOL = ToolSpec(
    name=NAME,
    description=(
        "Fetch a public web page and return its main content as markdown (default), text or html. "
        "Long pages are paged: pass offset=N from the continuation footer to read on. Private and "
        "local network addresses are refused; bodies over 5 MiB are refused."
    ),
    params=Params,
    run=run,
    capabilities=capabilities,
    subject=_host,
    trust="external",
    event_args=redact_url_arg,
    examples=({"url": "https://example.com/docs/page", "format": "markdown"},),
    builtin=True,
)
