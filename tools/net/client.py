"""``SafeHttp``: the one HTTP client of every tool (SPEC D-3, W-6; REFERENCE 4.6, 4.9).

Invariants:

- Every URL — the first and each redirect hop — passes ``parse_url`` and the guard's literal check
  before a request is built; a direct connection then goes through ``GuardedBackend`` (resolved,
  every answer checked, pinned). A refused hop raises before anything is sent to it.
- Redirects are followed here, by hand, never by httpx: at most ``MAX_REDIRECTS`` hops (a caller
  may pass in hops already spent, e.g. ``web_fetch``'s meta refresh); each intermediate response is
  closed; 303 (and 301/302 after a POST) become GET without a body. A hop to another origin
  (scheme, host or port) drops ``Authorization``, ``Proxy-Authorization``, ``Cookie``,
  ``If-Range`` and the API-key headers ``X-Subscription-Token`` and ``X-API-Key``; the per-call
  cookie jar only ever sends a cookie back to the domain that set it.
- Proxies (http, https, socks5; ``proxy.py``): a request-level proxy (``web_search``'s ``proxy``) or
  the environment's ``HTTP(S)_PROXY``/``ALL_PROXY`` (honouring ``NO_PROXY``) — read once at the
  process edge into ``ProxySettings``. Through a proxy the proxy resolves names, so only the literal
  checks apply to the target. A proxy configured by the operator is trusted; one named in a request
  is resolved through the guard and reached by its verified address. Either may carry
  ``user:password@``: the credentials go with the proxy's handshake, and a proxy that refuses them
  (407, SOCKS5 auth failure) is ``ProxyAuthFailed``, naming the proxy by its anchor only.
- One ``SafeHttp`` per tool call; ``aclose`` closes its pools.
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpcore
import httpx
from socksio import SOCKSError

from kernel.errors import InvalidArgument, Transport
from tools.net.addresses import IPAddress
from tools.net.backend import GuardedBackend, GuardedTransport, ProxiedTransport
from tools.net.decoding import ACCEPT_ENCODING
from tools.net.errors import ProxyAuthFailed, is_proxy_auth_failure, map_http_error, proxy_auth_failed
from tools.net.guard import NetGuard
from tools.net.proxy import ProxySettings, ProxyUrl, check_proxy_url, parse_proxy
from tools.net.sockets import HeaderClaim, RawBody, SocketStream, exact_headers
from tools.net.urls import SafeUrl, parse_url

MAX_REDIRECTS = 10
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
# Credentials never follow a hop to another origin: the standard ones, and the API-key headers
# our callers send (Brave's X-Subscription-Token went to whatever host a redirect named).
CROSS_ORIGIN_DROPPED = (
    "authorization",
    "proxy-authorization",
    "cookie",
    "if-range",
    "x-subscription-token",
    "x-api-key",
)
BODY_HEADERS = ("content-type", "content-length", "content-encoding", "transfer-encoding")
DEFAULT_USER_AGENT = "a3s-fleet/0.1 (+https://github.com/a3s-lab)"
PROXY_AUTH_REQUIRED = 407


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
        # Only what read_body decodes within its limit (a brotli install must not change that).
        self.headers = {"User-Agent": user_agent, "Accept-Encoding": ACCEPT_ENCODING}
        self.backend = GuardedBackend(guard, inner_backend, on_connect)
        self.max_connections = max_connections
        self._direct: httpx.AsyncClient | None = None
        self._proxied: dict[str, httpx.AsyncClient] = {}  # by ProxyUrl.key (no secret in it)
        self._env_proxies: dict[str, ProxyUrl] = {}
        self._pinned_proxy_host: str | None = None
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

    async def _pinned_host(self, proxy: ProxyUrl) -> str:
        """A proxy the request named is untrusted: its host goes through the guard (resolved, every
        answer checked) and the proxy is then reached by the verified address."""
        if self._pinned_proxy_host is None:
            port = proxy.port or (443 if proxy.scheme == "https" else 80)
            ip = (await self.guard.addresses(proxy.host, port))[0]
            self._pinned_proxy_host = str(ip)
        return self._pinned_proxy_host

    def _proxy_for(self, url: SafeUrl) -> ProxyUrl | None:
        if self.request_proxy is not None:
            return self.request_proxy
        raw = self.proxies.for_url(url)
        if raw is None:
            return None
        proxy = self._env_proxies.get(raw)
        if proxy is None:
            proxy = self._env_proxies[raw] = parse_proxy(raw, source="environment")
        return proxy

    async def _client_for(self, url: SafeUrl) -> tuple[httpx.AsyncClient, ProxyUrl | None]:
        proxy = self._proxy_for(url)
        if proxy is None:
            if self._direct is None:
                transport = GuardedTransport(self.backend, max_connections=self.max_connections, tls=self.tls)
                self._direct = httpx.AsyncClient(
                    transport=transport, timeout=self.timeout, headers=self.headers, trust_env=False
                )
            return self._direct, None
        client = self._proxied.get(proxy.key)
        if client is None:
            host = await self._pinned_host(proxy) if proxy.source == "request" else None
            transport = ProxiedTransport(
                proxy.to_httpx(host), max_connections=self.max_connections, tls=self.tls
            )
            client = httpx.AsyncClient(
                transport=transport, timeout=self.timeout, headers=self.headers, trust_env=False
            )
            self._proxied[proxy.key] = client
        return client, proxy

    @staticmethod
    def _proxy_refused(op: str, proxy: ProxyUrl) -> ProxyAuthFailed:
        return proxy_auth_failed(
            op, proxy.anchor, had_credentials=proxy.credentials is not None, source=proxy.source
        )

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
            client, proxy = await self._client_for(current)
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
                if proxy is not None and is_proxy_auth_failure(exc):
                    raise self._proxy_refused(op, proxy) from None
                raise map_http_error(exc, op, current.anchor, str(current.url)) from None
            except SOCKSError:  # socksio's, raised through httpcore as it is: a malformed reply
                raise Transport(
                    f"{op}: the SOCKS5 proxy {proxy.anchor if proxy is not None else '(none)'} answered a malformed reply",
                    op=op,
                ) from None
            except UnicodeError:
                # httpx builds the next request of every 3xx, followed or not, and reads the
                # Location's host: bad punycode (``xn--``) raises IDNAError there, not InvalidURL.
                raise Transport(
                    f"{op}: {current.anchor} answered a redirect to an invalid URL", op=op
                ) from None
            if proxy is not None and response.status_code == PROXY_AUTH_REQUIRED:
                # Only a proxy answers 407: a forwarded plain-http request it would not carry.
                await response.aclose()
                raise self._proxy_refused(op, proxy)
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
