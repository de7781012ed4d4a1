"""Proxies that want credentials (SPEC D-3, W-4, K-8; REFERENCE 4.10 ``proxy``).

A ``user:password@`` in a proxy URL — a request's (``web_search``'s ``proxy``) or the operator's
``HTTP(S)_PROXY``/``ALL_PROXY`` — is used: ``Proxy-Authorization: Basic`` for an HTTP proxy (on a
forwarded plain-http request and on CONNECT for https), RFC 1929 username/password for SOCKS5.
A refusal is ``transport{op, proxy:"authentication_failed"}`` naming the proxy by its anchor, and
the secret appears in no message. The proxies are loopback servers the tests start
(``httpproxy.py``, ``socks5server.py``); every target host is public-looking and never contacted.
"""

from __future__ import annotations

import base64
import contextlib
import socket
import ssl
import threading

import pytest

from kernel.errors import InvalidArgument, Transport
from tests.tools.httpproxy import HttpProxy
from tests.tools.netserver import LoopbackServer, static
from tests.tools.socks5server import Socks5Server
from tools.net import (
    NetAllow,
    NetRuntime,
    ProxyAuthFailed,
    ProxySettings,
    StaticResolver,
    parse_proxy,
    parse_url,
    read_body,
    redact_proxy_arg,
)

LOOP = NetAllow.parse("127.0.0.1")
USER, PASSWORD = "sea@rch", "p:ss w%rd/é"  # every character that must be percent-encoded in a URL
USERINFO = "sea%40rch:p%3Ass%20w%25rd%2F%C3%A9"
BASIC = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
SECRETS = ("p:ss", "w%rd", "p%3Ass", "%25rd", USER, "sea%40rch")
NAMED = StaticResolver({"proxy.example.com": ["127.0.0.1"]})


@pytest.fixture()
def server():
    srv = LoopbackServer()
    srv.route("/p", static(200, "through the proxy"))
    yield srv
    srv.close()


async def get(runtime: NetRuntime, url: str, proxy: str | None = None) -> bytes:
    async with runtime.client(LOOP, request_proxy=proxy) as http, http.open(parse_url(url), op="t") as got:
        return await read_body(got.response, 1 << 20, "t", got.url)


def assert_refusal(exc: ProxyAuthFailed, anchor: str, *, had_credentials: bool) -> None:
    assert exc.to_kind() == {"type": "transport", "op": "t", "proxy": "authentication_failed"}
    assert anchor in exc.message
    wanted = "refused the user name and password" if had_credentials else "requires authentication"
    assert wanted in exc.message, exc.message
    for secret in SECRETS:
        assert secret not in exc.message and secret not in repr(exc)


def test_d3_proxy_urls_keep_percent_decoded_credentials_and_show_none() -> None:
    proxy = parse_proxy(f"socks5h://{USERINFO}@proxy.example.com:1080")
    assert proxy.credentials == (USER, PASSWORD)
    assert proxy.anchor == "socks5h://proxy.example.com:1080"
    for secret in SECRETS:
        assert secret not in repr(proxy) and secret not in proxy.key
    other = parse_proxy("socks5h://someone:else@proxy.example.com:1080")
    bare = parse_proxy("socks5h://proxy.example.com:1080")
    assert len({proxy.key, other.key, bare.key}) == 3 and bare.credential_digest is None
    assert parse_proxy("http://u:pw@[::1]:8080").anchor == "http://[::1]:8080"
    # Errors name the problem, never the URL.
    for bad, needle in (
        (f"socks5://{'u' * 256}:secretpw@p:1080", "user name is longer than 255 bytes"),
        (f"socks5://u:{'x' * 256}@p:1080", "password is longer than 255 bytes"),
        ("ftp://u:secretpw@p:21", "must be http://"),
        ("http://u:secretpw@p", "must name a host and a port"),
        ("http://u:secretpw@p:8080/path", "without a path"),
        ("http://u:secretpw@p:99999", "port must be 1-65535"),
        ("http://u:secretpw@p:abc", "invalid proxy url"),
    ):
        with pytest.raises(InvalidArgument) as info:
            parse_proxy(bad)
        assert needle in info.value.message and "secretpw" not in info.value.message
    shown = redact_proxy_arg({"query": "q", "proxy": f"http://{USERINFO}@proxy.example.com:3128"})
    assert shown == {"query": "q", "proxy": "http://***@proxy.example.com:3128"}
    assert redact_proxy_arg({"proxy": "socks5://p:1080"}) == {"proxy": "socks5://p:1080"}
    assert redact_proxy_arg({"proxy": "http://u:secretpw@p:bad"})["proxy"] == "(invalid proxy url)"
    env = ProxySettings.from_env({"HTTPS_PROXY": f"http://{USERINFO}@proxy.corp:3128"})
    assert "sea" not in repr(env) and "w%rd" not in repr(env)


async def test_d3_an_http_proxy_gets_basic_credentials_on_a_forwarded_request(server: LoopbackServer) -> None:
    """A named proxy (guarded, pinned) with credentials: plain-http targets go through it with
    ``Proxy-Authorization: Basic``; wrong or missing credentials are a typed refusal."""
    proxy = HttpProxy(("127.0.0.1", server.port), credentials=(USER, PASSWORD))
    runtime = NetRuntime(resolver=NAMED)
    try:
        url = proxy.url(USERINFO, host="proxy.example.com")
        assert await get(runtime, "http://far.example.com/p", url) == b"through the proxy"
        assert proxy.requests == [("GET", "http://far.example.com/p", BASIC)]
        assert [h.headers.get("proxy-authorization") for h in server.hits("/p")] == [None]  # not passed on
        anchor = f"http://proxy.example.com:{proxy.port}"
        with pytest.raises(ProxyAuthFailed) as wrong:
            await get(
                runtime, "http://far.example.com/p", proxy.url("sea%40rch:nope", host="proxy.example.com")
            )
        assert_refusal(wrong.value, anchor, had_credentials=True)
        with pytest.raises(ProxyAuthFailed) as missing:
            await get(runtime, "http://far.example.com/p", proxy.url(host="proxy.example.com"))
        assert_refusal(missing.value, anchor, had_credentials=False)
        assert len(server.hits("/p")) == 1  # neither refusal was forwarded
    finally:
        proxy.close()


async def test_d3_an_http_proxy_gets_basic_credentials_on_connect(tmp_path) -> None:
    """An https target: the credentials go with CONNECT, TLS runs end to end with the target."""
    from tests.tools.tls_certs import make_certs, serve_tls

    ca, cert, key = make_certs(tmp_path, ["secure.example.com"], [])
    srv = LoopbackServer()
    serve_tls(srv, cert, key)
    srv.route("/s", static(200, "tls through the tunnel"))
    proxy = HttpProxy(("127.0.0.1", srv.port), credentials=(USER, PASSWORD))
    runtime = NetRuntime(resolver=NAMED, tls=ssl.create_default_context(cafile=str(ca)))
    try:
        url = proxy.url(USERINFO, host="proxy.example.com")
        assert await get(runtime, "https://secure.example.com/s", url) == b"tls through the tunnel"
        assert proxy.requests == [("CONNECT", "secure.example.com:443", BASIC)]
        with pytest.raises(ProxyAuthFailed) as wrong:
            await get(runtime, "https://secure.example.com/s", proxy.url("x:y", host="proxy.example.com"))
        assert_refusal(wrong.value, f"http://proxy.example.com:{proxy.port}", had_credentials=True)
        assert len(srv.hits("/s")) == 1
    finally:
        proxy.close()
        srv.close()


async def test_d3_an_environment_proxy_with_credentials_is_used(server: LoopbackServer) -> None:
    """The operator's ``HTTP_PROXY`` may carry ``user:password@`` too (trusted, not pinned)."""
    proxy = HttpProxy(("127.0.0.1", server.port), credentials=(USER, PASSWORD))
    try:
        good = NetRuntime(proxies=ProxySettings.from_env({"HTTP_PROXY": proxy.url(USERINFO)}))
        async with (
            good.client(NetAllow()) as http,
            http.open(parse_url("http://far.example.com/p"), op="t") as got,
        ):
            assert await read_body(got.response, 100, "t", got.url) == b"through the proxy"
        assert proxy.requests == [("GET", "http://far.example.com/p", BASIC)]
        bad = NetRuntime(proxies=ProxySettings.from_env({"ALL_PROXY": proxy.url("sea%40rch:wrong")}))
        with pytest.raises(ProxyAuthFailed) as info:
            async with (
                bad.client(NetAllow()) as http,
                http.open(parse_url("http://far.example.com/p"), op="t"),
            ):
                pass
        assert_refusal(info.value, f"http://127.0.0.1:{proxy.port}", had_credentials=True)
        assert "HTTP(S)_PROXY/ALL_PROXY" in info.value.message
    finally:
        proxy.close()


@pytest.mark.parametrize("scheme", ["socks5", "socks5h"])
async def test_d3_a_socks5_proxy_gets_username_and_password(server: LoopbackServer, scheme: str) -> None:
    """RFC 1929 through a named, guarded, pinned SOCKS5 proxy; a refusal never reaches CONNECT."""
    socks = Socks5Server(("127.0.0.1", server.port), credentials=(USER, PASSWORD))
    runtime = NetRuntime(resolver=NAMED)
    try:
        url = socks.url("proxy.example.com", scheme, USERINFO)
        assert await get(runtime, "http://far.example.com/p", url) == b"through the proxy"
        assert socks.auth_attempts == [(USER, PASSWORD)]
        assert socks.connects == [("far.example.com", 80)]
        anchor = f"{scheme}://proxy.example.com:{socks.port}"
        with pytest.raises(ProxyAuthFailed) as wrong:
            await get(
                runtime, "http://far.example.com/p", socks.url("proxy.example.com", scheme, "sea:wrong")
            )
        assert_refusal(wrong.value, anchor, had_credentials=True)
        with pytest.raises(ProxyAuthFailed) as missing:
            await get(runtime, "http://far.example.com/p", socks.url("proxy.example.com", scheme))
        assert_refusal(missing.value, anchor, had_credentials=False)
        assert socks.connects == [("far.example.com", 80)] and len(server.hits("/p")) == 1
    finally:
        socks.close()


class _MalformedSocks:
    """A SOCKS5 'proxy' on loopback that answers each handshake step with the given bytes."""

    def __init__(self, replies: list[bytes]) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.replies = replies
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn, contextlib.suppress(OSError):
                conn.settimeout(5)
                for reply in self.replies:
                    conn.recv(4096)
                    conn.sendall(reply)
                conn.recv(4096)


@pytest.mark.parametrize(
    "replies",
    [
        [b"\x04\x00"],  # SOCKS4's version in the method reply
        [b"HTTP/1.1 200 OK\r\n\r\n"],
        [b"\x05\x00", b"\x05\x00\x00\x09" + b"\x00" * 6],  # an unknown address type
        [b"\x05\x00", b"\x05"],  # a cut reply
    ],
    ids=["version", "http", "address_type", "cut"],
)
async def test_d3_w5_a_socks5_proxy_answering_garbage_is_transport(replies: list[bytes]) -> None:
    """W-5, D-3: the request's ``proxy`` is the model's. A malformed SOCKS5 reply raised socksio's
    ``ProtocolError`` through httpcore untouched, out of ``SafeHttp.open`` and every engine: the
    ``web_search`` call ended as ``internal_error``. Now it is ``transport``, naming the proxy."""
    socks = _MalformedSocks(replies)
    try:
        with pytest.raises(Transport, match="answered a malformed reply") as info:
            await get(
                NetRuntime(resolver=NAMED), "http://far.example.com/p", f"socks5://127.0.0.1:{socks.port}"
            )
        assert info.value.to_kind() == {"type": "transport", "op": "t"}
        assert f"socks5://127.0.0.1:{socks.port}" in info.value.message
    finally:
        socks.sock.close()
