"""A loopback HTTP server for the network-tool tests: routes, request log, real Range support.

``LoopbackServer(host)`` binds a free port on a loopback address (``127.0.0.1`` by default; any
127/8 address works on Linux, which gives a *second* server to redirect to). Every request is
logged (method, path, headers) before its handler runs, so a test can assert a server "saw
nothing". ``ranged(data)`` serves bytes with ``Accept-Ranges``, strong ETag, ``If-Range`` and
single ``Range`` requests (stdlib ``http.server`` ignores Range); knobs make it lie about ranges,
change the validator, stall or fail, so each download failure path can be provoked.
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Handler = Callable[[BaseHTTPRequestHandler], None]
_RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]


class LoopbackServer:
    def __init__(self, host: str = "127.0.0.1") -> None:
        self.routes: dict[str, Handler] = {}
        self.seen: list[Seen] = []
        self._lock = threading.Lock()
        server = self

        class _H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _dispatch(self) -> None:
                with server._lock:
                    server.seen.append(
                        Seen(self.command, self.path, {k.lower(): v for k, v in self.headers.items()})
                    )
                route = server.routes.get(self.path.split("?", 1)[0])
                if route is None:
                    send(self, 404, b"not found")
                    return
                try:
                    route(self)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            do_GET = do_HEAD = do_POST = _dispatch

        self.httpd = ThreadingHTTPServer((host, 0), _H)
        self.httpd.daemon_threads = True
        self.host = host
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()

    def url(self, path: str = "/", host: str | None = None) -> str:
        return f"http://{host or self.host}:{self.port}{path}"

    def route(self, path: str, handler: Handler) -> str:
        self.routes[path] = handler
        return self.url(path)

    def hits(self, path: str | None = None) -> list[Seen]:
        with self._lock:
            return [s for s in self.seen if path is None or s.path.split("?", 1)[0] == path]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def send(
    h: BaseHTTPRequestHandler,
    status: int,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
    content_type: str = "text/plain; charset=utf-8",
) -> None:
    h.send_response(status)
    h.send_header("Content-Type", content_type)
    h.send_header("Content-Length", str(len(body)))
    for k, v in (headers or {}).items():
        h.send_header(k, v)
    h.end_headers()
    if h.command != "HEAD":
        h.wfile.write(body)


def static(
    status: int,
    body: bytes | str = b"",
    headers: dict[str, str] | None = None,
    content_type: str = "text/plain; charset=utf-8",
) -> Handler:
    data = body.encode() if isinstance(body, str) else body
    return lambda h: send(h, status, data, headers, content_type)


def redirect(location: str, status: int = 302) -> Handler:
    return lambda h: send(h, status, b"", {"Location": location})


@dataclass
class Ranged:
    """Bytes served with Range support; every knob is a way the origin can misbehave."""

    data: bytes
    etag: str | None = '"v1"'
    last_modified: str | None = None
    accept_ranges: bool = True
    content_type: str = "application/octet-stream"
    disposition: str | None = None
    declare_length: bool = True
    bad_content_range: bool = False  # answer a different range than asked
    ignore_range_after: int | None = None  # after N range requests, answer 200 with the full body
    stall_after: int | None = None  # stop sending after this many bytes (and hang)
    stall_s: float = 30.0
    fail_status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    range_requests: int = 0
    full_requests: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    def __call__(self, h: BaseHTTPRequestHandler) -> None:
        if self.fail_status is not None:
            send(h, self.fail_status, b"failure", self.headers)
            return
        size = len(self.data)
        common = dict(self.headers)
        if self.etag:
            common["ETag"] = self.etag
        if self.last_modified:
            common["Last-Modified"] = self.last_modified
        if self.accept_ranges:
            common["Accept-Ranges"] = "bytes"
        if self.disposition:
            common["Content-Disposition"] = self.disposition
        rng = h.headers.get("Range")
        if_range = h.headers.get("If-Range")
        m = _RANGE.match(rng or "") if self.accept_ranges else None
        with self._lock:
            use_range = m is not None and (if_range is None or if_range == self.etag)
            if (
                use_range
                and self.ignore_range_after is not None
                and self.range_requests >= self.ignore_range_after
            ):
                use_range = False
            if use_range:
                self.range_requests += 1
            else:
                self.full_requests += 1
        if use_range and m is not None:
            start = int(m.group(1))
            end = min(int(m.group(2)) if m.group(2) else size - 1, size - 1)
            if start >= size:
                send(h, 416, b"", {"Content-Range": f"bytes */{size}"})
                return
            if self.bad_content_range:
                start, end = max(0, start - 1), end
            body = self.data[start : end + 1]
            common["Content-Range"] = f"bytes {start}-{end}/{size}"
            self._write(h, 206, body, common)
            return
        self._write(h, 200, self.data, common)

    def _write(self, h: BaseHTTPRequestHandler, status: int, body: bytes, headers: dict[str, str]) -> None:
        h.send_response(status)
        h.send_header("Content-Type", self.content_type)
        if self.declare_length:
            h.send_header("Content-Length", str(len(body)))
        else:
            h.send_header("Connection", "close")
        for k, v in headers.items():
            h.send_header(k, v)
        h.end_headers()
        if h.command == "HEAD":
            return
        if self.stall_after is not None and len(body) > self.stall_after:
            h.wfile.write(body[: self.stall_after])
            h.wfile.flush()
            time.sleep(self.stall_s)
            return
        view = memoryview(body)
        for i in range(0, len(body), 1 << 20):
            h.wfile.write(view[i : i + (1 << 20)])
        if not self.declare_length:
            h.close_connection = True
