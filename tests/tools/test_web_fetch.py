"""``web_fetch`` against loopback servers the tests start (SPEC W-6, B-1, D-3; REFERENCE 4.9)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import socket
import threading
import time

import pytest

from kernel.errors import InvalidArgument
from kernel.options import SessionOptions
from kernel.workspace import LocalWorkspace
from tests.tools.netserver import LoopbackServer, redirect, static
from tools.web_fetch.paging import page

LOOP = SessionOptions(net_allow=("127.0.0.1",))
HTML = "text/html; charset=utf-8"

NAV = "<nav>" + "".join(f"<a href='/s{i}'>Section link {i}</a>" for i in range(25)) + "</nav>"
ASIDE = "<aside><h3>Trending</h3>" + "".join(f"<p>Trending story {i}</p>" for i in range(10)) + "</aside>"
ARTICLE = f"""<!doctype html><html><head><title>Rust ownership explained</title>
<script>window.track = 'TRACKING-CODE';</script><style>.x{{color:red}}</style></head>
<body><div id="cookie">We use cookies. Accept all cookies?</div><header>{NAV}</header>{ASIDE}
<main><article><h1>Rust ownership explained</h1>
{"".join(f"<p>Paragraph {i}: every value in Rust has a single owner, and when the owner goes out of scope the value is dropped. Borrowing lets code use a value without taking ownership.</p>" for i in range(8))}
<h2>Rules</h2><ul><li>Each value has one owner</li><li>Only one mutable borrow at a time</li></ul>
<table><tr><th>Kind</th><th>Moves?</th></tr><tr><td>String</td><td>yes</td></tr><tr><td>i32</td><td>no (Copy)</td></tr></table>
<pre><code>let s2 = s1; // s1 is moved</code></pre></article></main>
<footer>Copyright 2026 Example Media. All rights reserved.</footer></body></html>"""


@pytest.fixture()
def server():
    srv = LoopbackServer()
    yield srv
    srv.close()


def test_w6_markdown_keeps_the_main_content_and_drops_boilerplate(agent, tmp_path, server) -> None:
    s = agent.session(tmp_path, LOOP)
    res = s.tool("web_fetch", {"url": server.route("/a", static(200, ARTICLE, content_type=HTML))})
    assert res.exit_code == 0, res.output
    out = res.output
    assert out.startswith("# Rust ownership explained")
    assert "Paragraph 7: every value in Rust has a single owner" in out
    assert "Only one mutable borrow at a time" in out and "i32" in out and "let s2 = s1;" in out
    for junk in (
        "TRACKING-CODE",
        "Trending story",
        "Section link 24",
        "Copyright 2026",
        "Accept all cookies",
        "color:red",
    ):
        assert junk not in out, junk
    assert res.metadata["title"] == "Rust ownership explained"
    assert res.metadata["status"] == 200 and res.metadata["content_type"] == "text/html"
    assert res.trust == "external"


def test_w6_text_html_and_whole_document_formats(agent, tmp_path, server) -> None:
    url = server.route("/a", static(200, ARTICLE, content_type=HTML))
    s = agent.session(tmp_path, LOOP)
    text = s.tool("web_fetch", {"url": url, "format": "text"}).output
    assert "Paragraph 3:" in text and "# " not in text and "](" not in text
    html = s.tool("web_fetch", {"url": url, "format": "html"}).output
    assert html.startswith("<main>") and "<table>" in html and "Trending story" not in html
    whole = s.tool("web_fetch", {"url": url, "body_only": False}).output
    assert "Section link 24" in whole and "Paragraph 3:" in whole
    raw = s.tool("web_fetch", {"url": url, "format": "html", "body_only": False}).output
    assert raw.startswith("<!doctype html>")


def test_w6_plain_text_and_json_come_back_as_they_are(agent, tmp_path, server) -> None:
    s = agent.session(tmp_path, LOOP)
    body = '{"a": [1, 2, 3], "b": "<b>not html</b>"}'
    res = s.tool("web_fetch", {"url": server.route("/j", static(200, body, content_type="application/json"))})
    assert res.output == body
    res = s.tool("web_fetch", {"url": server.route("/t", static(200, "line 1\nline 2\n"))})
    assert res.output == "line 1\nline 2\n"


def test_w6_binary_content_is_unsupported(agent, tmp_path, server) -> None:
    s = agent.session(tmp_path, LOOP)
    url = server.route("/img", static(200, b"\x89PNG\r\n\x1a\n\x00\x00", content_type="image/png"))
    res = s.tool("web_fetch", {"url": url})
    assert res.exit_code == 1 and res.error_kind["type"] == "unsupported" and "download" in res.output


def test_w6_charsets_from_header_and_meta(agent, tmp_path, server) -> None:
    s = agent.session(tmp_path, LOOP)
    latin = "<html><body><main><p>Caf\xe9 cr\xe8me na\xefve</p></main></body></html>".encode("latin-1")
    res = s.tool(
        "web_fetch",
        {
            "url": server.route("/l", static(200, latin, content_type="text/html; charset=iso-8859-1")),
            "body_only": False,
        },
    )
    assert "Café crème naïve" in res.output
    meta = '<html><head><meta charset="windows-1251"></head><body><p>Привет мир</p></body></html>'.encode(
        "cp1251"
    )
    res = s.tool(
        "web_fetch",
        {"url": server.route("/m", static(200, meta, content_type="text/html")), "body_only": False},
    )
    assert "Привет мир" in res.output


@pytest.mark.parametrize(
    "charset", ["base64", "zlib", "rot13", "hex", "idna", "undefined", "punycode", "unicode_escape"]
)
def test_w6_a_charset_that_is_no_text_encoding_is_ignored(agent, tmp_path, server, charset) -> None:
    """W-6: the page names the charset. Python codecs that are no text charset made ``bytes.decode``
    raise (``LookupError`` for base64/zlib/rot13/hex, ``UnicodeError`` for idna/undefined/punycode):
    the call ended as ``internal_error``. Now the name is ignored (then the meta, then UTF-8)."""
    s = agent.session(tmp_path, LOOP)
    body = "<html><body><main><p>Caf\xe9 \\N{BULLET} h\xe9llo</p></main></body></html>".encode()
    for path, ctype, data in (
        ("/h", f"text/html; charset={charset}", body),
        ("/m", "text/html", f'<html><head><meta charset="{charset}"></head>'.encode() + body[6:]),
        ("/t", f"text/plain; charset={charset}", "Caf\xe9 \\N{BULLET}".encode()),
    ):
        res = s.tool("web_fetch", {"url": server.route(path, static(200, data, content_type=ctype))})
        assert res.exit_code == 0 and res.error_kind is None, (path, res.error_kind, res.output)
        assert "Café \\N{BULLET}" in res.output, (path, res.output)


def test_b1_paging_walks_the_whole_document_without_gaps(agent, tmp_path, server) -> None:
    long_page = (
        "<html><body><main>"
        + "".join(f"<p>Block {i:04d} 数据 café 👍🏽 e\u0301 end.</p>" for i in range(600))
        + "</main></body></html>"
    )
    url = server.route("/long", static(200, long_page, content_type=HTML))
    s = agent.session(tmp_path, LOOP)
    first = s.tool("web_fetch", {"url": url, "max_chars": 1000, "format": "text"})
    total = first.metadata["range"]["total_chars"]
    assert total > 5000 and first.metadata["cached"] is False
    pieces, offset, calls = [], 0, 0
    while True:
        res = s.tool("web_fetch", {"url": url, "max_chars": 1000, "offset": offset, "format": "text"})
        rng = res.metadata["range"]
        text = res.output
        if not rng["eof"]:
            footer = f"\n\n... (more fetched content available; continue with offset={rng['next_offset']})"
            assert text.endswith(footer)
            text = text[: -len(footer)]
        pieces.append(text)
        calls += 1
        if rng["eof"]:
            break
        assert rng["returned_chars"] <= 1000 and rng["next_offset"] == offset + rng["returned_chars"]
        offset = rng["next_offset"]
    joined = "".join(pieces)
    assert len(joined) == total and "Block 0599" in joined and "Block 0000" in joined
    assert len(server.hits("/long")) == 2  # two first pages; every later page came from the session copy
    end = s.tool("web_fetch", {"url": url, "offset": total, "format": "text"})
    assert end.exit_code == 0 and end.output == "" and end.metadata["range"]["eof"]
    past = s.tool("web_fetch", {"url": url, "offset": total + 1, "format": "text"})
    assert past.exit_code == 1 and past.error_kind["type"] == "invalid_argument"
    clamped = s.tool("web_fetch", {"url": url, "max_chars": 250_000, "format": "text"})
    assert (
        clamped.metadata["range"]["applied_max_chars"] == 100_000
        and clamped.metadata["range"]["limit_clamped"]
    )


@pytest.mark.parametrize("cut", range(1, 12))
def test_b1_page_boundaries_never_split_a_character_cluster(cut: int) -> None:
    text = "ab👍🏽e\u0301\r\n👨\u200d👩\u200d👧x"
    first, meta = page(text, 0, cut)
    body = first.split("\n\n... (more", 1)[0]
    rest = text[meta["returned_chars"] :]
    assert body + rest == text
    assert not rest or (rest[0] not in "\u0301\u200d\n\U0001f3fd" and not body.endswith("\u200d"))


def test_b1_paging_errors() -> None:
    with pytest.raises(InvalidArgument):
        page("abc", 4, 10)
    assert page("abc", 3, 10)[1]["eof"]


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (429, "rate_limited"),
        (503, "transport"),
        (500, "transport"),
        (408, "transport"),
        (404, "tool_error"),
        (403, "tool_error"),
    ],
)
def test_w6_failures_are_typed_from_the_status(agent, tmp_path, server, status, kind) -> None:
    s = agent.session(tmp_path, LOOP)
    res = s.tool(
        "web_fetch",
        {"url": server.route("/e", static(status, "body text 429 rate limit", {"Retry-After": "30"}))},
    )
    assert res.exit_code == 1 and res.error_kind["type"] == kind
    if kind == "rate_limited":
        assert res.error_kind["retry_after_ms"] == 30_000
    if kind == "transport":
        assert res.error_kind["op"] == "web_fetch"


def test_w6_a_page_that_says_429_is_not_rate_limited(agent, tmp_path, server) -> None:
    page_429 = "<html><body><main><h1>429 Too Many Requests</h1><p>HTTP 503 rate limit exceeded, retry later</p></main></body></html>"
    s = agent.session(tmp_path, LOOP)
    res = s.tool("web_fetch", {"url": server.route("/says", static(200, page_429, content_type=HTML))})
    assert res.exit_code == 0 and res.error_kind is None and "429 Too Many Requests" in res.output


def test_w6_connection_failure_is_transport_and_deadline_is_timeout(agent, tmp_path, server) -> None:
    s = agent.session(tmp_path, LOOP)
    closed = LoopbackServer()
    port = closed.port
    closed.close()
    res = s.tool("web_fetch", {"url": f"http://127.0.0.1:{port}/"})
    assert res.exit_code == 1 and res.error_kind == {"type": "transport", "op": "web_fetch"}

    def hang(h):
        time.sleep(10)

    res = s.tool("web_fetch", {"url": server.route("/hang", hang), "timeout": 1})
    assert res.exit_code == 1 and res.error_kind["type"] == "timeout" and res.error_kind["op"] == "web_fetch"


def test_w6_body_over_five_mib_is_refused(agent, tmp_path, server) -> None:
    s = agent.session(tmp_path, LOOP)
    big = b"<p>" + b"x" * (5 * 1024 * 1024 + 10) + b"</p>"
    res = s.tool("web_fetch", {"url": server.route("/big", static(200, big, content_type=HTML))})
    assert res.exit_code == 1 and res.error_kind["type"] == "invalid_argument" and "limit" in res.output

    def undeclared(h):
        h.send_response(200)
        h.send_header("Content-Type", "text/plain")
        h.send_header("Connection", "close")
        h.end_headers()
        for _ in range(6):
            h.wfile.write(b"y" * (1024 * 1024))
        h.close_connection = True

    res = s.tool("web_fetch", {"url": server.route("/stream", undeclared)})
    assert res.exit_code == 1 and res.error_kind["type"] == "invalid_argument"


def test_w6_a_body_of_tiny_chunks_cannot_hold_the_event_loop_past_the_deadline(
    agent, tmp_path, server
) -> None:
    """W-6: h11 hands over a chunk it has already buffered without a trip through the event loop,
    and each costs ~6 µs across httpx's layers: 1 MiB sent as 1-byte chunks held the loop for 6.4 s
    (5 MiB: about 30 s), every session of the process stood still and the call's own ``timeout``
    could not fire until the body was done: this call, with a 1 s ``timeout``, *succeeded* after
    16.8 s. ``read_body`` now lets the loop run every 256 chunks, so the deadline ends it."""
    wire = b"1\r\nx\r\n" * (2 * 1024 * 1024) + b"0\r\n\r\n"

    def tiny_chunks(h):
        h.send_response(200)
        h.send_header("Content-Type", "text/plain")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        for i in range(0, len(wire), 1 << 20):
            h.wfile.write(wire[i : i + (1 << 20)])

    s = agent.session(tmp_path, LOOP)
    started = time.monotonic()
    res = s.tool("web_fetch", {"url": server.route("/tiny", tiny_chunks), "timeout": 1})
    elapsed = time.monotonic() - started
    assert res.error_kind is not None and res.error_kind["type"] == "timeout", res.error_kind
    assert elapsed < 6, elapsed


def test_w6_decoding_a_slow_charset_does_not_stall_the_event_loop(agent, tmp_path, server) -> None:
    """W-6: one ``bytes.decode`` holds the GIL throughout, and charsets that leave bytes undefined
    replace slowly: 5 MiB of 0xFF declared ISO-8859-7 took 0.64 s, decoded on the event loop, so
    every session of the process stood still (and again for each meta refresh hop). The body is now
    decoded in a worker thread a 128 KiB slice at a time, so the loop runs between slices."""
    body = b"\xff" * (5 * 1024 * 1024 - 16)
    url = server.route("/greek", static(200, body, content_type="text/plain; charset=iso-8859-7"))
    s = agent.session(tmp_path, LOOP)
    ticks: list[float] = []
    stop = threading.Event()

    async def heartbeat() -> None:  # runs on the session's loop while the fetch does
        loop = asyncio.get_running_loop()
        while not stop.is_set():
            ticks.append(loop.time())
            await asyncio.sleep(0.01)

    beat = s._loop.submit(heartbeat())
    try:
        res = s.tool("web_fetch", {"url": url, "max_chars": 10})
    finally:
        stop.set()
        beat.result(timeout=30)
    assert res.exit_code == 0 and res.metadata["range"]["total_chars"] == len(body), res.output
    assert res.output.startswith("\ufffd" * 10)
    gaps = [b - a for a, b in itertools.pairwise(ticks)]
    assert max(gaps) < 0.4, f"the event loop stood still for {max(gaps):.2f} s"


def test_w6_a_server_that_never_stops_sending_cannot_keep_the_event_loop(agent, tmp_path) -> None:
    """W-6: ``loop.sock_recv`` returns without suspending when data is already waiting, and
    httpcore reads informational responses until a final one. A server sending ``103 Early Hints``
    without end kept the event loop to itself: the call's 2 s ``timeout`` never fired and every
    session of the process froze (here until the server gives up after 20 s; a real one need not).
    Each socket read now gives the loop a turn, so the deadline ends the call."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    hints = b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n" * 20_000

    def flood() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            until = time.monotonic() + 20
            with contextlib.suppress(OSError):
                while time.monotonic() < until:
                    conn.sendall(hints)

    threading.Thread(target=flood, daemon=True).start()
    s = agent.session(tmp_path, LOOP)
    started = time.monotonic()
    try:
        res = s.tool("web_fetch", {"url": f"http://127.0.0.1:{port}/", "timeout": 2})
    finally:
        listener.close()
    elapsed = time.monotonic() - started
    assert res.error_kind is not None and res.error_kind["type"] == "timeout", res.error_kind
    assert elapsed < 10, elapsed


def _refresh(target: str, delay: int = 0) -> str:
    return f"<html><head><meta http-equiv='Refresh' content='{delay}; URL={target}'></head><body>moved</body></html>"


def test_w6_meta_refresh_is_a_redirect_and_counts_toward_the_limit(agent, tmp_path, server) -> None:
    s = agent.session(tmp_path, LOOP)
    server.route("/dest", static(200, ARTICLE, content_type=HTML))
    server.route("/m0", static(200, _refresh("/r1"), content_type=HTML))
    server.route("/r1", redirect("/dest"))
    res = s.tool("web_fetch", {"url": server.url("/m0")})
    assert (
        res.exit_code == 0
        and res.metadata["redirects"] == 2
        and res.metadata["final_url"] == server.url("/dest")
    )
    for i in range(11):  # eleven hops: five meta refreshes and six 302s
        nxt = f"/h{i + 1}"
        server.route(f"/h{i}", static(200, _refresh(nxt), content_type=HTML) if i % 2 == 0 else redirect(nxt))
    server.route("/h11", static(200, ARTICLE, content_type=HTML))
    res = s.tool("web_fetch", {"url": server.url("/h0")})
    assert res.exit_code == 1 and "redirects" in res.output
    slow = s.tool(
        "web_fetch", {"url": server.route("/slow", static(200, _refresh("/dest", 600), content_type=HTML))}
    )
    assert slow.metadata["redirects"] == 0  # a delayed refresh is content, not a redirect


@pytest.mark.parametrize(
    "target", ["javascript:void(0)", "about:blank", "mailto:a@b.example", "http://xn--/"]
)
def test_w6_a_meta_refresh_to_no_http_url_is_page_content(agent, tmp_path, server, target) -> None:
    """W-6: a page's ``<meta http-equiv=refresh content="0; url=javascript:…">`` (or ``about:``,
    ``mailto:``, bad punycode) failed the call as ``invalid_argument``, blaming the model's URL,
    and the page was lost. Such a refresh is now content; a refresh to a blocked address is still
    refused by the guard before any connection."""
    s = agent.session(tmp_path, LOOP)
    page = _refresh(target).replace("moved", "<main><p>The page's own words stay.</p></main>")
    res = s.tool("web_fetch", {"url": server.route("/r", static(200, page, content_type=HTML))})
    assert res.exit_code == 0 and "The page's own words stay." in res.output, res.output
    assert res.metadata["redirects"] == 0
    blocked = server.route("/b", static(200, _refresh("http://10.0.0.1/"), content_type=HTML))
    res = s.tool("web_fetch", {"url": blocked})
    assert res.error_kind is not None and res.error_kind["type"] == "invalid_argument"
    assert "SSRF guard" in res.output


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1",
        "127.1",
        "127.0.1",
        "2130706433",
        "0x7f000001",
        "0x7f.0.0.1",
        "0177.0.0.1",
        "127.0.0.1.",
        "localhost",
        "LOCALHOST.",
        "x.localhost",
        "[::1]",
        "[::ffff:127.0.0.1]",
        "[::ffff:7f00:1]",
        "[::127.0.0.1]",
        "[2002:7f00:1::]",
        "[64:ff9b::7f00:1]",
        "0.0.0.0",
        "0",
    ],
)
def test_d3_web_fetch_refuses_every_loopback_spelling_with_the_guard_closed(
    agent, tmp_path, server, host
) -> None:
    server.route("/p", static(200, "secret", content_type=HTML))
    s = agent.session(tmp_path, SessionOptions())
    res = s.tool("web_fetch", {"url": f"http://{host}:{server.port}/p"})
    assert res.exit_code == 1 and res.error_kind["type"] == "invalid_argument", res.output
    assert server.hits() == []


def test_d3_redirect_from_an_allowed_host_to_a_blocked_one_is_refused(agent, tmp_path, server) -> None:
    inner = LoopbackServer("127.0.0.2")
    try:
        inner.route("/admin", static(200, "internal admin", content_type=HTML))
        server.route("/out", redirect(inner.url("/admin")))
        s = agent.session(tmp_path, LOOP)
        res = s.tool("web_fetch", {"url": server.url("/out")})
        assert res.exit_code == 1 and res.error_kind["type"] == "invalid_argument"
        assert inner.hits() == []
    finally:
        inner.close()


def test_w6_secret_query_keys_are_dropped_and_never_shown(agent, tmp_path, server) -> None:
    server.route(
        "/q", static(200, "<html><body><main><p>ok page</p></main></body></html>", content_type=HTML)
    )
    s = agent.session(tmp_path, LOOP)
    res = s.tool("web_fetch", {"url": server.url("/q?page=2&api_key=TOPSECRET&sig=SIGSECRET")})
    assert res.exit_code == 0
    assert server.hits("/q")[0].path == "/q?page=2&sig=SIGSECRET"  # functional keys are kept
    shown = json.dumps([res.to_json(), [e.to_json() for e in s.events()]])
    assert "TOPSECRET" not in shown and "SIGSECRET" not in shown


def test_s2_web_fetch_is_a_runtime_builtin_on_every_workspace(agent, tmp_path) -> None:
    assert "web_fetch" in agent.session(LocalWorkspace(tmp_path, writable=False)).tool_names()
