"""The headless tier in a real Chromium (Debian's /usr/bin/chromium via Playwright) (SPEC W-1, W-4, D-3).

Every test ends by checking that no process of any ``a3s-chromium-*`` pool it started is left:
closing, cancelling and timing out all leave nothing behind. The browser reaches the loopback pages
only through the safe transport; Chromium itself resolves and connects to nothing.

Which processes count: each test gets a temporary directory of its own (``tempfile.tempdir``, which
the pool's ``mkdtemp`` honours), so every process of every pool the test started — browser, zygotes,
renderers, and any orphan reparented to init — carries ``<that dir>/a3s-chromium-`` on its command
line. Chromium started by other test sessions on the machine never matches; nothing this test
launched can escape the check (ancestry would miss exactly the orphans, so it is not used).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernel.options import SessionOptions
from tests.tools import search_pages as P
from tests.tools.netserver import LoopbackServer, static
from tests.tools.socks5server import Socks5Server
from tests.tools.test_web_search import config_for, session
from tools.web_search.browser import MARKER_PREFIX

pytestmark = pytest.mark.skipif(not os.path.exists("/usr/bin/chromium"), reason="needs Debian's chromium")
HTML = "text/html; charset=utf-8"


@pytest.fixture(autouse=True)
def scope(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """This test's temporary directory: its pools' ``a3s-chromium-*`` directories are made here.
    Short (under /tmp), so Chromium's singleton socket path stays within the 108-byte limit.
    (``tmp_path`` first: pytest's own temporary base must not land in here.)"""
    own = tempfile.mkdtemp(prefix="a3s-t-")
    monkeypatch.setattr(tempfile, "tempdir", own)
    yield own
    shutil.rmtree(own, ignore_errors=True)


def pool_processes(scope: str) -> list[str]:
    """Live processes of the pools this test started (their command lines name its directory)."""
    needle = os.path.join(scope, MARKER_PREFIX)
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if needle in cmd and "pytest" not in cmd:
            found.append(f"{entry}: {cmd[:120]}")
    return found


def wait_gone(scope: str, deadline_s: float = 10.0) -> list[str]:
    """Processes still alive once the call returned (killed ones may take a moment to be reaped)."""
    end = time.monotonic() + deadline_s
    left = pool_processes(scope)
    while left and time.monotonic() < end:
        time.sleep(0.1)
        left = pool_processes(scope)
    return left


@pytest.fixture()
def server():
    srv = LoopbackServer()
    yield srv
    srv.close()


def test_w1_browser_tier_renders_a_served_page(agent, tmp_path, server, scope) -> None:
    outside = LoopbackServer("127.0.0.2")
    try:
        outside.route("/beacon", static(200, "x"))
        page = P.js_rendered_bing_page(P.RESULTS).replace(
            "</body>",
            f"<img src='{outside.url('/beacon')}'><script>fetch('{outside.url('/beacon')}').catch(() => 0);"
            f"new WebSocket('ws://127.0.0.1:{server.port}/ws');</script></body>",
        )
        server.route("/bing_browser", static(200, page, content_type=HTML))
        s = session(agent, tmp_path, server)
        res = s.tool(
            "web_search", {"query": P.QUERY, "engines": ["bing_browser"], "timeout": 60, "format": "json"}
        )
        assert res.exit_code == 0, res.output
        assert res.metadata["browser_launched"] is True
        assert [r["url"] for r in json.loads(res.output)] == [u for _, u, _ in P.RESULTS]
        assert res.metadata["search_tiers"][0]["tier"] == "headless"
        # Only the page itself was fetched (through the safe transport); nothing else got out.
        assert [h.path.split("?")[0] for h in server.hits()] == ["/bing_browser"]
        assert outside.hits() == []
    finally:
        outside.close()
    assert wait_gone(scope) == []


def test_w5_a_lone_surrogate_in_the_rendered_dom_does_not_fail_the_search(
    agent, tmp_path, server, scope
) -> None:
    """W-5: a page's script can put a lone surrogate in the DOM; the rendered HTML came back as a
    str that UTF-8 cannot encode, and the ``UnicodeEncodeError`` failed the whole ``web_search`` as
    ``invalid_argument`` (blaming the model). It is now replaced and the results are parsed."""
    page = P.js_rendered_bing_page(P.RESULTS).replace(
        "</body>",
        "<script>document.body.appendChild(document.createTextNode('\\uD800 lone'));</script></body>",
    )
    server.route("/bing_browser", static(200, page, content_type=HTML))
    s = session(agent, tmp_path, server)
    res = s.tool(
        "web_search", {"query": P.QUERY, "engines": ["bing_browser"], "timeout": 60, "format": "json"}
    )
    assert res.exit_code == 0 and res.error_kind is None, (res.error_kind, res.output[:300])
    assert len(json.loads(res.output)) == len(P.RESULTS)
    assert wait_gone(scope) == []


def test_d3_the_browser_tier_obeys_the_guard(agent, tmp_path, server, scope) -> None:
    server.route("/bing_browser", static(200, P.bing_page(P.RESULTS), content_type=HTML))
    s = agent.session(tmp_path, SessionOptions(services={"web_search": config_for(server)}))  # guard closed
    res = s.tool("web_search", {"query": P.QUERY, "engines": ["bing_browser"], "timeout": 60})
    assert res.exit_code == 1
    assert server.hits() == []
    assert wait_gone(scope) == []


def test_w1_no_browser_is_launched_unless_a_headless_engine_runs(agent, tmp_path, server) -> None:
    server.route("/ddg", static(200, P.ddg_page(P.RESULTS), content_type=HTML))
    s = session(agent, tmp_path, server)
    res = s.tool("web_search", {"query": P.QUERY, "engines": ["ddg"]})
    assert res.exit_code == 0 and res.metadata["browser_launched"] is False


def _hanging(started: threading.Event):
    def handler(h):
        started.set()
        time.sleep(30)

    return handler


def test_w4_no_orphan_chromium_after_a_cancel(agent, tmp_path, server, scope) -> None:
    started = threading.Event()
    server.route("/bing_browser", _hanging(started))
    s = session(agent, tmp_path, server)
    fut = s.tool_async("web_search", {"query": P.QUERY, "engines": ["bing_browser"], "timeout": 60})
    assert started.wait(60), "the browser never asked for the page"
    assert pool_processes(scope), "chromium should be running while the page loads"
    fut.cancel()  # type: ignore[attr-defined]
    deadline = time.monotonic() + 30
    while s.active_tools() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert s.active_tools() == []
    assert wait_gone(scope) == []
    assert not [
        p for p in os.listdir(scope) if p.startswith(MARKER_PREFIX) and os.path.isdir(f"{scope}/{p}/profile")
    ]


def test_w4_no_orphan_chromium_after_a_timeout(agent, tmp_path, server, scope) -> None:
    started = threading.Event()
    server.route("/bing_browser", _hanging(started))
    s = session(agent, tmp_path, server)
    res = s.tool("web_search", {"query": P.QUERY, "engines": ["bing_browser"], "timeout": 25})
    assert res.exit_code == 1 and res.error_kind["type"] == "timeout"
    assert started.is_set()
    assert wait_gone(scope) == []


def test_w4_the_request_level_proxy_reaches_the_browser_tier(agent, tmp_path, server, scope) -> None:
    page = P.js_rendered_bing_page(P.RESULTS)
    server.route("http://engine.example.com/bing_browser", static(200, page, content_type=HTML))
    cfg = config_for(server, bing_browser="http://engine.example.com/bing_browser?q={query}")
    s = session(agent, tmp_path, server, config=cfg)
    res = s.tool(
        "web_search", {"query": P.QUERY, "engines": ["bing_browser"], "timeout": 60, "proxy": server.url("")}
    )
    assert res.exit_code == 0, res.output
    assert [h.path.split("?")[0] for h in server.hits()] == ["http://engine.example.com/bing_browser"]
    assert wait_gone(scope) == []


def test_w4_a_socks5_proxy_reaches_the_browser_tier(agent, tmp_path, server, scope) -> None:
    """Chromium has no network of its own: every request it makes is fetched through the safe
    transport, so a socks5 ``proxy`` carries the headless tier too (Playwright's own proxy option
    is never used)."""
    page = P.js_rendered_bing_page(P.RESULTS)
    server.route("/bing_browser", static(200, page, content_type=HTML))
    cfg = config_for(server, bing_browser="http://engine.example.com/bing_browser?q={query}")
    socks = Socks5Server(("127.0.0.1", server.port))
    try:
        s = session(agent, tmp_path, server, config=cfg)
        res = s.tool(
            "web_search", {"query": P.QUERY, "engines": ["bing_browser"], "timeout": 60, "proxy": socks.url()}
        )
        assert res.exit_code == 0, res.output
        assert socks.connects == [("engine.example.com", 80)]
        assert [h.headers["host"] for h in server.hits("/bing_browser")] == ["engine.example.com"]
    finally:
        socks.close()
    assert wait_gone(scope) == []


def test_w4_a_run_and_its_delegated_child_share_the_browser_retry_budget(
    agent, tmp_path, server, scope
) -> None:
    """W-4: a headless engine that fails transiently is retried once, 4 times per *run*: the parent
    spends 3 and its delegated child (``<parent>.<task_id>``) only gets the last one."""

    def drop(h) -> None:  # the page's server hangs up without an answer: a transport failure
        h.close_connection = True

    for engine in ("google", "baidu", "bing_browser"):
        server.route(f"/{engine}", drop)
    parent = session(agent, tmp_path, server, session_id="rb")
    res = parent.tool(
        "web_search", {"query": P.QUERY, "engines": ["google", "baidu", "bing_browser"], "timeout": 60}
    )
    assert res.exit_code == 1 and res.metadata["browser_retries"] == {
        "taken": 3,
        "run_used": 3,
        "run_limit": 4,
    }
    child = session(agent, tmp_path, server, session_id="rb.task-1")
    res = child.tool("web_search", {"query": P.QUERY, "engines": ["google", "baidu"], "timeout": 60})
    assert res.metadata["browser_retries"] == {"taken": 1, "run_used": 4, "run_limit": 4}
    assert {o["kind"] for o in res.metadata["engine_outcomes"]} == {"transport"}
    assert len(server.hits()) == 3 * 2 + 2 + 1  # each page asked for once, plus one per retry
    assert wait_gone(scope) == []


def test_d3_w1_page_webrtc_sends_no_packet_of_its_own(agent, tmp_path, server, scope) -> None:
    """A result page's script opening an ``RTCPeerConnection`` (STUN over UDP, TURN over TCP) to a
    private address: WebRTC does not go through request interception or the host resolver, so only
    a browser with no network at all keeps it in. The page still renders (its requests are
    fetched through the safe transport); the listeners on 127.0.0.2 hear nothing."""
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tcp = socket.socket()
    heard: list[object] = []
    stop = threading.Event()

    def listen() -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError):
                heard.append(("udp", udp.recvfrom(2048)[1]))
            with contextlib.suppress(OSError):
                conn, peer = tcp.accept()
                conn.close()
                heard.append(("tcp", peer))

    try:
        udp.bind(("127.0.0.2", 0))
        tcp.bind(("127.0.0.2", 0))
        tcp.listen()
        udp.settimeout(0.1)
        tcp.settimeout(0.1)
        ice = json.dumps(
            [
                {"urls": f"stun:127.0.0.2:{udp.getsockname()[1]}"},
                {
                    "urls": f"turn:127.0.0.2:{tcp.getsockname()[1]}?transport=tcp",
                    "username": "u",
                    "credential": "p",
                },
            ]
        )
        script = (
            f"<script>const pc = new RTCPeerConnection({{iceServers: {ice}}}); pc.createDataChannel('x');"
            "pc.createOffer().then(o => pc.setLocalDescription(o));</script>"
        )
        # The results appear after 1.5 s, so the page lives long enough for ICE to gather.
        page = (
            P.js_rendered_bing_page(P.RESULTS)
            .replace("}, 50);", "}, 1500);")
            .replace("</body>", script + "</body>")
        )
        server.route("/bing_browser", static(200, page, content_type=HTML))
        listener = threading.Thread(target=listen, daemon=True)
        listener.start()
        res = session(agent, tmp_path, server).tool(
            "web_search", {"query": P.QUERY, "engines": ["bing_browser"], "timeout": 60, "format": "json"}
        )
        assert res.exit_code == 0, res.output
        assert [r["url"] for r in json.loads(res.output)] == [u for _, u, _ in P.RESULTS]
        time.sleep(0.5)
        assert heard == []
    finally:
        stop.set()
        udp.close()
        tcp.close()
    assert wait_gone(scope) == []


def test_d3_w1_no_network_namespace_means_no_headless_tier(tmp_path) -> None:
    """Fail closed: where bubblewrap cannot give Chromium a network namespace (here a stand-in
    that fails the way a container's seccomp profile makes it fail), Chromium is not started."""
    from kernel.errors import Unsupported
    from tools.web_search.netns import launcher

    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to creating new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    with pytest.raises(Unsupported, match=r"without a network of its own.*No permissions"):
        launcher(str(tmp_path), "/usr/bin/chromium", bwrap=str(fake))
    assert not (tmp_path / "chromium-netns").exists()
    with pytest.raises(Unsupported, match="not installed"):
        launcher(str(tmp_path), "/usr/bin/chromium", bwrap=str(tmp_path / "missing"))


def test_w5_d3_a_page_that_grows_its_dom_is_refused_not_read_whole(agent, tmp_path, server, scope) -> None:
    """The fetched body is capped (5 MiB), but a page's script can build any DOM it likes: 16 MiB of
    text here. Its HTML is measured inside the browser and never handed over past 5 MiB: the engine
    fails (``transport``), this process's memory stays below the page's size (tracemalloc's peak),
    and the browser is closed as always. (64 MiB made Chromium's own serialisation outlast the
    engine's time on this host: ``timeout`` after 24 s, the same refusal by another name.)"""
    import tracemalloc

    grow = "<script>document.body.appendChild(document.createTextNode('x'.repeat(16 << 20)));</script>"
    page = P.js_rendered_bing_page(P.RESULTS).replace("</body>", grow + "</body>")
    server.route("/bing_browser", static(200, page, content_type=HTML))
    s = session(agent, tmp_path, server)
    tracemalloc.start()
    try:
        res = s.tool("web_search", {"query": P.QUERY, "engines": ["bing_browser"], "timeout": 60})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert res.exit_code == 1, res.output
    [outcome] = [o for o in res.metadata["engine_outcomes"] if o["engine"] == "bing_browser"]
    assert outcome["failure_kind"] == "transport", outcome
    assert "larger than" in json.dumps(res.metadata["engine_errors"]), res.metadata["engine_errors"]
    assert peak < 16 << 20, f"peaked at {peak >> 20} MiB"  # the page whole would be 16 MiB or more
    assert wait_gone(scope) == []


def _search_a_page_of_scripts(agent, tmp_path, server, script: bytes, count: int):
    """A results page that loads ``count`` copies of ``script``: the result and how many were asked for."""
    for i in range(count):
        server.route(f"/js/{i}", static(200, script, content_type="application/javascript"))
    scripts = "".join(f"<script src='/js/{i}'></script>" for i in range(count))
    page = P.js_rendered_bing_page(P.RESULTS).replace("</body>", scripts + "</body>")
    server.route("/bing_browser", static(200, page, content_type=HTML))
    s = session(agent, tmp_path, server)
    res = s.tool(
        "web_search", {"query": P.QUERY, "engines": ["bing_browser"], "timeout": 60, "format": "json"}
    )
    return res, len([h for h in server.hits() if h.path.startswith("/js/")])


def test_w4_d3_a_page_gets_a_bounded_total_of_routed_bytes(agent, tmp_path, server, scope) -> None:
    """Each routed body is capped at 5 MiB, but nothing capped their sum: a page of 40 scripts of
    2 MiB each had all 80 MiB read for it. Now a page's requests together get ``PAGE_BYTE_BUDGET``
    (16 MiB); later ones are aborted, and the page still renders with what it got."""
    from tools.web_search.browser import PAGE_BYTE_BUDGET

    size, count = 2 << 20, 40
    res, fetched = _search_a_page_of_scripts(
        agent, tmp_path, server, b"//" + b"x" * (size - 3) + b"\n", count
    )
    assert res.exit_code == 0, res.output
    assert [r["url"] for r in json.loads(res.output)] == [u for _, u, _ in P.RESULTS]
    # The page itself (a few KiB) plus whole scripts up to the budget; none past it.
    assert fetched <= PAGE_BYTE_BUDGET // size, f"{fetched} of {count} scripts were fetched"
    assert fetched >= 2  # the budget limits a page, it does not refuse it its scripts
    assert wait_gone(scope) == []


def test_w4_many_small_scripts_all_fit_the_page_budget(agent, tmp_path, server, scope) -> None:
    """Each request reserves up to 5 MiB before it is read, so 40 at once would reserve 200 MiB of a
    16 MiB budget: they wait for each other's reservations to settle instead of being refused."""
    res, fetched = _search_a_page_of_scripts(agent, tmp_path, server, b"//" + b"x" * (100 << 10) + b"\n", 40)
    assert res.exit_code == 0, res.output
    assert fetched == 40
    assert wait_gone(scope) == []
