"""Sockets under the safe transport: a lean plain-TCP stream, and TLS through anyio (SPEC D-3, D-4).

httpcore's default stream reads at most 64 KiB per call through anyio's protocol queue, so a
large download costs thousands of event-loop round trips (``bench/network.py`` measured httpx at
well under half of curl's throughput on loopback). ``SocketStream`` reads the connected,
non-blocking socket directly with ``loop.sock_recv`` in up to ``READ_BYTES`` at a time: returning
more than httpcore asked for is harmless (its HTTP/1.1 parser buffers whatever it is given) and
brings a single connection to curl's speed. TLS is started on the same socket and then runs
through anyio's ``TLSStream`` (``TLSSocketStream``); decryption dominates there anyway.

Every socket error is translated to the httpcore exception httpx expects (``ConnectError``,
``ReadError``, ``ReadTimeout`` …), so ``tools/net/errors.py`` maps them like any other.
"""

# ruff: noqa: ASYNC109  (the `timeout` parameters are httpcore's stream interface)
from __future__ import annotations

import asyncio
import contextlib
import select
import socket
import ssl
from collections.abc import Iterable
from typing import Any

import anyio
import anyio.abc
import anyio.streams.tls
import httpcore

READ_BYTES = 1 << 20


def _readable(sock: socket.socket | None) -> bool:
    """True when an idle pooled connection has data or EOF waiting (the server closed it)."""
    if sock is None or sock.fileno() < 0:
        return True
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


@contextlib.contextmanager
def _within(timeout: float | None, on_timeout: type[Exception], on_error: type[Exception]) -> Any:
    try:
        if timeout is None:
            yield
        else:
            with anyio.fail_after(timeout):
                yield
    except TimeoutError as exc:
        raise on_timeout(str(exc) or "timed out") from exc
    except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream) as exc:
        raise on_error(str(exc) or type(exc).__name__) from exc


async def open_tcp(
    address: str, port: int, timeout: float | None, socket_options: Iterable[Any] | None = None
) -> SocketStream:
    """A connected non-blocking socket to exactly ``address`` (an IP literal; never a name)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for option in socket_options or ():
            sock.setsockopt(*option)
        with _within(timeout, httpcore.ConnectTimeout, httpcore.ConnectError):
            await asyncio.get_running_loop().sock_connect(sock, (address, port))
    except BaseException:
        sock.close()
        raise
    return SocketStream(sock)


class SocketStream(httpcore.AsyncNetworkStream):
    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        loop = asyncio.get_running_loop()
        with _within(timeout, httpcore.ReadTimeout, httpcore.ReadError):
            return await loop.sock_recv(self._sock, max(max_bytes, READ_BYTES))

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if buffer:
            with _within(timeout, httpcore.WriteTimeout, httpcore.WriteError):
                await asyncio.get_running_loop().sock_sendall(self._sock, buffer)

    async def aclose(self) -> None:
        self._sock.close()

    async def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.AsyncNetworkStream:
        plain: anyio.abc.SocketStream | None = None
        try:
            with _within(timeout, httpcore.ConnectTimeout, httpcore.ConnectError):
                plain = await anyio.abc.SocketStream.from_socket(self._sock)
                tls = await anyio.streams.tls.TLSStream.wrap(
                    plain,
                    ssl_context=ssl_context,
                    hostname=server_hostname,
                    standard_compatible=False,
                    server_side=False,
                )
        except BaseException:
            if plain is not None:
                with contextlib.suppress(Exception):
                    await anyio.aclose_forcefully(plain)
            self._sock.close()
            raise
        return TLSSocketStream(tls, self._sock)

    def get_extra_info(self, info: str) -> Any:
        if info == "socket":
            return self._sock
        if info == "is_readable":
            return _readable(self._sock)
        if info == "client_addr":
            return self._sock.getsockname()
        if info == "server_addr":
            return self._sock.getpeername()
        return None


class TLSSocketStream(httpcore.AsyncNetworkStream):
    def __init__(self, stream: anyio.streams.tls.TLSStream, sock: socket.socket) -> None:
        self._stream = stream
        self._sock = sock

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        with _within(timeout, httpcore.ReadTimeout, httpcore.ReadError):
            try:
                return await self._stream.receive(max(max_bytes, READ_BYTES))
            except anyio.EndOfStream:
                return b""

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if buffer:
            with _within(timeout, httpcore.WriteTimeout, httpcore.WriteError):
                await self._stream.send(buffer)

    async def aclose(self) -> None:
        with contextlib.suppress(Exception):
            await self._stream.aclose()
        self._sock.close()

    async def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("TLS inside TLS is not supported")

    def get_extra_info(self, info: str) -> Any:
        if info == "ssl_object":
            return self._stream.extra(anyio.streams.tls.TLSAttribute.ssl_object, None)
        if info == "socket":
            return self._sock
        if info == "is_readable":
            return _readable(self._sock)
        if info == "client_addr":
            return self._sock.getsockname()
        if info == "server_addr":
            return self._sock.getpeername()
        return None


class SocketBackend(httpcore.AsyncNetworkBackend):
    """The socket layer ``GuardedBackend`` connects through by default (addresses only)."""

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        return await open_tcp(host, port, timeout, socket_options)

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("unix sockets are not reachable through the safe transport")

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
