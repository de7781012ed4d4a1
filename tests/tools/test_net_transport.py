"""``SafeHttp`` against loopback servers the tests start (SPEC D-3, W-6).

Proves: the guard closed refuses every loopback spelling before a request (the server logs
nothing); redirects are followed by hand, re-validated per hop, bounded, and a cross-origin hop
loses credentials and ``If-Range``; names are pinned to the verified address with the URL's Host
kept; environment proxies are used with the literal checks still applied; failures are typed
from the status only; the mapping of httpx exceptions is total.
"""

from __future__ import annotations

import inspect

import httpcore
import httpx
import pytest

from kernel.errors import InvalidArgument, RateLimited, ToolError, Transport
from kernel.options import SessionOptions
from tests.tools.netserver import LoopbackServer, redirect, send, static
from tests.tools.socks5server import Socks5Server
from tools.net import (
    BlockedAddress,
    NetAllow,
    NetRuntime,
    ProxySettings,
    StaticResolver,
    map_http_error,
    parse_url,
    read_body,
    retry_after_ms,
    status_error,
)
from tools.net.backend import GuardedBackend
from tools.net.client import TooManyRedirects
from tools.web_search.config import DEFAULT_ENGINE_URLS, SearchConfig

LOOP = NetAllow.parse("127.0.0.1")


@pytest.fixture()
def server():
    srv = LoopbackServer()
    yield srv
    srv.close()


@pytest.fixture()
def other():
    srv = LoopbackServer("127.0.0.2")
    yield srv
    srv.close()


async def fetch(runtime: NetRuntime, url: str, allow: NetAllow = LOOP, **kw) -> tuple[int, bytes, int]:
    async with runtime.client(allow) as http, http.open(parse_url(url), op="t", **kw) as got:
        return got.response.status_code, await read_body(got.response, 1 << 20, "t", got.url), got.redirects


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1",
        "127.1",
        "2130706433",
        "0x7f000001",
        "0x7f.0.0.1",
        "127.0.0.1.",
        "localhost",
        "a.localhost",
        "[::ffff:127.0.0.1]",
    ],
)
async def test_d3_guard_closed_refuses_loopback_spellings_and_the_server_sees_nothing(
    server: LoopbackServer, host: str
) -> None:
    server.route("/x", static(200, "secret"))
    with pytest.raises(BlockedAddress):
        await fetch(NetRuntime(), server.url("/x", host=host), allow=NetAllow())
    assert server.hits() == []


async def test_d3_allowed_loopback_is_reachable(server: LoopbackServer) -> None:
    server.route("/x", static(200, "hello"))
    assert await fetch(NetRuntime(), server.url("/x")) == (200, b"hello", 0)


async def test_d3_redirect_from_an_allowed_host_to_a_non_allowed_one_is_refused(
    server: LoopbackServer, other: LoopbackServer
) -> None:
    other.route("/inner", static(200, "internal"))
    server.route("/go", redirect(other.url("/inner")))
    with pytest.raises(BlockedAddress, match=r"127\.0\.0\.2"):
        await fetch(NetRuntime(), server.url("/go"))
    assert len(server.hits("/go")) == 1
    assert other.hits() == []


async def test_d3_each_redirect_hop_is_revalidated_including_spellings(server: LoopbackServer) -> None:
    server.route("/go", redirect(f"http://2130706434:{server.port}/x"))  # 127.0.0.2
    with pytest.raises(BlockedAddress):
        await fetch(NetRuntime(), server.url("/go"))


async def test_d3_redirects_are_bounded_to_ten(server: LoopbackServer) -> None:
    for i in range(12):
        server.route(f"/r{i}", redirect(f"/r{i + 1}", 307))
    server.route("/r12", static(200, "end"))
    server.route("/r10", static(200, "ten"))
    assert await fetch(NetRuntime(), server.url("/r0")) == (200, b"ten", 10)
    server.route("/r10", redirect("/r11"))
    with pytest.raises(TooManyRedirects):
        await fetch(NetRuntime(), server.url("/r0"))
    assert len(server.hits("/r11")) == 0


async def test_d3_cross_origin_redirect_drops_credentials_and_if_range(
    server: LoopbackServer, other: LoopbackServer
) -> None:
    other.route("/dst", static(200, "ok"))
    server.route("/same-dst", static(200, "ok"))
    server.route("/cross", redirect(other.url("/dst")))
    server.route("/same", redirect("/same-dst"))
    headers = {"Authorization": "Bearer t0k", "Cookie": "a=b", "If-Range": '"v1"', "Range": "bytes=0-"}
    allow = NetAllow.parse("127.0.0.0/8")
    await fetch(NetRuntime(), server.url("/cross"), allow=allow, headers=headers)
    await fetch(NetRuntime(), server.url("/same"), allow=allow, headers=headers)
    cross = other.hits("/dst")[0].headers
    assert "authorization" not in cross and "cookie" not in cross and "if-range" not in cross
    assert cross["range"] == "bytes=0-"
    same = server.hits("/same-dst")[0].headers
    assert same["authorization"] == "Bearer t0k" and same["if-range"] == '"v1"'


async def test_d3_303_turns_a_post_into_a_get_without_body(server: LoopbackServer) -> None:
    server.route("/post", redirect("/after", 303))
    server.route("/after", static(200, "done"))
    async with (
        NetRuntime().client(LOOP) as http,
        http.open(parse_url(server.url("/post")), method="POST", json={"q": 1}, op="t") as got,
    ):
        assert got.response.status_code == 200
    assert server.hits("/after")[0].method == "GET"
    assert "content-length" not in server.hits("/after")[0].headers


async def test_d3_names_are_pinned_to_the_verified_address_and_keep_their_host_header(
    server: LoopbackServer,
) -> None:
    server.route("/h", static(200, "pinned"))
    connected: list[tuple[str, str, int]] = []
    runtime = NetRuntime(
        resolver=StaticResolver({"svc.example.com": ["127.0.0.1"]}),
        on_connect=lambda host, ip, port: connected.append((host, str(ip), port)),
    )
    url = f"http://svc.example.com:{server.port}/h"
    assert (await fetch(runtime, url))[1] == b"pinned"
    assert connected == [("svc.example.com", "127.0.0.1", server.port)]
    assert server.hits("/h")[0].headers["host"] == f"svc.example.com:{server.port}"
    # The same name with the guard closed: refused at resolution, nothing sent.
    with pytest.raises(BlockedAddress):
        await fetch(runtime, url, allow=NetAllow())
    assert len(server.hits("/h")) == 1


async def test_d3_the_transport_pool_uses_the_guarded_backend() -> None:
    http = NetRuntime().client(LOOP)
    client, _proxy = await http._client_for(parse_url("http://127.0.0.1/"))
    pool = client._transport._pool  # type: ignore[attr-defined]
    assert isinstance(pool._network_backend, GuardedBackend)
    await http.aclose()


async def test_d3_environment_proxy_is_used_and_literal_checks_still_apply(server: LoopbackServer) -> None:
    """The 'proxy' is a loopback server answering absolute-form requests; it is trusted config."""
    server.route("http://far.example.com/page", static(200, "via proxy"))
    proxies = ProxySettings.from_env({"HTTP_PROXY": server.url("/")})
    runtime = NetRuntime(proxies=proxies)
    async with runtime.client(NetAllow()) as http:
        async with http.open(parse_url("http://far.example.com/page"), op="t") as got:
            assert await read_body(got.response, 100, "t", got.url) == b"via proxy"
        with pytest.raises(BlockedAddress):
            async with http.open(parse_url("http://10.0.0.1/"), op="t"):
                pass
        with pytest.raises(BlockedAddress):
            async with http.open(parse_url("http://localhost/"), op="t"):
                pass
    assert [s.path for s in server.hits()] == ["http://far.example.com/page"]


def test_d3_no_proxy_bypasses_the_environment_proxy() -> None:
    proxies = ProxySettings.from_env(
        {"https_proxy": "http://proxy.corp:3128", "NO_PROXY": "internal.example.com"}
    )
    assert proxies.for_url(parse_url("https://www.example.com/")) == "http://proxy.corp:3128"
    assert proxies.for_url(parse_url("https://internal.example.com/")) is None
    assert proxies.for_url(parse_url("http://www.example.com/")) is None


async def test_d3_a_request_named_proxy_must_itself_pass_the_guard(server: LoopbackServer) -> None:
    async with NetRuntime().client(NetAllow(), request_proxy=server.url("/")) as http:
        with pytest.raises(BlockedAddress):
            async with http.open(parse_url("http://far.example.com/"), op="t"):
                pass
    # A proxy *name* that resolves to a private address is refused as well (resolution level).
    runtime = NetRuntime(resolver=StaticResolver({"proxy.example.com": ["10.1.2.3"]}))
    async with runtime.client(NetAllow(), request_proxy="http://proxy.example.com:3128") as http:
        with pytest.raises(BlockedAddress):
            async with http.open(parse_url("http://far.example.com/"), op="t"):
                pass
    # An allowed proxy is reached by its verified address.
    server.route("http://far.example.com/p", static(200, "proxied"))
    runtime = NetRuntime(resolver=StaticResolver({"proxy.example.com": ["127.0.0.1"]}))
    async with runtime.client(LOOP, request_proxy=f"http://proxy.example.com:{server.port}") as http:
        async with http.open(parse_url("http://far.example.com/p"), op="t") as got:
            assert await read_body(got.response, 100, "t", got.url) == b"proxied"
    assert [h.path for h in server.hits()] == ["http://far.example.com/p"]
    with pytest.raises(InvalidArgument):
        NetRuntime().client(request_proxy="ftp://proxy:21")


@pytest.fixture()
def socks(server: LoopbackServer):
    proxy = Socks5Server(("127.0.0.1", server.port))
    yield proxy
    proxy.close()


@pytest.mark.parametrize("scheme", ["socks5", "socks5h"])
async def test_d3_a_request_named_socks5_proxy_is_guarded_pinned_and_carries_the_request(
    server: LoopbackServer, socks: Socks5Server, scheme: str
) -> None:
    """REFERENCE 4.10 ``proxy`` accepts socks5: the proxy's *name* goes through the guard and the
    proxy is reached by the verified address; the target name is handed to the proxy unresolved."""
    server.route("/p", static(200, "tunnelled"))
    runtime = NetRuntime(resolver=StaticResolver({"socks.example.com": ["127.0.0.1"]}))
    proxy = f"{scheme}://socks.example.com:{socks.port}"
    async with runtime.client(LOOP, request_proxy=proxy) as http:
        async with http.open(parse_url("http://far.example.com/p"), op="t") as got:
            assert await read_body(got.response, 100, "t", got.url) == b"tunnelled"
        # Through the proxy only the literal checks apply to the target: still enforced.
        for url in ("http://10.0.0.1/", "http://169.254.169.254/", "http://[fd00::1]/", "http://0x7f000002/"):
            with pytest.raises(BlockedAddress):
                async with http.open(parse_url(url), op="t"):
                    pass
    assert socks.connects == [("far.example.com", 80)]
    assert [(h.path, h.headers["host"]) for h in server.hits()] == [("/p", "far.example.com")]


async def test_d3_a_socks5_proxy_on_a_blocked_address_is_never_contacted(
    server: LoopbackServer, socks: Socks5Server
) -> None:
    async with NetRuntime().client(NetAllow(), request_proxy=socks.url()) as http:  # guard closed
        with pytest.raises(BlockedAddress):
            async with http.open(parse_url("http://far.example.com/"), op="t"):
                pass
    # A socks5 proxy *name* that resolves to a private address is refused at resolution.
    runtime = NetRuntime(resolver=StaticResolver({"socks.example.com": ["10.1.2.3"]}))
    async with runtime.client(NetAllow(), request_proxy="socks5://socks.example.com:1080") as http:
        with pytest.raises(BlockedAddress):
            async with http.open(parse_url("http://far.example.com/"), op="t"):
                pass
    assert socks.accepted == 0 and server.hits() == []
    for bad in ("socks4://p:1080", "socks5://nopor", "socks://p:1"):
        with pytest.raises(InvalidArgument):
            NetRuntime().client(request_proxy=bad)


async def test_d3_a_dead_socks5_proxy_is_a_transport_failure(socks: Socks5Server) -> None:
    port = socks.port
    socks.close()  # nothing listens there any more
    async with NetRuntime().client(LOOP, request_proxy=f"socks5://127.0.0.1:{port}") as http:
        with pytest.raises(Transport):
            async with http.open(parse_url("http://far.example.com/"), op="t"):
                pass


@pytest.mark.parametrize(
    "url",
    [
        "ftp://example.com/x",
        "file:///etc/passwd",
        "gopher://example.com/",
        "http://user:pw@example.com/",
        "https://user@example.com/",
        "http:///nohost",
        "http://ex%61mple.com/",
        "http://127.0.0.1%2e/",
        "http://exa mple.com/",
        "//example.com/x",
        "not a url",
        "",
    ],
)
def test_d2_bad_urls_are_rejected_before_any_request(url: str) -> None:
    with pytest.raises(InvalidArgument):
        parse_url(url)


def test_d2_fragment_dropped_query_kept_anchor_drops_query() -> None:
    url = parse_url("https://host.example.com/a/b.bin?X-Amz-Signature=abc&x=1#frag")
    assert url.url.fragment == ""
    assert "X-Amz-Signature=abc" in str(url)
    assert url.anchor == "https://host.example.com/a/b.bin"
    stripped = parse_url("https://h.example.com/p?api_key=K&page=2", drop_secret_query=True)
    assert str(stripped) == "https://h.example.com/p?page=2"


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (429, "rate_limited"),
        (408, "transport"),
        (500, "transport"),
        (503, "transport"),
        (404, "tool_error"),
        (403, "tool_error"),
    ],
)
def test_w6_failures_are_typed_from_the_status_only(status: int, kind: str) -> None:
    err = status_error("web_fetch", status, httpx.Headers({"retry-after": "7"}), "https://h/x", 0)
    assert err.kind == kind
    if kind == "rate_limited":
        assert isinstance(err, RateLimited) and err.data["retry_after_ms"] == 7000
    if kind == "transport":
        assert isinstance(err, Transport) and err.data["op"] == "web_fetch"


def test_w6_retry_after_accepts_http_dates() -> None:
    now = 1_700_000_000_000
    assert retry_after_ms("Tue, 14 Nov 2023 22:13:30 GMT", now) == 10_000
    assert retry_after_ms("soon", now) is None
    assert retry_after_ms("99999999", now) == 24 * 3600 * 1000


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("\u00b2", None),  # str.isdigit() is true, int() refuses it
        ("\uff11\uff10", None),  # fullwidth digits are no delta-seconds
        ("9" * 5000, 24 * 3600 * 1000),  # int() refuses more than 4300 digits
        ("0" * 4999 + "7", 24 * 3600 * 1000),
        ("Mon, 01 Jan 99999 00:00:00 GMT", None),  # year out of range
        ("Mon, 32 Jan 2020 00:00:00 GMT", None),
        (" 12 ", 12_000),
    ],
)
def test_w6_a_hostile_retry_after_is_no_delay_never_an_exception(value: str, expected: int | None) -> None:
    """W-6: the server writes ``Retry-After``. ``²`` and 5,000 digits made ``int`` raise
    ``ValueError``: ``web_fetch``'s 429 ended as ``invalid_argument`` instead of ``rate_limited``,
    and an engine's 429 or 503 failed the whole ``web_search`` call."""
    assert retry_after_ms(value, 1_700_000_000_000) == expected


def test_w6_a_429_with_an_unreadable_retry_after_is_still_rate_limited(agent, tmp_path) -> None:
    """W-6, end to end on loopback: web_fetch and a web_search engine both get the typed failure."""
    srv = LoopbackServer()
    try:
        url = srv.route("/busy", lambda h: send(h, 429, b"slow down", {"Retry-After": "\u00b2"}))
        s = agent.session(tmp_path, SessionOptions(net_allow=("127.0.0.1",)))
        res = s.tool("web_fetch", {"url": url})
        assert res.error_kind == {"type": "rate_limited", "retry_after_ms": None}, res.output
        config = SearchConfig(urls={**DEFAULT_ENGINE_URLS, "ddg": srv.url("/busy?q={query}")})
        s = agent.session(tmp_path, SessionOptions(net_allow=("127.0.0.1",), services={"web_search": config}))
        res = s.tool("web_search", {"query": "rust ownership", "engines": ["ddg"]})
        assert res.error_kind is not None and res.error_kind["type"] == "rate_limited", res.error_kind
    finally:
        srv.close()


@pytest.mark.parametrize(
    "url",
    [
        "http://xn--/",
        "http://xn--a.com/",
        "https://xn--ls8h.la/",
        "http://h.example:99999/",
        "http://h.example:0/",
    ],
)
def test_d3_bad_punycode_and_ports_out_of_range_are_invalid_urls(url: str) -> None:
    """D-3: httpx decodes punycode when ``host`` is read (``IDNAError``, a ``ValueError`` that
    escaped ``parse_url``: the call ended as "Tool failed: IDNAError") and keeps any port, which
    ``connect()`` refused with ``OverflowError`` (``internal_error``, also for ``download``)."""
    with pytest.raises(InvalidArgument):
        parse_url(url)


def test_d3_a_proxy_with_bad_punycode_is_refused_without_raising_elsewhere() -> None:
    from tools.net import parse_proxy, redact_proxy_arg

    with pytest.raises(InvalidArgument, match="invalid proxy url"):
        parse_proxy("socks5://user:secret@xn--:1080")
    assert redact_proxy_arg({"proxy": "socks5://user:secret@xn--:1080"}) == {"proxy": "(invalid proxy url)"}


def test_d3_w6_a_redirect_to_a_url_that_cannot_be_requested_is_typed(agent, tmp_path) -> None:
    """W-6: the server writes ``Location``. Bad punycode raised ``IDNAError`` inside httpx (it builds
    every 3xx's next request), so ``web_fetch`` ended as ``invalid_argument`` blaming the model and a
    search engine's redirect failed the whole ``web_search``; a port past 65535 was
    ``internal_error`` (``OverflowError``). Now: ``transport`` and ``invalid_argument``."""
    srv = LoopbackServer()
    try:
        s = agent.session(tmp_path, SessionOptions(net_allow=("127.0.0.1",)))
        res = s.tool("web_fetch", {"url": srv.route("/idna", redirect("http://xn--/"))})
        assert res.error_kind == {"type": "transport", "op": "web_fetch"}, res.output
        res = s.tool("web_fetch", {"url": srv.route("/port", redirect("http://127.0.0.1:99999/"))})
        assert res.error_kind is not None and res.error_kind["type"] == "invalid_argument", res.output
        res = s.tool("download", {"url": "http://127.0.0.1:99999/f", "file_path": "f"})
        assert res.error_kind is not None and res.error_kind["type"] == "invalid_argument", res.output
        config = SearchConfig(urls={**DEFAULT_ENGINE_URLS, "ddg": srv.url("/idna?q={query}")})
        s = agent.session(tmp_path, SessionOptions(net_allow=("127.0.0.1",), services={"web_search": config}))
        res = s.tool("web_search", {"query": "rust ownership", "engines": ["ddg"]})
        assert res.error_kind is not None and res.error_kind["type"] == "retrieval_requirements_not_met"
        assert res.metadata["engine_outcomes"][0]["failure_kind"] == "transport"
    finally:
        srv.close()


def _subclasses(cls: type) -> set[type]:
    out = set()
    for sub in cls.__subclasses__():
        out |= {sub} | _subclasses(sub)
    return out


def test_w6_the_httpx_exception_mapping_is_total() -> None:
    classes = {
        c
        for module in (httpx, httpcore)
        for _, c in inspect.getmembers(module, inspect.isclass)
        if issubclass(c, Exception)
    }
    for cls in sorted(classes, key=lambda c: c.__name__):
        try:
            exc = cls("boom")
        except TypeError:
            exc = cls.__new__(cls)
            Exception.__init__(exc, "boom")
        mapped = map_http_error(exc, "t", "https://h/x", secret="https://h/x?sig=s")
        assert isinstance(mapped, ToolError), cls
        assert mapped.kind in ("transport", "invalid_argument"), cls
        assert "sig=s" not in mapped.message


async def test_w6_body_limit_checks_declared_and_streamed_sizes(server: LoopbackServer) -> None:
    server.route("/big", static(200, b"x" * 5000))

    def undeclared(h):  # no Content-Length: the streamed check must catch it
        h.send_response(200)
        h.send_header("Connection", "close")
        h.end_headers()
        h.wfile.write(b"y" * 5000)
        h.close_connection = True

    server.route("/stream", undeclared)
    for path in ("/big", "/stream"):
        async with NetRuntime().client(LOOP) as http, http.open(parse_url(server.url(path)), op="t") as got:
            with pytest.raises(InvalidArgument, match="limit"):
                await read_body(got.response, 1000, "t", got.url)


async def test_d3_dns_failure_is_a_transport_error(server: LoopbackServer) -> None:
    runtime = NetRuntime(resolver=StaticResolver({}))
    with pytest.raises(Transport):
        await fetch(runtime, "http://nowhere.example.com/")


async def test_d3_pinned_tls_keeps_sni_and_verifies_the_name(tmp_path) -> None:
    """HTTPS to a name pinned to 127.0.0.1: TLS verifies the certificate for the *name*."""
    import ssl

    from tests.tools.tls_certs import make_certs, serve_tls

    ca, cert, key = make_certs(tmp_path, ["pinned.example.com"], [])
    srv = LoopbackServer()
    serve_tls(srv, cert, key)
    srv.route("/secure", static(200, "over tls"))
    client_ctx = ssl.create_default_context(cafile=str(ca))
    runtime = NetRuntime(
        resolver=StaticResolver({"pinned.example.com": ["127.0.0.1"], "other.example.com": ["127.0.0.1"]}),
        tls=client_ctx,
    )
    try:
        url = f"https://pinned.example.com:{srv.port}/secure"
        assert (await fetch(runtime, url)) == (200, b"over tls", 0)
        assert srv.hits("/secure")[0].headers["host"] == f"pinned.example.com:{srv.port}"
        with pytest.raises(Transport):  # same address, a name the certificate does not cover
            await fetch(runtime, f"https://other.example.com:{srv.port}/secure")
    finally:
        srv.close()
