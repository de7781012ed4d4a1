"""Raw response bodies under the safe transport (SPEC D-3, D-4; ``tools/net/sockets.py``).

``SafeHttp.open(raw_body=True)`` reads response headers without reading ahead, so a large body can
be taken off the socket directly. These tests drive a scripted loopback server that controls the
exact bytes and TCP segments, and prove: the body handed over raw is byte-exact whatever the
segmentation (terminator split across segments, LF-only headers, a ``100 Continue`` first, body
bytes in the same segment as the headers); only a fresh connection's response is handed over
(a reused connection keeps the httpx path, still correct); chunked and length-less bodies keep
the httpx path; a connection whose body was taken is never reused; an early close, silence past
the read timeout and a stop are reported as such.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable

import pytest

from tests.tools.netserver import LoopbackServer, static
from tools.net import BlockedAddress, NetAllow, NetRuntime, parse_url, read_body
from tools.net.sockets import BodyStopped, RawBody

LOOP = NetAllow.parse("127.0.0.1")
Script = Callable[[socket.socket, int], None]


class Scripted:
    """A loopback TCP server: each connection reads one request head, then runs ``script``."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.connections = 0
        self.requests: list[bytes] = []
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self._threads: list[threading.Thread] = []
        self._stop = False
        self._accept = threading.Thread(target=self._serve, daemon=True)
        self._accept.start()

    def url(self, path: str = "/f") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def _serve(self) -> None:
        while not self._stop:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self.connections += 1
            t = threading.Thread(target=self._one, args=(conn, self.connections), daemon=True)
            t.start()
            self._threads.append(t)

    def _one(self, conn: socket.socket, number: int) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with conn:
            try:
                while True:
                    head = b""
                    while b"\r\n\r\n" not in head:
                        more = conn.recv(65536)
                        if not more:
                            return
                        head += more
                    self.requests.append(head)
                    self.script(conn, number)
            except OSError:
                return

    def close(self) -> None:
        self._stop = True
        self._sock.close()
        for t in self._threads:
            t.join(5)


def pieces(*parts: bytes, gap: float = 0.05) -> Script:
    """Send ``parts`` as separate TCP segments (the gap makes the client read them one by one)."""

    def script(conn: socket.socket, _n: int) -> None:
        for part in parts:
            conn.sendall(part)
            time.sleep(gap)

    return script


BODY = bytes(range(256)) * 64  # 16 KiB, every byte value


def head(length: int = len(BODY), extra: str = "") -> bytes:
    return f"HTTP/1.1 200 OK\r\nContent-Length: {length}\r\n{extra}\r\n".encode()


async def take(url: str, **kw) -> tuple[bytes | None, int]:
    """Open ``url`` raw; the body read off the socket (None when not handed over) and the status."""
    runtime = NetRuntime()
    async with runtime.client(LOOP) as http, http.open(parse_url(url), op="t", raw_body=True, **kw) as got:
        raw = got.take_raw_body()
        if raw is None:
            return None, got.response.status_code
        buf = bytearray(raw.length)
        view = memoryview(buf)
        pos = 0
        while raw.remaining:
            pos += raw.read_into(view[pos:], read_timeout=5)
        return bytes(buf), got.response.status_code


@pytest.fixture()
def scripted():
    servers: list[Scripted] = []

    def make(script: Script) -> Scripted:
        servers.append(Scripted(script))
        return servers[-1]

    yield make
    for s in servers:
        s.close()


@pytest.mark.parametrize(
    "script",
    [
        pieces(head() + BODY),  # headers and body in one segment
        pieces(head(), BODY),
        pieces(head()[:-1], head()[-1:] + BODY[:100], BODY[100:]),  # CRLFCRLF split 3|1
        pieces(head()[:-2], head()[-2:], BODY),  # split 2|2
        pieces(head()[:-3], head()[-3:] + BODY),  # split 1|3
        pieces(head().replace(b"\r\n", b"\n") + BODY[:10], BODY[10:]),  # LF-only line endings
        pieces(b"HTTP/1.1 100 Continue\r\n\r\n" + head() + BODY[:7], BODY[7:]),  # interim response
        pieces(b"HTTP/1.1 100 Continue\r\n\r", b"\n" + head()[:5], head()[5:] + BODY),
    ],
    ids=["one-segment", "two", "split-3-1", "split-2-2", "split-1-3", "lf-only", "100-continue", "100-split"],
)
async def test_d4_raw_body_is_byte_exact_whatever_the_segmentation(scripted, script) -> None:
    """SPEC D-4: the bytes after the header block, exactly, however TCP cut them."""
    srv = scripted(script)
    body, status = await take(srv.url())
    assert status == 200
    assert body == BODY


async def test_d4_chunked_and_length_less_bodies_keep_the_httpx_path(scripted) -> None:
    """SPEC D-4: only a declared ``Content-Length`` body is handed over raw."""
    chunked = scripted(
        pieces(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
    )
    assert await take(chunked.url()) == (None, 200)
    closing = scripted(
        lambda c, _n: (c.sendall(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nbye"), c.close())
    )
    assert await take(closing.url()) == (None, 200)


async def test_d4_a_reused_connection_keeps_the_httpx_path_and_a_taken_one_is_never_reused(scripted) -> None:
    """SPEC D-4: h11 may hold bytes of a connection it already used, so only a fresh connection's
    body is taken; after a take the connection is closed, never returned to the pool."""
    srv = scripted(pieces(head() + BODY, gap=0))
    runtime = NetRuntime()
    async with runtime.client(LOOP) as http:
        for n in (1, 2):
            async with http.open(parse_url(srv.url()), op="t", raw_body=True) as got:
                raw = got.take_raw_body()
                assert raw is not None and got.take_raw_body() is None  # taken once
                assert srv.connections == n  # a taken connection was closed, not reused
                buf = memoryview(bytearray(raw.length))
                pos = 0
                while raw.remaining:
                    pos += raw.read_into(buf[pos:], read_timeout=5)
                assert bytes(buf) == BODY
        async with http.open(parse_url(srv.url()), op="t") as got:  # read through httpx: reusable
            assert await read_body(got.response, 1 << 20, "t", got.url) == BODY
        async with http.open(parse_url(srv.url()), op="t", raw_body=True) as got:
            assert srv.connections == 3  # the same connection as the httpx read...
            assert got.take_raw_body() is None  # ...so not handed over
            assert await read_body(got.response, 1 << 20, "t", got.url) == BODY


async def test_d4_raw_reads_report_early_close_silence_and_stop(scripted) -> None:
    """SPEC D-4: a short body is a ConnectionError, silence past the read timeout a TimeoutError,
    and ``stop`` from another thread wakes a waiting read at once."""
    short = scripted(lambda c, _n: (c.sendall(head() + BODY[:1000]), c.shutdown(socket.SHUT_WR)))
    silent = scripted(lambda c, _n: (c.sendall(head() + BODY[:1000]), time.sleep(3)))
    runtime = NetRuntime()
    async with runtime.client(LOOP) as http:
        async with http.open(parse_url(short.url()), op="t", raw_body=True) as got:
            raw = got.take_raw_body()
            assert isinstance(raw, RawBody)
            buf = memoryview(bytearray(raw.length))
            assert raw.read_into(buf, read_timeout=5) == 1000
            with pytest.raises(ConnectionError):
                raw.read_into(buf, read_timeout=5)
        async with http.open(parse_url(silent.url()), op="t", raw_body=True) as got:
            raw = got.take_raw_body()
            assert raw is not None
            assert raw.read_into(buf, read_timeout=5) == 1000
            t0 = time.monotonic()
            with pytest.raises(TimeoutError):
                raw.read_into(buf, read_timeout=0.3)
            assert time.monotonic() - t0 < 2
        async with http.open(parse_url(silent.url()), op="t", raw_body=True) as got:
            raw = got.take_raw_body()
            assert raw is not None
            raw.read_into(buf, read_timeout=5)
            threading.Timer(0.2, raw.stop).start()
            t0 = time.monotonic()
            with pytest.raises(BodyStopped):
                raw.read_into(buf, read_timeout=30)
            assert time.monotonic() - t0 < 2


async def test_d3_raw_bodies_change_nothing_about_the_guard(scripted) -> None:
    """SPEC D-3: a raw-body request goes through the same guard: closed, nothing is sent."""
    srv = scripted(pieces(head() + BODY))
    runtime = NetRuntime()
    with pytest.raises(BlockedAddress):
        async with (
            runtime.client(NetAllow.parse("")) as http,
            http.open(parse_url(srv.url()), op="t", raw_body=True),
        ):
            pass
    assert srv.connections == 0


async def test_d4_raw_body_off_the_stdlib_server(tmp_path) -> None:
    """SPEC D-4: the ordinary loopback server (headers and body written separately) too."""
    server = LoopbackServer()
    try:
        server.route("/s", static(200, BODY, content_type="application/octet-stream"))
        body, status = await take(server.url("/s"))
        assert status == 200 and body == BODY
    finally:
        server.close()
