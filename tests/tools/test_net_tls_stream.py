"""TLS on the pinned socket (``tools/net/sockets.TLSSocketStream``, SPEC D-3/D-4): an https body of
many records arrives whole and verified, a read returns every record the socket's bytes complete
(not one per round trip: the https download speed), and a connection cut without ``close_notify``
in the middle of a body is a typed failure that leaves nothing behind — against TLS servers on
loopback with a throwaway CA.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from config.settings import Settings
from kernel.result import ToolResult
from orchestrator import Agent
from tests.tools.netserver import LoopbackServer, static
from tests.tools.tls_certs import make_certs, serve_tls, server_context
from tools.net.sockets import READ_BYTES, TLSSocketStream, open_tcp

BODY = os.urandom(6 * 1024 * 1024 + 123)


@pytest.fixture()
def certs(tmp_path: Path) -> tuple[Path, Path, Path]:
    root = tmp_path / "certs"
    root.mkdir()
    return make_certs(root, ["localhost"], ["127.0.0.1"])


@pytest.fixture()
def https_blob(certs: tuple[Path, Path, Path]) -> Iterator[int]:
    _, cert, key = certs
    srv = LoopbackServer()
    serve_tls(srv, cert, key)
    srv.route("/blob", static(200, BODY, content_type="application/octet-stream"))
    try:
        yield srv.port
    finally:
        srv.close()


def _download(certs: tuple[Path, Path, Path], workspace: Path, args: dict[str, object]) -> ToolResult:
    """One host-direct ``download`` in a process trusting the throwaway CA, loopback allowed."""
    with Agent(Settings(ca_bundle=str(certs[0]), net_allow="127.0.0.1")) as agent:
        return agent.session(workspace).tool("download", args)


def test_d4_an_https_download_of_many_records_is_whole_and_verified(
    https_blob: int, certs: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    digest = hashlib.sha256(BODY).hexdigest()
    with Agent(Settings(ca_bundle=str(certs[0]), net_allow="127.0.0.1")) as agent:
        session = agent.session(tmp_path)
        for connections in (1, 4):
            res = session.tool(
                "download",
                {
                    "url": f"https://127.0.0.1:{https_blob}/blob",
                    "file_path": f"blob{connections}.bin",
                    "connections": connections,
                    "expected_sha256": digest,
                },
            )
            assert res.exit_code == 0, res.output
            assert (tmp_path / f"blob{connections}.bin").read_bytes() == BODY


def _tls_server(certs: tuple[Path, Path, Path], serve) -> tuple[socket.socket, threading.Thread]:
    """A TLS listener on loopback running ``serve`` for every connection until it is closed."""
    _, cert, key = certs
    context = server_context(cert, key)
    listener = socket.create_server(("127.0.0.1", 0))

    def run() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:  # closed: the test is over
                return
            with contextlib.suppress(OSError), context.wrap_socket(conn, server_side=True) as tls:
                serve(tls)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return listener, thread


def test_d3_one_read_returns_every_record_received(certs: tuple[Path, Path, Path]) -> None:
    """64 records of 16 KiB sent at once come back in a few reads, not one read per record."""
    records = [bytes([i]) * 16384 for i in range(64)]

    def serve(tls: ssl.SSLSocket) -> None:
        for record in records:
            tls.sendall(record)  # one TLS record each
        tls.recv(1)  # keep the connection until the client is done

    listener, thread = _tls_server(certs, serve)

    async def client() -> list[int]:
        plain = await open_tcp("127.0.0.1", listener.getsockname()[1], 10)
        stream = await plain.start_tls(ssl.create_default_context(cafile=str(certs[0])), "127.0.0.1", 10)
        assert isinstance(stream, TLSSocketStream)
        await asyncio.sleep(0.3)  # every record is on the socket
        sizes: list[int] = []
        while sum(sizes) < 64 * 16384:
            sizes.append(len(await stream.read(65536, timeout=10)))
        await stream.aclose()
        return sizes

    try:
        sizes = asyncio.run(client())
    finally:
        listener.close()
    thread.join(10)
    assert sum(sizes) == 64 * 16384 and len(sizes) <= 4 and max(sizes) <= READ_BYTES, sizes


def test_d4_a_body_cut_without_close_notify_fails_typed_and_leaves_nothing(
    certs: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    def serve(tls: ssl.SSLSocket) -> None:
        tls.recv(65536)  # the request
        tls.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Length: 1048576\r\nContent-Type: application/octet-stream\r\n\r\n"
        )
        tls.sendall(b"x" * 300_000)
        socket.socket(fileno=tls.detach()).close()  # TCP FIN with no close_notify: the body is cut

    listener, thread = _tls_server(certs, serve)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    try:
        res = _download(
            certs,
            workspace,
            {
                "url": f"https://127.0.0.1:{listener.getsockname()[1]}/cut",
                "file_path": "cut.bin",
                "timeout": 60,
            },
        )
    finally:
        listener.close()
    thread.join(10)
    assert res.exit_code == 1 and res.error_kind is not None and res.error_kind["type"] == "transport", (
        res.output
    )
    assert "1048576" in res.output or "closed" in res.output.lower(), res.output  # says what happened
    assert sorted(p.name for p in workspace.iterdir() if p.name != ".a3s") == []  # no partial file


@pytest.mark.parametrize("kind", ["http", "socks5"])
def test_d3_an_https_download_through_an_operators_proxy_by_name(
    kind: str,
    https_blob: int,
    certs: tuple[Path, Path, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """HTTPS_PROXY / ALL_PROXY naming the proxy host (``localhost``, resolved by us: an operator's
    proxy is trusted configuration): the tunnel carries TLS end to end and the body is verified."""
    from tests.tools.httpproxy import HttpProxy
    from tests.tools.socks5server import Socks5Server

    proxy = (
        HttpProxy(("127.0.0.1", https_blob)) if kind == "http" else Socks5Server(("127.0.0.1", https_blob))
    )
    url = f"{kind}://localhost:{proxy.port}"
    monkeypatch.setenv("HTTPS_PROXY" if kind == "http" else "ALL_PROXY", url)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    try:
        res = _download(
            certs,
            tmp_path,
            {
                "url": f"https://127.0.0.1:{https_blob}/blob",
                "file_path": "via-proxy.bin",
                "expected_sha256": hashlib.sha256(BODY).hexdigest(),
            },
        )
    finally:
        proxy.close()
    assert res.exit_code == 0, res.output
    assert (tmp_path / "via-proxy.bin").read_bytes() == BODY
    assert proxy.accepted >= 1  # it went through the proxy, not around it
