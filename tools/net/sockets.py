"""Sockets under the safe transport: a lean plain-TCP stream, and TLS through anyio (SPEC D-3, D-4).

httpcore's default stream reads at most 64 KiB per call through anyio's protocol queue, so a
large download costs thousands of event-loop round trips (``bench/network.py`` measured httpx at
well under half of curl's throughput on loopback). ``SocketStream`` reads the connected,
non-blocking socket directly with ``loop.sock_recv`` in up to ``READ_BYTES`` at a time: returning
more than httpcore asked for is harmless (its HTTP/1.1 parser buffers whatever it is given) and
brings a single connection to curl's speed. TLS is started on the same socket and runs through an
``ssl.MemoryBIO`` pair (``TLSSocketStream``) the same way: each read returns every record the
socket's bytes complete, not one record per event-loop round trip.

Every socket error is translated to the httpcore exception httpx expects (``ConnectError``,
``ReadError``, ``ReadTimeout`` …), so ``tools/net/errors.py`` maps them like any other.

**Raw bodies** (``download``'s bulk transfers). Parsing a large body through h11 copies every
byte three times in Python and costs an event-loop round trip per read. A caller that asks for it
(``SafeHttp.open(raw_body=True)``) reads the response headers through ``exact_headers()``: while
that context is active, a plain ``SocketStream`` hands httpcore bytes only up to and including
the blank line that ends a header block (the same ``\n\r?\n`` h11 looks for) and keeps the rest
in its own ``_pending`` buffer. When the final response's headers were read that way on a fresh
connection — nothing handed to h11 before, so its buffer is provably empty — the body can be
taken (``take_body``) as a ``RawBody``: the pending bytes plus the socket, read in a worker
thread with ``recv_into`` into the caller's buffer. The stream refuses further reads afterwards,
and httpcore closes the connection when the response closes (h11 never saw the body end), so a
half-read connection is never reused. Anything else (TLS, a proxy, a reused connection, chunked
or length-less bodies) keeps the ordinary httpx path.
"""

# ruff: noqa: ASYNC109  (the `timeout` parameters are httpcore's stream interface)
from __future__ import annotations

import asyncio
import contextlib
import contextvars
import re
import select
import socket
import ssl
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import anyio.abc
import anyio.streams.tls
import httpcore

READ_BYTES = 1 << 20
T = TypeVar("T")
Stream = TypeVar("Stream", bound=httpcore.AsyncNetworkStream)
STOP_POLL_S = 0.5
_BLANK_LINE = re.compile(b"\n\r?\n")  # exactly h11's end-of-headers pattern


@dataclass
class HeaderClaim:
    """What ``exact_headers`` saw while one request's response headers were read."""

    stream: SocketStream | None = None
    fresh: bool = False  # the stream had handed nothing to httpcore before this request
    at_boundary: bool = False  # the last bytes handed over ended a header block
    tail: bytes = b""  # the end of the header block so far (a terminator may straddle reads)


_CLAIM: contextvars.ContextVar[HeaderClaim | None] = contextvars.ContextVar("a3s_header_claim", default=None)


@contextlib.contextmanager
def exact_headers() -> Iterator[HeaderClaim]:
    """Read the response headers of the request sent inside this block without reading ahead."""
    claim = HeaderClaim()
    token = _CLAIM.set(claim)
    try:
        yield claim
    finally:
        _CLAIM.reset(token)


class BodyStopped(Exception):
    """``RawBody.stop`` was called (the download was cancelled or timed out)."""


class RawBody:
    """A response body of ``length`` bytes read straight from its socket (one thread at a time).

    ``read_into`` blocks until at least one byte is there, then takes whatever else is already
    waiting, up to the buffer's size — big reads with no copy beyond the kernel's. A read waits
    at most ``read_timeout`` for data (``TimeoutError``); the connection closing early is a
    ``ConnectionError``; ``stop`` (from any thread) wakes a waiting read, which raises
    ``BodyStopped``.
    """

    def __init__(self, sock: socket.socket, prefix: bytes, length: int) -> None:
        self._sock = sock
        self._prefix = memoryview(prefix)[:length]
        self.length = length
        self.received = 0
        self._stopped = threading.Event()
        self._poll = select.poll()
        self._poll.register(sock, select.POLLIN)

    @property
    def remaining(self) -> int:
        return self.length - self.received

    def stop(self) -> None:
        self._stopped.set()
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RD)  # wakes a read waiting in poll

    def read_into(self, view: memoryview, read_timeout: float) -> int:
        want = min(len(view), self.remaining)
        got = 0
        if self._prefix:
            got = min(want, len(self._prefix))
            view[:got] = self._prefix[:got]
            self._prefix = self._prefix[got:]
        waited_since = time.monotonic()
        while got < want:
            if self._stopped.is_set():
                raise BodyStopped
            try:
                n = self._sock.recv_into(view[got:want])
            except (BlockingIOError, InterruptedError):
                if got:
                    break  # hand over what is here; the kernel keeps receiving meanwhile
                left = read_timeout - (time.monotonic() - waited_since)
                if left <= 0:
                    raise TimeoutError(f"no data for {read_timeout:g}s") from None
                self._poll.poll(min(left, STOP_POLL_S) * 1000)
                continue
            if n == 0:
                if self._stopped.is_set():
                    raise BodyStopped
                if got:
                    break
                raise ConnectionError(
                    f"the server closed the connection after {self.received} of {self.length} body bytes"
                )
            got += n
        self.received += got
        return got


def _readable(sock: socket.socket | None) -> bool:
    """True when an idle pooled connection has data or EOF waiting (the server closed it)."""
    if sock is None or sock.fileno() < 0:
        return True
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


async def _let_the_loop_run() -> None:
    """``loop.sock_recv`` returns without suspending when data is already waiting, so a server that
    never stops sending kept the event loop to itself: an endless stream of ``103 Early Hints``
    (httpcore reads on until a final response) froze every session of the process and no deadline
    could fire. Each read now gives the loop one turn (about a microsecond per read of up to 1 MiB)."""
    await asyncio.sleep(0)


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
        self._pending = b""  # read from the socket, not yet handed to httpcore
        self._served = 0  # bytes handed to httpcore so far
        self._detached = False  # the body was taken raw: httpcore must not read on

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        if self._detached:
            raise httpcore.ReadError("the response body was taken off this connection")
        if self._pending:
            data, self._pending = self._pending, b""
        else:
            loop = asyncio.get_running_loop()
            with _within(timeout, httpcore.ReadTimeout, httpcore.ReadError):
                data = await loop.sock_recv(self._sock, max(max_bytes, READ_BYTES))
            await _let_the_loop_run()
        claim = _CLAIM.get()
        if claim is not None and data:
            data = self._through_header_end(claim, data)
        self._served += len(data)
        return data

    def _through_header_end(self, claim: HeaderClaim, data: bytes) -> bytes:
        """``data`` up to the end of the current header block; the rest waits in ``_pending``."""
        if claim.stream is not self:
            claim.stream, claim.fresh, claim.tail = self, self._served == 0, b""
        window = claim.tail + data
        match = _BLANK_LINE.search(window)
        if match is None:
            claim.tail, claim.at_boundary = window[-2:], False
            return data
        cut = match.end() - len(claim.tail)  # > 0: the tail alone held no terminator
        self._pending = data[cut:]
        claim.tail, claim.at_boundary = b"", True
        return data[:cut]

    def take_body(self, claim: HeaderClaim, length: int) -> RawBody | None:
        """The body after headers read under ``claim``, when h11 provably holds none of it."""
        if claim.stream is not self or not claim.fresh or not claim.at_boundary or self._detached:
            return None
        prefix, self._pending = self._pending, b""
        self._detached = True
        return RawBody(self._sock, prefix, length)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if buffer:
            with _within(timeout, httpcore.WriteTimeout, httpcore.WriteError):
                await asyncio.get_running_loop().sock_sendall(self._sock, buffer)

    async def aclose(self) -> None:
        self._sock.close()

    async def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.AsyncNetworkStream:
        prefix, self._pending = self._pending, b""  # read past a proxy's answer: the server's first bytes
        try:
            with _within(timeout, httpcore.ConnectTimeout, httpcore.ConnectError):
                return await TLSSocketStream.handshake(self._sock, ssl_context, server_hostname, prefix)
        except BaseException:
            self._sock.close()
            raise

    def get_extra_info(self, info: str) -> Any:
        if info == "socket":
            return self._sock
        if info == "is_readable":  # unread bytes on an idle connection make it unusable
            return bool(self._pending) or self._detached or _readable(self._sock)
        if info == "client_addr":
            return self._sock.getsockname()
        if info == "server_addr":
            return self._sock.getpeername()
        return None


class TLSSocketStream(httpcore.AsyncNetworkStream):
    """TLS on the pinned socket through ``ssl.MemoryBIO``: a read takes whatever the socket has (up
    to ``READ_BYTES``) and returns every record it completes, decrypted into one reused buffer.

    anyio's ``TLSStream`` returned one TLS record (8–16 KiB) per event-loop round trip, with a
    cancel scope each: an https download ran at 0.12x curl's throughput on loopback. As with
    anyio's ``standard_compatible=False``, a peer that closes without ``close_notify`` (a ragged
    EOF, common on HTTP) ends the stream instead of failing it; HTTP framing detects a cut body.
    """

    def __init__(
        self, sock: socket.socket, tls: ssl.SSLObject, incoming: ssl.MemoryBIO, outgoing: ssl.MemoryBIO
    ) -> None:
        self._sock = sock
        self._tls = tls
        self._incoming = incoming
        self._outgoing = outgoing
        self._plain = bytearray(READ_BYTES)  # decrypted bytes, before the one copy handed out
        self._raw = bytearray(READ_BYTES)  # socket bytes, before they go into the BIO
        self._eof = False

    @classmethod
    async def handshake(
        cls, sock: socket.socket, context: ssl.SSLContext, server_hostname: str | None, prefix: bytes
    ) -> TLSSocketStream:
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = context.wrap_bio(incoming, outgoing, server_side=False, server_hostname=server_hostname)
        stream = cls(sock, tls, incoming, outgoing)
        if prefix:
            incoming.write(prefix)
        while True:
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                await stream._flush()
                if not await stream._fill():
                    raise ConnectionResetError(
                        "the server closed the connection during the TLS handshake"
                    ) from None
        await stream._flush()
        return stream

    async def _fill(self) -> bool:
        """Socket bytes into the BIO; False at EOF."""
        view = memoryview(self._raw)
        got = await asyncio.get_running_loop().sock_recv_into(self._sock, view)
        if not got:
            self._incoming.write_eof()
            return False
        self._incoming.write(view[:got])
        return True

    async def _flush(self) -> None:
        data = self._outgoing.read()
        if data:
            await asyncio.get_running_loop().sock_sendall(self._sock, data)

    def _drain(self) -> bytes:
        """Every byte the records already received decrypt to (up to ``READ_BYTES``)."""
        view = memoryview(self._plain)
        size = 0
        while size < len(view) and not self._eof:
            try:
                got = self._tls.read(len(view) - size, view[size:])
            except ssl.SSLWantReadError:
                break
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):  # close_notify, or a ragged EOF
                self._eof = True
                break
            if not got:
                self._eof = True
                break
            size += got
        return bytes(view[:size])

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        with _within(timeout, httpcore.ReadTimeout, httpcore.ReadError):
            while True:
                data = self._drain()
                if data or self._eof:
                    await self._flush()  # what reading produced (a key update's answer)
                    await _let_the_loop_run()
                    return data
                await self._flush()
                await self._fill()

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        with _within(timeout, httpcore.WriteTimeout, httpcore.WriteError):
            view = memoryview(buffer)
            while view:
                try:
                    sent = self._tls.write(view)
                except ssl.SSLWantReadError:  # a renegotiation needs the peer's answer first
                    await self._flush()
                    if not await self._fill():
                        raise ConnectionResetError("the server closed the connection") from None
                    continue
                view = view[sent:]
                await self._flush()

    async def aclose(self) -> None:
        # close_notify, best effort and without waiting: the connection is going away either way.
        with contextlib.suppress(ssl.SSLError, OSError, ValueError):
            self._tls.unwrap()
        with contextlib.suppress(OSError, ValueError):
            data = self._outgoing.read()
            if data:
                self._sock.send(data)
        self._sock.close()

    async def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("TLS inside TLS is not supported")

    def get_extra_info(self, info: str) -> Any:
        if info == "ssl_object":
            return self._tls
        if info == "socket":
            return self._sock
        if info == "is_readable":
            return (
                self._eof
                or bool(self._tls.pending())
                or bool(self._incoming.pending)
                or _readable(self._sock)
            )
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


class ProxySocketBackend(SocketBackend):
    """The socket layer to a proxy (``backend.ProxiedTransport``). A request's proxy arrives as its
    verified address; an operator's proxy (HTTP(S)_PROXY, ALL_PROXY) is trusted configuration and
    may be a name, resolved here. Through it, CONNECT and SOCKS tunnels get ``SocketStream`` and
    ``TLSSocketStream``: an https transfer through a proxy reads every record received at once."""

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        with _within(timeout, httpcore.ConnectTimeout, httpcore.ConnectError):
            infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
        addresses = [str(info[4][0]) for info in infos]
        return await connect_any(addresses, lambda ip: open_tcp(ip, port, timeout, socket_options), host)


async def connect_any(addresses: Iterable[T], connect: Callable[[T], Awaitable[Stream]], host: str) -> Stream:
    """The first of ``addresses`` (in order) that ``connect`` reaches; else its last failure."""
    error: Exception = httpcore.ConnectError(f"{host} has no address")
    for address in addresses:
        try:
            return await connect(address)
        except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
            error = exc
    raise error
