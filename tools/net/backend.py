"""The pinned connection: an httpcore network backend that connects only to verified addresses (D-3).

httpx hands every new connection's host and port to ``GuardedBackend.connect_tcp``. There the guard
resolves the name (every answer checked, mixed answers refused) and the socket is opened to one of
*those* addresses — the name is never passed to the socket layer, so no second resolution can
return something else (DNS rebinding). TLS is started by httpcore afterwards with the URL's host
as SNI and for certificate checks, and the ``Host`` header is the URL's: pinning changes where we
connect, not what we ask for. Unix sockets are refused.

``GuardedTransport`` is an ``httpx.AsyncHTTPTransport`` whose connection pool uses this backend
(httpx has no public knob for the backend; ``tests/tools/test_net_transport.py`` pins that the pool
we install is the one requests go through).

``ProxiedTransport`` is httpx's proxy transport built the same way, on a ``ClosingBackend``: every
stream it opened is closed with the pool (httpcore 1.0.9 leaves the socket of a failed SOCKS5
handshake — e.g. refused credentials — open).
"""

# ruff: noqa: ASYNC109  (the `timeout` parameters are httpcore's backend interface)
from __future__ import annotations

import contextlib
import ssl
import threading
from collections.abc import Callable, Iterable
from typing import Any

import httpcore
import httpx

from tools.net.addresses import IPAddress
from tools.net.guard import NetGuard
from tools.net.sockets import ProxySocketBackend, SocketBackend, connect_any

_SSL_CONTEXTS: dict[str | None, ssl.SSLContext] = {}
_SSL_LOCK = threading.Lock()


def ssl_context(extra_ca: str | None = None) -> ssl.SSLContext:
    """One verified TLS context per process and CA file (loading the CA bundle costs ~20 ms each
    time): certifi's roots, plus the certificates of the PEM file ``extra_ca`` (``A3S_CA_BUNDLE``)
    when given. A file that is missing or holds no certificate is a ``ValueError`` naming it."""
    with _SSL_LOCK:
        context = _SSL_CONTEXTS.get(extra_ca)
        if context is None:
            context = httpx.create_ssl_context(verify=True, trust_env=False)
            if extra_ca:
                try:
                    context.load_verify_locations(cafile=extra_ca)
                except (OSError, ssl.SSLError) as exc:
                    reason = (
                        exc.strerror if isinstance(exc, OSError) and exc.strerror else exc.__class__.__name__
                    )
                    raise ValueError(
                        f"A3S_CA_BUNDLE={extra_ca}: not a readable PEM file of CA certificates ({reason})"
                    ) from None
            _SSL_CONTEXTS[extra_ca] = context
        return context


class _TcpOnlyBackend(httpcore.AsyncNetworkBackend):
    """A backend over ``inner`` that never opens a unix socket (only TCP leaves the safe transport)."""

    inner: httpcore.AsyncNetworkBackend

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("unix sockets are not reachable through the safe transport")

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


class GuardedBackend(_TcpOnlyBackend):
    def __init__(
        self,
        guard: NetGuard,
        inner: httpcore.AsyncNetworkBackend | None = None,
        on_connect: Callable[[str, IPAddress, int], None] | None = None,
    ) -> None:
        self.guard = guard
        self.inner = inner or SocketBackend()
        self.on_connect = on_connect

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        addresses = await self.guard.addresses(host, port)

        async def connect(ip: IPAddress) -> httpcore.AsyncNetworkStream:
            if self.on_connect is not None:
                self.on_connect(host, ip, port)
            return await self.inner.connect_tcp(str(ip), port, timeout, local_address, socket_options)

        # every one of them was verified; try them in the resolver's order
        return await connect_any(addresses, connect, host)


class GuardedTransport(httpx.AsyncHTTPTransport):
    def __init__(
        self, backend: GuardedBackend, *, max_connections: int = 8, tls: ssl.SSLContext | None = None
    ) -> None:
        tls = tls or ssl_context()
        super().__init__(verify=tls, trust_env=False)
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=tls,
            max_connections=max_connections,
            max_keepalive_connections=max_connections,
            keepalive_expiry=5.0,
            network_backend=backend,
        )
        self.backend = backend


class ClosingBackend(_TcpOnlyBackend):
    """Delegates to ``inner`` and remembers each stream, so ``aclose_all`` can close any left open."""

    def __init__(self, inner: httpcore.AsyncNetworkBackend | None = None) -> None:
        self.inner = inner or httpcore.AnyIOBackend()
        self.streams: list[httpcore.AsyncNetworkStream] = []

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        stream = await self.inner.connect_tcp(host, port, timeout, local_address, socket_options)
        self.streams.append(stream)
        return stream

    async def aclose_all(self) -> None:
        streams, self.streams = self.streams, []
        for stream in streams:
            with contextlib.suppress(Exception):  # most were closed by their connection already
                await stream.aclose()


class ProxiedTransport(httpx.AsyncHTTPTransport):
    """Requests through one proxy (http, https, socks5, socks5h) at ``host``, with ``auth`` if any."""

    def __init__(
        self,
        proxy: httpx.Proxy,
        *,
        max_connections: int = 8,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        tls = tls or ssl_context()
        super().__init__(verify=tls, trust_env=False)
        # Our sockets under http and SOCKS proxies (https through them reads every TLS record
        # received at once); an https proxy needs TLS inside TLS, which only anyio's streams do.
        inner = httpcore.AnyIOBackend() if proxy.url.scheme == "https" else ProxySocketBackend()
        self.backend = ClosingBackend(inner)
        url = httpcore.URL(
            scheme=proxy.url.raw_scheme, host=proxy.url.raw_host, port=proxy.url.port, target=b"/"
        )
        common: dict[str, Any] = {
            "proxy_auth": proxy.raw_auth,
            "ssl_context": tls,
            "max_connections": max_connections,
            "max_keepalive_connections": max_connections,
            "keepalive_expiry": 5.0,
            "network_backend": self.backend,
        }
        if proxy.url.scheme in ("socks5", "socks5h"):
            self._pool = httpcore.AsyncSOCKSProxy(proxy_url=url, **common)
        else:
            tunnel_tls = tls if proxy.url.scheme == "https" else None  # TLS to the proxy itself
            self._pool = httpcore.AsyncHTTPProxy(proxy_url=url, proxy_ssl_context=tunnel_tls, **common)

    async def aclose(self) -> None:
        try:
            await super().aclose()
        finally:
            await self.backend.aclose_all()


class RefusingBackend(_TcpOnlyBackend):
    """For tests: records where the guard would have connected and never opens a socket."""

    def __init__(self) -> None:
        self.inner = httpcore.AnyIOBackend()  # for sleep() only
        self.attempts: list[tuple[str, int]] = []

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        self.attempts.append((host, port))
        raise httpcore.ConnectError(f"test backend: no connection to {host}:{port} is ever opened")
