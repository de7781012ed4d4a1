"""``SafeHttp``: the one HTTP client of every tool (SPEC D-3, W-6; REFERENCE 4.6, 4.9).

Invariants:

- Every URL — the first and each redirect hop — passes ``parse_url`` and the guard's literal check
  before a request is built; a direct connection then goes through ``GuardedBackend`` (resolved,
  every answer checked, pinned). A refused hop raises before anything is sent to it.
- Redirects are followed here, by hand, never by httpx: at most ``MAX_REDIRECTS`` hops (a caller
  may pass in hops already spent, e.g. ``web_fetch``'s meta refresh); each intermediate response is
  closed; 303 (and 301/302 after a POST) become GET without a body. A hop to another origin
  (scheme, host or port) drops ``Authorization``, ``Proxy-Authorization``, ``Cookie`` and
  ``If-Range``; the per-call cookie jar only ever sends a cookie back to the domain that set it.
- Proxies (http, https, socks5): a request-level proxy (``web_search``'s ``proxy``) or the environment's
  ``HTTP(S)_PROXY``/``ALL_PROXY`` (honouring ``NO_PROXY``) — read once at the process edge into
  ``ProxySettings``. Through a proxy the proxy resolves names, so only the literal checks apply
  to the target. A proxy configured by the operator is trusted; one named in a request is resolved
  through the guard and reached by its verified address.
- One ``SafeHttp`` per tool call; ``aclose`` closes its pools.
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.request import proxy_bypass_environment

import httpcore
import httpx

from kernel.errors import InvalidArgument
from tools.net.addresses import IPAddress
from tools.net.backend import GuardedBackend, GuardedTransport, ssl_context
from tools.net.errors import map_http_error
from tools.net.guard import NetGuard
from tools.net.sockets import HeaderClaim, RawBody, SocketStream, exact_headers
from tools.net.urls import SafeUrl, parse_url

MAX_REDIRECTS = 10
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
CROSS_ORIGIN_DROPPED = ("authorization", "proxy-authorization", "cookie", "if-range")
BODY_HEADERS = ("content-type", "content-length", "content-encoding", "transfer-encoding")
DEFAULT_USER_AGENT = "a3s-fleet/0.1 (+https://github.com/a3s-lab)"
# socks5/socks5h go through httpcore's SOCKS proxy (socksio); both let the proxy resolve names.
PROXY_SCHEMES = ("http", "https", "socks5", "socks5h")


@dataclass(frozen=True)
class ProxySettings:
    """Proxies from the process environment (curl's conventions), read once at the edge."""

    http: str | None = None
    https: str | None = None
    no_proxy: str = ""

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> ProxySettings:
        def first(*names: str) -> str | None:
            for name in names:
                value = environ.get(name, "").strip()
                if value:
                    return value
            return None

        fallback = first("ALL_PROXY", "all_proxy")
        return cls(
            http=first("HTTP_PROXY", "http_proxy") or fallback,
            https=first("HTTPS_PROXY", "https_proxy") or fallback,
            no_proxy=first("NO_PROXY", "no_proxy") or "",
        )

    def for_url(self, url: SafeUrl) -> str | None:
        proxy = self.https if url.scheme == "https" else self.http
        if proxy is None:
            return None
        if self.no_proxy and proxy_bypass_environment(url.host, {"no": self.no_proxy}):
            return None
        return proxy


def check_proxy_url(raw: str) -> httpx.URL:
    """A proxy URL a request named: ``scheme://host:port`` (http, https, socks5 or socks5h) with a port."""
    try:
        url = httpx.URL(raw.strip())
    except (httpx.InvalidURL, ValueError, TypeError) as exc:
        raise InvalidArgument(f"invalid proxy url: {exc}") from None
    if url.scheme not in PROXY_SCHEMES:
        raise InvalidArgument(
            f"proxy must be http://host:port, https://host:port or socks5://host:port, not {url.scheme}:"
        )
    if not url.host or url.port is None:
        raise InvalidArgument("proxy must name a host and a port (http://host:port or socks5://host:port)")
    return url


@dataclass
class Fetched:
    """An open response at the end of a redirect chain (``chain[0]`` asked, ``chain[-1]`` answered)."""

    response: httpx.Response
    chain: list[SafeUrl] = field(default_factory=list)
    claim: HeaderClaim | None = None  # set when opened with ``raw_body=True``

    def take_raw_body(self) -> RawBody | None:
        """The body as a ``RawBody`` (read off the event loop), or None: then read it through httpx.

        Only a ``Content-Length`` body of a plain, direct connection whose headers were read
        exactly (``tools/net/sockets.py``). Once taken, the response must not be read otherwise.
        """
        response = self.response
        if self.claim is None or response.is_stream_consumed or response.is_closed:
            return None
        if (
            response.request.method == "HEAD"
            or response.status_code < 200
            or response.status_code in (204, 304)
        ):
            return None
        length = response.headers.get("content-length", "")
        if "transfer-encoding" in response.headers or not length.isdigit():
            return None
        stream = response.extensions.get("network_stream")
        if not isinstance(stream, SocketStream):
            return None
        return stream.take_body(self.claim, int(length))

    @property
    def url(self) -> SafeUrl:
        return self.chain[-1]

    @property
    def redirects(self) -> int:
        return len(self.chain) - 1


class TooManyRedirects(InvalidArgument):
    pass


class SafeHttp:
    def __init__(
        self,
        guard: NetGuard,
        *,
        proxies: ProxySettings | None = None,
        request_proxy: str | None = None,
        timeout: float | httpx.Timeout = 30.0,
        user_agent: str = DEFAULT_USER_AGENT,
        inner_backend: httpcore.AsyncNetworkBackend | None = None,
        max_connections: int = 8,
        on_connect: Callable[[str, IPAddress, int], None] | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.guard = guard
        self.tls = tls
        self.proxies = proxies or ProxySettings()
        self.request_proxy = check_proxy_url(request_proxy) if request_proxy else None
        self.timeout = timeout if isinstance(timeout, httpx.Timeout) else httpx.Timeout(timeout)
        self.headers = {"User-Agent": user_agent}
        self.backend = GuardedBackend(guard, inner_backend, on_connect)
        self.max_connections = max_connections
        self._direct: httpx.AsyncClient | None = None
        self._proxied: dict[str, httpx.AsyncClient] = {}
        self._pinned_proxy: str | None = None
        self.requests = 0

    async def __aenter__(self) -> SafeHttp:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        clients = [c for c in (self._direct, *self._proxied.values()) if c is not None]
        self._direct, self._proxied = None, {}
        for client in clients:
            with contextlib.suppress(Exception):
                await client.aclose()

    async def _request_proxy(self) -> str:
        """A proxy the request named is untrusted: its host goes through the guard (resolved, every
        answer checked) and the proxy is then reached by the verified address."""
        assert self.request_proxy is not None
        if self._pinned_proxy is None:
            proxy = self.request_proxy
            port = proxy.port or (443 if proxy.scheme == "https" else 80)
            ip = (await self.guard.addresses(proxy.raw_host.decode("ascii"), port))[0]
            host = f"[{ip}]" if ip.version == 6 else str(ip)
            self._pinned_proxy = f"{proxy.scheme}://{host}:{port}"
        return self._pinned_proxy

    async def _client_for(self, url: SafeUrl) -> httpx.AsyncClient:
        proxy = await self._request_proxy() if self.request_proxy is not None else self.proxies.for_url(url)
        if proxy is None:
            if self._direct is None:
                transport = GuardedTransport(self.backend, max_connections=self.max_connections, tls=self.tls)
                self._direct = httpx.AsyncClient(
                    transport=transport, timeout=self.timeout, headers=self.headers, trust_env=False
                )
            return self._direct
        client = self._proxied.get(proxy)
        if client is None:
            client = httpx.AsyncClient(
                proxy=proxy,
                verify=self.tls or ssl_context(),
                timeout=self.timeout,
                headers=self.headers,
                trust_env=False,
                limits=httpx.Limits(max_connections=self.max_connections),
            )
            self._proxied[proxy] = client
        return client

    def check(self, url: SafeUrl) -> None:
        """The literal checks for one hop (raises before any request)."""
        self.guard.check_literal(url.host)

    @contextlib.asynccontextmanager
    async def open(
        self,
        url: SafeUrl,
        *,
        method: str = "GET",
        headers: Mapping[str, str] | None = None,
        json: Any = None,
        max_redirects: int = MAX_REDIRECTS,
        redirects_used: int = 0,
        follow_redirects: bool = True,
        op: str = "http",
        raw_body: bool = False,
    ) -> AsyncIterator[Fetched]:
        """Send ``method`` to ``url`` following redirects by hand; yields the final open response.

        ``follow_redirects=False`` yields a 3xx as it is (the browser tier hands it to Chromium,
        whose next request is intercepted and checked again). ``raw_body=True`` reads each
        response's headers exactly, so the final body may be taken with ``take_raw_body``."""
        chain = [url]
        current = url
        send_headers = {k.lower(): v for k, v in (headers or {}).items()}
        body = json
        used = redirects_used
        while True:
            self.check(current)
            client = await self._client_for(current)
            claim: HeaderClaim | None = None
            try:
                request = client.build_request(method, current.url, headers=send_headers, json=body)
                self.requests += 1
                if raw_body:
                    with exact_headers() as claim:
                        response = await client.send(request, stream=True)
                else:
                    response = await client.send(request, stream=True)
            except (httpx.HTTPError, httpx.StreamError, httpx.InvalidURL, httpcore.ConnectError) as exc:
                raise map_http_error(exc, op, current.anchor, str(current.url)) from None
            location = response.headers.get("location")
            if not follow_redirects or response.status_code not in REDIRECT_STATUSES or not location:
                break
            await response.aclose()
            if used >= max_redirects:
                raise TooManyRedirects(f"{op}: more than {max_redirects} redirects (last: {current.anchor})")
            used += 1
            nxt = parse_url(location, base=current)
            if nxt.origin != current.origin:
                for name in CROSS_ORIGIN_DROPPED:
                    send_headers.pop(name, None)
            if response.status_code == 303 or (response.status_code in (301, 302) and method == "POST"):
                method = "GET" if method != "HEAD" else "HEAD"
                body = None
                for name in BODY_HEADERS:
                    send_headers.pop(name, None)
            current = nxt
            chain.append(current)
        try:
            yield Fetched(response, chain, claim)
        finally:
            await response.aclose()
