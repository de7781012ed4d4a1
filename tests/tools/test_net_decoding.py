"""Compressed bodies are decoded within the body limit (SPEC D-3, W-6; docs/network.md).

A response's ``Content-Encoding`` is the server's choice: a page of a few hundred bytes can carry
gzip layered on gzip that inflates to a gigabyte in one decompression step. The limit of
``web_fetch`` (5 MiB), of a search engine page or of a page the headless tier routes must hold
for the decoded bytes *while they are decoded*, not after a chunk has inflated in memory.
"""

from __future__ import annotations

import time
import tracemalloc
import zlib

import pytest

from kernel.options import SessionOptions
from tests.tools.netserver import LoopbackServer, static

LOOP = SessionOptions(net_allow=("127.0.0.1",))


def _gzip(data: bytes) -> bytes:
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    return c.compress(data) + c.flush()


def _layered_zeros(size: int, layers: int) -> bytes:
    """``size`` zero bytes gzipped ``layers`` times, built without holding ``size`` bytes."""
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = b"\0" * (1 << 20)
    out = [c.compress(block) for _ in range(size >> 20)]
    body = b"".join(out) + c.flush()
    for _ in range(layers - 1):
        body = _gzip(body)
    return body


@pytest.fixture()
def server():
    srv = LoopbackServer()
    yield srv
    srv.close()


def test_w6_d3_a_layered_gzip_bomb_stops_at_the_limit_without_inflating(agent, tmp_path, server) -> None:
    bomb = _layered_zeros(1 << 30, 2)  # 1 GiB of zeros in about a kilobyte
    assert len(bomb) < 16 << 10
    url = server.route("/bomb", static(200, bomb, {"Content-Encoding": "gzip, gzip"}))
    s = agent.session(tmp_path, LOOP)
    tracemalloc.start()
    try:
        res = s.tool("web_fetch", {"url": url})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert res.exit_code != 0 and res.error_kind is not None
    assert res.error_kind["type"] == "invalid_argument"
    assert "larger than the 5242880-byte limit" in res.error_kind["message"]
    assert peak < 64 << 20, f"decoding peaked at {peak >> 20} MiB for a 5 MiB limit"


def _raw_deflate(data: bytes) -> bytes:
    c = zlib.compressobj(6, zlib.DEFLATED, -15)
    return c.compress(data) + c.flush()


@pytest.mark.parametrize(
    ("encoding", "encode"),
    [
        ("gzip", _gzip),
        ("x-gzip", _gzip),
        ("deflate", zlib.compress),  # zlib-wrapped, as RFC 9110 says
        ("deflate", _raw_deflate),  # what some servers send instead
        ("gzip, gzip", lambda b: _gzip(_gzip(b))),
        ("identity", lambda b: b),
    ],
    ids=["gzip", "x-gzip", "deflate-zlib", "deflate-raw", "gzip-twice", "identity"],
)
def test_w6_d3_compressed_pages_still_decode_whole(agent, tmp_path, server, encoding, encode) -> None:
    text = "".join(f"line {i}: the page's own words\n" for i in range(20000))  # ~600 KiB
    body = encode(text.encode())
    url = server.route("/p", static(200, body, {"Content-Encoding": encoding}))
    res = agent.session(tmp_path, LOOP).tool("web_fetch", {"url": url, "max_chars": 100000})
    assert res.exit_code == 0, res.output
    assert res.output.startswith("line 0: the page's own words\n")
    assert res.metadata["range"]["total_chars"] == len(text)


def test_w6_d3_a_corrupt_gzip_body_is_a_typed_failure(agent, tmp_path, server) -> None:
    url = server.route(
        "/bad", static(200, b"\x1f\x8b\x08\x00garbage-not-deflate", {"Content-Encoding": "gzip"})
    )
    res = agent.session(tmp_path, LOOP).tool("web_fetch", {"url": url})
    assert res.exit_code != 0 and res.error_kind is not None
    assert res.error_kind["type"] in ("transport", "invalid_argument")


# A stream that ends (or never produces output) while the server keeps sending: zlib hands every
# byte after the end to ``unused_data`` one copy at a time, so an endless tail grew memory without
# bound and cost quadratic CPU on the event loop — 256 MiB of tail took 513 MiB and ran 49 s past
# a 20 s timeout. Empty deflate blocks decode to nothing and ran until the deadline.
_EMPTY_STORED_BLOCK = b"\x00\x00\x00\xff\xff"  # a non-final stored deflate block of length 0


def _streaming(head: bytes, tail_unit: bytes, tail_bytes: int, encoding: str):
    """A handler sending ``head``, then ``tail_unit`` repeated to ``tail_bytes``, then closing."""

    def handler(h) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "text/plain; charset=utf-8")
        h.send_header("Content-Encoding", encoding)
        h.send_header("Connection", "close")
        h.end_headers()
        block = tail_unit * max(1, (1 << 20) // len(tail_unit))
        try:
            h.wfile.write(head)
            for _ in range(tail_bytes // len(block)):
                h.wfile.write(block)
        except OSError:
            pass  # the client stopped reading: what the fix does
        h.close_connection = True

    return handler


@pytest.mark.parametrize(
    ("head", "unit", "encoding"),
    [
        (_gzip(b"the page"), b"\0", "gzip"),  # junk after the gzip member
        (_gzip(b"the page"), _gzip(b"another member "), "gzip"),  # more gzip members
        (b"\x78\x9c", _EMPTY_STORED_BLOCK, "deflate"),  # a zlib stream of empty blocks
    ],
    ids=["gzip-then-junk", "gzip-members", "empty-deflate-blocks"],
)
def test_w6_d3_a_compressed_body_that_never_ends_stops_at_the_limit(
    agent, tmp_path, server, head, unit, encoding
) -> None:
    url = server.route("/tail", _streaming(head, unit, 128 << 20, encoding))
    s = agent.session(tmp_path, LOOP)
    started = time.monotonic()
    tracemalloc.start()
    try:
        res = s.tool("web_fetch", {"url": url, "timeout": 60})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    took = time.monotonic() - started
    assert res.exit_code != 0 and res.error_kind is not None, res.output
    assert res.error_kind["type"] == "invalid_argument", res.error_kind
    assert "larger than the 5242880-byte limit" in res.error_kind["message"]
    assert peak < 64 << 20, f"decoding peaked at {peak >> 20} MiB for a 5 MiB limit"
    assert took < 10, f"took {took:.1f} s"  # stopped after ~5 MiB, not at the end of the stream


def test_w6_d3_a_tail_inside_a_layer_is_bounded_too(agent, tmp_path, server) -> None:
    # The outer gzip inflates 64 MiB of zeros behind the inner stream's end (about 64 KiB sent).
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    inner = [c.compress(_gzip(b"the page"))]
    inner += [c.compress(b"\0" * (1 << 20)) for _ in range(64)]
    body = b"".join(inner) + c.flush()
    url = server.route("/nested", static(200, body, {"Content-Encoding": "gzip, gzip"}))
    s = agent.session(tmp_path, LOOP)
    tracemalloc.start()
    try:
        res = s.tool("web_fetch", {"url": url, "timeout": 60})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert res.exit_code != 0 and res.error_kind is not None, res.output
    assert "larger than the 5242880-byte limit" in res.error_kind["message"]
    assert peak < 64 << 20, f"decoding peaked at {peak >> 20} MiB for a 5 MiB limit"


def test_w6_d3_a_short_tail_after_the_stream_is_ignored(agent, tmp_path, server) -> None:
    # What browsers do with a stray newline or a second member: the first stream is the page.
    body = _gzip(b"the page") + b"\r\n" + _gzip(b"ignored member")
    url = server.route("/short", static(200, body, {"Content-Encoding": "gzip"}))
    res = agent.session(tmp_path, LOOP).tool("web_fetch", {"url": url})
    assert res.exit_code == 0, res.output
    assert res.output == "the page"
