"""A tiny loopback HTTP proxy with optional Basic authentication, for the proxy tests.

It runs an asyncio server on its own loop in a thread and takes one request per connection:

- ``CONNECT host:port`` (an https target) is answered ``200`` and tunnelled;
- an absolute-form request (``GET http://host/path``, a plain-http target) is forwarded in origin
  form, with ``Connection: close``, and the answer relayed until the upstream closes.

Either way the bytes go to ``upstream``, a loopback server the test started, *whatever* host was
asked for: a test can name a public-looking host and no traffic leaves the machine. With
``credentials`` set, a request without the matching ``Proxy-Authorization: Basic`` gets ``407``
(``Proxy-Authenticate: Basic``) and is not forwarded. ``requests`` logs ``(method, target,
Proxy-Authorization or None)`` as received; ``accepted`` counts TCP connections.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib

from tests.tools.loopback_proxy import LoopbackProxy, pipe

MAX_HEAD_BYTES = 64 * 1024


class HttpProxy(LoopbackProxy):
    def __init__(
        self,
        upstream: tuple[str, int],
        *,
        credentials: tuple[str, str] | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        self.credentials = credentials
        self.requests: list[tuple[str, str, str | None]] = []
        super().__init__(upstream, host)

    def url(self, userinfo: str = "", host: str | None = None) -> str:
        """``http://[userinfo@]host:port`` (``userinfo`` as it should appear in the URL)."""
        at = f"{userinfo}@" if userinfo else ""
        return f"http://{at}{host or self.host}:{self.port}"

    def _authorized(self, header: str | None) -> bool:
        if self.credentials is None:
            return True
        user, password = self.credentials
        expected = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        return header == expected

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            if len(head) > MAX_HEAD_BYTES:
                return
            lines = head.decode("latin-1").split("\r\n")
            method, target, version = lines[0].split(" ", 2)
            headers = [line.split(":", 1) for line in lines[1:] if ":" in line]
            auth = next((v.strip() for k, v in headers if k.strip().lower() == "proxy-authorization"), None)
            self.requests.append((method, target, auth))
            if not self._authorized(auth):
                writer.write(
                    b"HTTP/1.1 407 Proxy Authentication Required\r\n"
                    b'Proxy-Authenticate: Basic realm="a3s-test"\r\n'
                    b"Content-Length: 0\r\nConnection: close\r\n\r\n"
                )
                await writer.drain()
                return
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
            if method == "CONNECT":
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                await writer.drain()
            else:
                path = "/" + target.split("://", 1)[-1].split("/", 1)[-1] if "://" in target else target
                kept = [
                    f"{k}:{v}"
                    for k, v in headers
                    if k.strip().lower() not in ("proxy-authorization", "connection", "proxy-connection")
                ]
                forwarded = [f"{method} {path} {version}", *kept, "Connection: close", "", ""]
                up_writer.write("\r\n".join(forwarded).encode("latin-1"))
                await up_writer.drain()
            await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, OSError, ValueError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()
