"""``NetRuntime``: the process's network runtime that tools receive as ``ctx.services["net"]``.

It carries what is decided once per process at the edge (CONVENTIONS §6, §11, §12): the resolver
(``SystemResolver``; tests hand in a ``StaticResolver``), the default allow list (``A3S_NET_ALLOW``),
the environment's proxies and the user agent. A session may narrow or widen the allow list with
``SessionOptions.net_allow`` (None = the process default). ``safe_http(ctx)`` gives a tool its
per-call ``SafeHttp``; nothing else in ``tools/`` opens network connections.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpcore
import httpx

from kernel.context import ToolContext
from kernel.errors import InvalidArgument
from tools.net.addresses import IPAddress
from tools.net.backend import ssl_context
from tools.net.client import DEFAULT_USER_AGENT, SafeHttp
from tools.net.decoding import BodyTooLarge, BoundedDecoder
from tools.net.errors import map_http_error
from tools.net.guard import NetAllow, NetGuard
from tools.net.proxy import ProxySettings
from tools.net.resolver import Resolver, SystemResolver
from tools.net.urls import SafeUrl

SERVICE_KEY = "net"
# A chunk h11 has already buffered is handed over without a trip through the event loop: 1 MiB
# sent as 1-byte chunks (6 MB on the wire) held the loop for 6.4 s, and the call's own deadline
# could not fire meanwhile. ``read_body`` lets the loop run every this many chunks.
YIELD_EVERY_CHUNKS = 256


@dataclass
class NetRuntime:
    resolver: Resolver = field(default_factory=SystemResolver)
    allow: NetAllow = field(default_factory=NetAllow)
    proxies: ProxySettings = field(default_factory=ProxySettings)
    user_agent: str = DEFAULT_USER_AGENT
    # Tests: the socket layer under the guard (``RefusingBackend`` never connects) and a probe.
    inner_backend: httpcore.AsyncNetworkBackend | None = None
    on_connect: Callable[[str, IPAddress, int], None] | None = None
    # Trust anchors for TLS (default: certifi's CA bundle, plus A3S_CA_BUNDLE's certificates).
    tls: ssl.SSLContext | None = None

    @classmethod
    def from_settings(cls, settings: Any, environ: Mapping[str, str]) -> NetRuntime:
        """``settings.net_allow`` (A3S_NET_ALLOW), ``settings.ca_bundle`` (A3S_CA_BUNDLE: extra CA
        certificates, loaded now so a bad file fails here) and the environment's proxies."""
        ca_bundle = getattr(settings, "ca_bundle", None)
        return cls(
            allow=NetAllow.parse(getattr(settings, "net_allow", "") or ""),
            proxies=ProxySettings.from_env(environ),
            tls=ssl_context(ca_bundle) if ca_bundle else None,
        )

    def guard(self, allow: NetAllow | None = None) -> NetGuard:
        return NetGuard(self.allow if allow is None else allow, self.resolver)

    def client(
        self,
        allow: NetAllow | None = None,
        *,
        timeout: float | httpx.Timeout = 30.0,
        request_proxy: str | None = None,
        max_connections: int = 8,
    ) -> SafeHttp:
        return SafeHttp(
            self.guard(allow),
            proxies=self.proxies,
            request_proxy=request_proxy,
            timeout=timeout,
            user_agent=self.user_agent,
            inner_backend=self.inner_backend,
            max_connections=max_connections,
            on_connect=self.on_connect,
            tls=self.tls,
        )


_DEFAULT = NetRuntime()


def runtime_of(ctx: ToolContext) -> NetRuntime:
    runtime = ctx.services.get(SERVICE_KEY)
    return runtime if isinstance(runtime, NetRuntime) else _DEFAULT


def allow_of(ctx: ToolContext, runtime: NetRuntime | None = None) -> NetAllow:
    """The session's allow list (``SessionOptions.net_allow``), else the process default."""
    entries = getattr(ctx.settings, "net_allow", None)
    if entries is None:
        return (runtime or runtime_of(ctx)).allow
    return NetAllow.parse(entries)


def safe_http(
    ctx: ToolContext,
    *,
    timeout: float | httpx.Timeout = 30.0,
    request_proxy: str | None = None,
    max_connections: int = 8,
) -> SafeHttp:
    runtime = runtime_of(ctx)
    return runtime.client(
        allow_of(ctx, runtime), timeout=timeout, request_proxy=request_proxy, max_connections=max_connections
    )


async def read_body(response: httpx.Response, max_bytes: int, op: str, url: SafeUrl) -> bytes:
    """The decoded body, refused past ``max_bytes`` — declared (Content-Length), streamed or
    decoded (``decoding.BoundedDecoder``: a compression bomb stops at the limit, not after it)."""
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise InvalidArgument(
            f"{op}: {url.anchor} declares {int(declared)} bytes, more than the {max_bytes}-byte limit"
        )
    buf = bytearray()
    chunks = 0
    try:
        # Decoded here, not by httpx: one chunk of layered gzip may inflate without bound there.
        decoder = BoundedDecoder(response.headers.get("content-encoding", ""), max_bytes)
        async for chunk in response.aiter_raw():
            buf += decoder.feed(chunk)
            chunks += 1
            if chunks % YIELD_EVERY_CHUNKS == 0:
                await asyncio.sleep(0)
        buf += decoder.finish()
    except BodyTooLarge:
        raise InvalidArgument(
            f"{op}: the body of {url.anchor} is larger than the {max_bytes}-byte limit"
        ) from None
    except (httpx.HTTPError, httpx.StreamError) as exc:
        raise map_http_error(exc, op, url.anchor, str(url.url)) from None
    return bytes(buf)
