"""``download`` against loopback servers the tests start (SPEC D-1…D-5, REFERENCE 4.6).

Every failure path — digest mismatch, over ``max_bytes``, cancel, timeout, server errors, unsafe
Range answers — must leave the target untouched and no ``.a3s-download-*`` temp file behind.
"""

from __future__ import annotations

import gc
import json
import os
import socket
import threading
import time
from pathlib import Path

import pytest

from kernel.options import SessionOptions
from kernel.policy import PermissionPolicy
from tests.tools.netserver import LoopbackServer, Ranged, redirect, send, static
from tools.download.names import infer_name, sanitize
from tools.download.pump import STATS as PUMP_STATS
from tools.download.pump import THREAD_PREFIX as PUMP_THREAD
from tools.net import parse_url

LOOP = SessionOptions(net_allow=("127.0.0.1",))


@pytest.fixture()
def server():
    srv = LoopbackServer()
    yield srv
    srv.close()


def user_files(root: Path) -> list[str]:
    """What the workspace holds besides the session's own state directory."""
    return sorted(p.name for p in root.iterdir() if p.name != ".a3s")


def temp_files(root: Path) -> list[str]:
    return [str(p.relative_to(root)) for p in root.rglob(".a3s-download-*")]


def blob(size: int, seed: int = 1) -> bytes:
    return (seed.to_bytes(4, "big") * (size // 4 + 1))[:size] if size < 64 else os.urandom(size)


def test_d4_range_download_verified_by_sha256_uses_several_range_requests(agent, tmp_path, server) -> None:
    data = blob(4 << 20)
    origin = Ranged(data)
    url = server.route("/data.bin", origin)
    s = agent.session(tmp_path, LOOP)
    res = s.tool("download", {"url": url, "connections": 4, "expected_sha256": origin.sha256.upper()})
    assert res.exit_code == 0, res.output
    assert (tmp_path / "data.bin").read_bytes() == data
    meta = res.metadata
    assert meta["strategy"] == "parallel_range" and meta["connections"] == 4 and meta["range_supported"]
    assert meta["sha256"] == origin.sha256
    assert origin.range_requests >= 5  # the probe plus four segments
    assert origin.full_requests == 0
    segments = [h.headers["range"] for h in server.hits("/data.bin")[1:]]
    assert sorted(segments) == sorted(
        f"bytes={a}-{b}"
        for a, b in [(0, 1048575), (1048576, 2097151), (2097152, 3145727), (3145728, 4194303)]
    )
    assert all(h.headers["if-range"] == '"v1"' for h in server.hits("/data.bin")[1:])
    assert res.output == f"Downloaded {len(data)} bytes to data.bin using parallel_range"
    assert temp_files(tmp_path) == []


def test_d4_small_files_and_unvalidated_resources_use_one_response(agent, tmp_path, server) -> None:
    s = agent.session(tmp_path, LOOP)
    small = Ranged(b"tiny file\n")
    res = s.tool("download", {"url": server.route("/small.txt", small), "connections": 4})
    assert res.metadata["strategy"] == "sequential" and res.metadata["connections"] == 1
    no_validator = Ranged(blob(3 << 20), etag=None)
    res = s.tool("download", {"url": server.route("/nv.bin", no_validator), "connections": 4})
    assert res.metadata["strategy"] == "sequential"
    assert (tmp_path / "nv.bin").read_bytes() == no_validator.data
    no_ranges = Ranged(blob(3 << 20, 2), accept_ranges=False)
    res = s.tool("download", {"url": server.route("/nr.bin", no_ranges), "connections": 4})
    assert res.metadata["strategy"] == "sequential" and not res.metadata["range_supported"]
    assert len(server.hits("/nr.bin")) == 1  # the probe's 200 body *is* the download
    assert (tmp_path / "nr.bin").read_bytes() == no_ranges.data


@pytest.mark.parametrize("lie", ["bad_content_range", "ignore_range_after"])
def test_d4_unsafe_range_answers_fall_back_to_one_sequential_response(agent, tmp_path, server, lie) -> None:
    data = blob(4 << 20, 3)
    origin = Ranged(data, bad_content_range=(lie == "bad_content_range"))
    if lie == "ignore_range_after":
        origin.ignore_range_after = 2  # the probe and one segment get ranges, then whole bodies
    s = agent.session(tmp_path, LOOP)
    res = s.tool(
        "download",
        {"url": server.route("/x.bin", origin), "connections": 4, "expected_sha256": origin.sha256},
    )
    assert res.exit_code == 0, res.output
    assert res.metadata["strategy"] == "sequential_fallback"
    assert res.metadata["notices"]
    assert (tmp_path / "x.bin").read_bytes() == data
    assert temp_files(tmp_path) == []


def test_d4_digest_mismatch_leaves_the_target_untouched(agent, tmp_path, server) -> None:
    (tmp_path / "keep.bin").write_bytes(b"old content")
    s = agent.session(tmp_path, LOOP)
    for connections in (1, 4):
        res = s.tool(
            "download",
            {
                "url": server.route("/d.bin", Ranged(blob(3 << 20, 4))),
                "file_path": "keep.bin",
                "overwrite": True,
                "connections": connections,
                "expected_sha256": "0" * 64,
            },
        )
        assert res.exit_code == 1 and "SHA-256 mismatch" in res.output
        assert (tmp_path / "keep.bin").read_bytes() == b"old content"
        assert temp_files(tmp_path) == []


def test_d2_over_max_bytes_declared_or_streamed_is_refused(agent, tmp_path, server) -> None:
    s = agent.session(tmp_path, LOOP)
    declared = Ranged(blob(2 << 20, 5))
    res = s.tool("download", {"url": server.route("/big.bin", declared), "max_bytes": 1 << 20})
    assert res.exit_code == 1 and res.error_kind["type"] == "invalid_argument"
    assert "max_bytes" in res.output
    streamed = Ranged(blob(2 << 20, 6), accept_ranges=False, declare_length=False)
    res = s.tool("download", {"url": server.route("/stream.bin", streamed), "max_bytes": 1 << 20})
    assert res.exit_code == 1 and res.error_kind["type"] == "invalid_argument"
    assert not (tmp_path / "big.bin").exists() and not (tmp_path / "stream.bin").exists()
    assert temp_files(tmp_path) == []


def test_d4_timeout_leaves_nothing_behind(agent, tmp_path, server, caplog) -> None:
    (tmp_path / "t.bin").write_bytes(b"before")
    stalled = Ranged(blob(2 << 20, 7), accept_ranges=False, stall_after=256 << 10, stall_s=10)
    s = agent.session(tmp_path, LOOP)
    res = s.tool(
        "download",
        {"url": server.route("/slow.bin", stalled), "file_path": "t.bin", "overwrite": True, "timeout": 1},
    )
    assert res.exit_code == 1
    assert res.error_kind["type"] == "timeout" and res.error_kind["op"] == "download"
    assert (tmp_path / "t.bin").read_bytes() == b"before"
    assert temp_files(tmp_path) == []
    gc.collect()  # a stopped pump's outcome is retrieved, not logged as a stray error
    assert [r.getMessage() for r in caplog.records if "never retrieved" in r.getMessage()] == []


def test_d4_cancel_leaves_nothing_behind(agent, tmp_path, server) -> None:
    (tmp_path / "c.bin").write_bytes(b"before")
    stalled = Ranged(blob(2 << 20, 8), accept_ranges=False, stall_after=256 << 10, stall_s=10)
    s = agent.session(tmp_path, LOOP)
    fut = s.tool_async(
        "download", {"url": server.route("/slow.bin", stalled), "file_path": "c.bin", "overwrite": True}
    )
    deadline = time.monotonic() + 30
    while not temp_files(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.02)  # wait until bytes are being staged
    assert temp_files(tmp_path), "the download never started staging"
    fut.cancel()  # type: ignore[attr-defined]
    while s.active_tools() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert s.active_tools() == []
    ends = [e for e in s.events() if e.type == "tool_end"]
    assert ends and ends[-1].data["error_kind"]["type"] == "cancelled"
    assert (tmp_path / "c.bin").read_bytes() == b"before"
    assert temp_files(tmp_path) == []


def test_d2_no_clobbering_without_overwrite(agent, tmp_path, server) -> None:
    (tmp_path / "exists.txt").write_text("mine")
    origin = Ranged(b"theirs")
    url = server.route("/f", origin)
    s = agent.session(tmp_path, LOOP)
    res = s.tool("download", {"url": url, "file_path": "exists.txt"})
    assert res.exit_code == 1 and "overwrite" in res.output
    assert server.hits() == []  # refused before any request
    assert (tmp_path / "exists.txt").read_text() == "mine"
    (tmp_path / "dir").mkdir()
    res = s.tool("download", {"url": url, "file_path": "dir", "overwrite": True})
    assert res.exit_code == 1 and "directory" in res.output
    res = s.tool("download", {"url": url, "file_path": "exists.txt", "overwrite": True})
    assert res.exit_code == 0 and res.metadata["overwritten"] is True
    assert (tmp_path / "exists.txt").read_text() == "theirs"


@pytest.mark.parametrize(
    "bad",
    [
        "ftp://{h}/f",
        "file:///etc/passwd",
        "http://user:pw@{h}/f",
        "http://{h}/f\nX: y",
        "javascript:alert(1)",
        "http:///f",
        "/relative/path",
    ],
)
def test_d2_bad_urls_are_rejected_before_any_request(agent, tmp_path, server, bad) -> None:
    server.route("/f", static(200, "x"))
    s = agent.session(tmp_path, LOOP)
    res = s.tool("download", {"url": bad.format(h=f"127.0.0.1:{server.port}")})
    assert res.exit_code == 1 and res.error_kind["type"] == "invalid_argument"
    assert server.hits() == []
    assert user_files(tmp_path) == []


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
        "LocalHost.",
        "a.localhost",
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
def test_d3_download_refuses_every_loopback_spelling_with_the_guard_closed(
    agent, tmp_path, server, host
) -> None:
    server.route("/f", static(200, "secret"))
    s = agent.session(tmp_path, SessionOptions())
    res = s.tool("download", {"url": f"http://{host}:{server.port}/f"})
    assert res.exit_code == 1 and res.error_kind["type"] == "invalid_argument", res.output
    assert server.hits() == []
    assert user_files(tmp_path) == []


def test_d5_signed_query_parameters_never_reach_metadata_messages_or_events(agent, tmp_path, server) -> None:
    server.route("/signed.bin", Ranged(b"payload"))
    server.route("/go", redirect("/signed.bin?X-Amz-Signature=HOPSECRET&token=HOPTOKEN"))
    s = agent.session(tmp_path, LOOP)
    ok = s.tool(
        "download", {"url": server.url("/go?X-Amz-Signature=SECRET1&Expires=1"), "file_path": "s.bin"}
    )
    bad = s.tool("download", {"url": server.url("/missing?sig=SECRET2"), "file_path": "m.bin"})
    assert ok.exit_code == 0 and bad.exit_code == 1
    assert server.hits("/go")[0].path.endswith("X-Amz-Signature=SECRET1&Expires=1")  # sent as given
    assert ok.metadata["source_anchors"] == [server.url("/go"), server.url("/signed.bin")]
    shown = json.dumps([ok.to_json(), bad.to_json(), [e.to_json() for e in s.events()]])
    for secret in ("SECRET1", "SECRET2", "HOPSECRET", "HOPTOKEN"):
        assert secret not in shown


def test_d2_inferred_names_are_sanitised(agent, tmp_path, server) -> None:
    s = agent.session(tmp_path, LOOP)
    server.route("/cd", Ranged(b"a", disposition='attachment; filename="../../etc/passwd"'))
    server.route("/star", Ranged(b"b", disposition="attachment; filename*=UTF-8''r%C3%A9sum%C3%A9.pdf"))
    server.route("/q", Ranged(b"c"))
    server.route("/dir/", Ranged(b"d"))
    assert s.tool("download", {"url": server.url("/cd")}).metadata["file_path"] == "passwd"
    assert s.tool("download", {"url": server.url("/star")}).metadata["file_path"] == "résumé.pdf"
    assert (
        s.tool("download", {"url": server.url("/q?filename=.hidden%2Freport.csv")}).metadata["file_path"]
        == "report.csv"
    )
    assert s.tool("download", {"url": server.url("/dir/")}).metadata["file_path"] == "download.bin"
    assert (tmp_path / "passwd").read_bytes() == b"a"


def test_d2_name_rules() -> None:
    assert sanitize("..") is None and sanitize("...") is None
    assert sanitize(".a3s") == "a3s"
    assert sanitize("a\x00b\u202e.txt") == "a_b.txt"
    assert sanitize("C:\\Windows\\evil.dll") == "evil.dll"
    long = sanitize("x" * 400 + ".tar.gz")
    assert long is not None and len(long.encode()) <= 255 and long.endswith(".gz")
    assert infer_name(parse_url("https://h.example.com/a/b%2F..%2Fc.txt"), None) == "c.txt"


def test_d4_progress_events_on_long_downloads(agent, tmp_path, server) -> None:
    def trickle(h):  # ~1.2 s of sending: at least one progress tick is certain
        h.send_response(200)
        h.send_header("Content-Length", str(6 * 65536))
        h.end_headers()
        for _ in range(6):
            h.wfile.write(b"z" * 65536)
            h.wfile.flush()
            time.sleep(0.2)

    s = agent.session(tmp_path, LOOP)
    res = s.tool("download", {"url": server.route("/trickle", trickle)})
    assert res.exit_code == 0
    deltas = [e.data["delta"] for e in s.events() if e.type == "tool_output_delta"]
    assert deltas and all("download_progress" in d for d in deltas)
    assert deltas[-1]["download_progress"]["total_bytes"] == 6 * 65536


@pytest.mark.parametrize(
    ("status", "kind", "attempts"), [(404, "tool_error", 1), (503, "transport", 3), (429, "rate_limited", 1)]
)
def test_d4_server_errors_are_typed_and_retried_within_bounds(
    agent, tmp_path, server, status, kind, attempts
) -> None:
    headers = {"Retry-After": "3600"} if status == 429 else {}
    server.route("/e", static(status, "nope", headers))
    s = agent.session(tmp_path, LOOP)
    res = s.tool("download", {"url": server.url("/e"), "file_path": "e.bin"})
    assert res.exit_code == 1 and res.error_kind["type"] == kind
    assert len(server.hits("/e")) == attempts
    assert user_files(tmp_path) == []


def test_d4_a_transient_failure_is_retried(agent, tmp_path, server) -> None:
    calls = []

    def flaky(h):
        calls.append(1)
        if len(calls) == 1:
            send(h, 503, b"busy")
        else:
            send(h, 200, b"fine", content_type="text/plain")

    s = agent.session(tmp_path, LOOP)
    res = s.tool("download", {"url": server.route("/flaky", flaky)})
    assert res.exit_code == 0 and (tmp_path / "flaky").read_bytes() == b"fine"


def test_d1_model_calls_need_confirmation_and_host_direct_does_not(agent, tmp_path, server) -> None:
    server.route("/m", Ranged(b"m"))
    asked = []
    opts = SessionOptions(
        net_allow=("127.0.0.1",),
        permission_policy=PermissionPolicy(allow=["download"]),
        confirmation=lambda req: asked.append(req.tool) or False,
    )
    s = agent.session(tmp_path, opts)
    res = s.model_tool_call("download", {"url": server.url("/m")})
    assert res.exit_code == 1 and res.error_kind["type"] == "confirmation_rejected"
    assert asked == ["download"] and server.hits() == []
    assert s.tool("download", {"url": server.url("/m")}).exit_code == 0


def test_s3_download_is_registered_only_for_writable_local_workspaces(agent, tmp_path) -> None:
    from kernel.workspace import LocalWorkspace

    assert "download" in agent.session(tmp_path).tool_names()
    assert "download" not in agent.session(LocalWorkspace(tmp_path, writable=False)).tool_names()


def test_b6_targets_stay_inside_the_workspace(agent, tmp_path, server) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "link").symlink_to(outside)
    (ws / "inner").mkdir()
    (ws / "alias").symlink_to("inner")
    url = server.route("/f", Ranged(b"data"))
    s = agent.session(ws, LOOP)
    for bad in ("../outside/f.bin", "link/f.bin", "/etc/f.bin", ".a3s/f.bin"):
        res = s.tool("download", {"url": url, "file_path": bad})
        assert res.exit_code == 1 and res.error_kind["type"] == "path_outside_workspace", (bad, res.output)
    assert user_files(outside) == [] and server.hits() == []
    res = s.tool("download", {"url": url, "file_path": "alias/new/deep/f.bin"})
    assert res.exit_code == 0 and res.metadata["file_path"] == "inner/new/deep/f.bin"
    assert (ws / "inner" / "new" / "deep" / "f.bin").read_bytes() == b"data"


def test_d4_writeback_hands_written_regions_to_the_disk_early(tmp_path) -> None:
    """SPEC D-4: pages are queued for the disk while the download runs (the fsync before promotion
    stays the one that decides); where the kernel refuses, the optimisation switches itself off."""
    from tools.download.writeback import Writeback

    fd = os.open(tmp_path / "f.part", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        wb = Writeback(fd, kick_bytes=1 << 20)
        block = os.urandom(256 << 10)
        for i in range(16):
            os.pwrite(fd, block, i * len(block))
            wb.wrote(i * len(block), len(block))
        os.fsync(fd)
        assert (tmp_path / "f.part").read_bytes() == block * 16
        assert wb.kicks == (4 if wb.enabled else 0)
    finally:
        os.close(fd)
    r, w = os.pipe()
    try:
        wb = Writeback(r, kick_bytes=1)
        wb.wrote(0, 10)  # ESPIPE: switched off, never raised
        wb.wrote(10, 10)
        assert not wb.enabled and wb.kicks == 0
    finally:
        os.close(r)
        os.close(w)


def pump_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(PUMP_THREAD)]


@pytest.mark.parametrize("connections", [1, 4])
@pytest.mark.parametrize("end", ["timeout", "cancel"])
def test_d4_pumped_download_stopped_midway_leaves_nothing_behind(
    agent, tmp_path, server, connections, end
) -> None:
    """SPEC D-4, K-5: bodies written straight from the socket by pump threads (one response, or four
    Range segments into one temp file): a timeout or a cancel mid-body stops every pump, removes
    the temp file, leaves the target as it was, and no pump thread outlives the call."""
    (tmp_path / "p.bin").write_bytes(b"before")
    stalled = Ranged(blob(8 << 20, 9), stall_after=256 << 10, stall_s=10)
    url = server.route("/stall.bin", stalled)
    s = agent.session(tmp_path, LOOP)
    bodies = PUMP_STATS["bodies"]
    args = {"url": url, "file_path": "p.bin", "overwrite": True, "connections": connections}
    t0 = time.monotonic()
    if end == "timeout":
        res = s.tool("download", {**args, "timeout": 1})
        assert res.exit_code == 1 and res.error_kind["type"] == "timeout"
    else:
        fut = s.tool_async("download", args)
        deadline = time.monotonic() + 30
        while len(pump_threads()) < connections and time.monotonic() < deadline:
            time.sleep(0.02)  # every pump is reading its stalled body
        assert len(pump_threads()) >= connections
        fut.cancel()  # type: ignore[attr-defined]
        while s.active_tools() and time.monotonic() < deadline:
            time.sleep(0.02)
        ends = [e for e in s.events() if e.type == "tool_end"]
        assert ends and ends[-1].data["error_kind"]["type"] == "cancelled"
    assert time.monotonic() - t0 < 8  # stopped at once, not after the server's 10 s stall
    assert PUMP_STATS["bodies"] - bodies == connections
    assert pump_threads() == []
    assert (tmp_path / "p.bin").read_bytes() == b"before"
    assert temp_files(tmp_path) == []


@pytest.mark.parametrize("connections", [1, 4])
def test_d4_pumped_digest_mismatch_and_over_limit_leave_nothing_behind(
    agent, tmp_path, server, connections
) -> None:
    """SPEC D-2, D-4: through the pump path too, a digest mismatch and a body over ``max_bytes``
    change nothing and leave no temp file."""
    (tmp_path / "k.bin").write_bytes(b"kept")
    origin = Ranged(blob(6 << 20, 10))
    url = server.route("/k.bin", origin)
    s = agent.session(tmp_path, LOOP)
    bodies = PUMP_STATS["bodies"]
    res = s.tool(
        "download",
        {
            "url": url,
            "file_path": "k.bin",
            "overwrite": True,
            "connections": connections,
            "expected_sha256": "1" * 64,
        },
    )
    assert res.exit_code == 1 and "SHA-256 mismatch" in res.output and origin.sha256 in res.output
    assert PUMP_STATS["bodies"] - bodies == connections
    res = s.tool("download", {"url": url, "file_path": "k.bin", "overwrite": True, "max_bytes": 5 << 20})
    assert res.exit_code == 1 and res.error_kind["type"] == "invalid_argument"
    assert (tmp_path / "k.bin").read_bytes() == b"kept"
    assert temp_files(tmp_path) == []
    ok = s.tool(
        "download",
        {
            "url": url,
            "file_path": "k.bin",
            "overwrite": True,
            "connections": connections,
            "expected_sha256": origin.sha256,
        },
    )
    assert ok.exit_code == 0 and ok.metadata["sha256"] == origin.sha256
    assert (tmp_path / "k.bin").read_bytes() == origin.data


def test_d4_a_pumped_body_cut_short_resumes_with_range_and_the_digest_holds(agent, tmp_path, server) -> None:
    """SPEC D-4: the server closing a pumped body early is a transport failure; the bytes already
    on disk stay, the rest comes with Range/If-Range, and the running SHA-256 covers both."""
    data = blob(5 << 20, 11)
    origin = Ranged(data)
    cut: list[int] = []

    def flaky(h):
        if "Range" in h.headers or cut:
            origin(h)
            return
        cut.append(1)  # the first whole-body response breaks off after 2 MiB
        h.send_response(200)
        h.send_header("Content-Length", str(len(data)))
        h.send_header("ETag", '"v1"')
        h.end_headers()
        h.wfile.write(data[: 2 << 20])
        h.wfile.flush()
        h.connection.shutdown(socket.SHUT_RDWR)
        h.close_connection = True

    url = server.route("/r.bin", flaky)
    s = agent.session(tmp_path, LOOP)
    res = s.tool("download", {"url": url, "connections": 1, "expected_sha256": origin.sha256})
    assert res.exit_code == 0, res.output
    assert res.metadata["strategy"] == "sequential" and res.metadata["sha256"] == origin.sha256
    assert (tmp_path / "r.bin").read_bytes() == data
    ranges = [h.headers.get("range") for h in server.hits("/r.bin")]
    assert ranges == ["bytes=0-0", None, f"bytes={2 << 20}-"]
    assert temp_files(tmp_path) == []
