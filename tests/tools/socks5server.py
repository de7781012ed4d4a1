"""A tiny loopback SOCKS5 proxy (RFC 1928, CONNECT only) for the proxy tests.

Without ``credentials`` it accepts "no authentication"; with ``credentials=(user, password)`` it
requires username/password authentication (RFC 1929): a client that does not offer it gets "no
acceptable methods", wrong credentials get a failure status, and neither reaches CONNECT.
``auth_attempts`` logs the ``(user, password)`` pairs received (decoded as UTF-8).

It runs an asyncio server on its own loop in a thread. Every CONNECT is logged as the client
asked for it (``connects``: host as sent — a name stays a name — and port) and is then tunnelled to
``upstream``, a loopback server the test started, *whatever* the requested host: so a test can name
a public-looking host and no traffic ever leaves the machine. ``accepted`` counts TCP connections,
so a test can assert that the proxy "saw nothing".
"""

from __future__ import annotations

import asyncio
import contextlib
import socket

from tests.tools.loopback_proxy import LoopbackProxy, pipe


class Socks5Server(LoopbackProxy):
    def __init__(
        self,
        upstream: tuple[str, int],
        host: str = "127.0.0.1",
        *,
        credentials: tuple[str, str] | None = None,
    ) -> None:
        self.credentials = credentials
        self.connects: list[tuple[str, int]] = []
        self.auth_attempts: list[tuple[str, str]] = []
        super().__init__(upstream, host)

    def url(self, host: str | None = None, scheme: str = "socks5", userinfo: str = "") -> str:
        """``scheme://[userinfo@]host:port`` (``userinfo`` as it should appear in the URL)."""
        at = f"{userinfo}@" if userinfo else ""
        return f"{scheme}://{at}{host or self.host}:{self.port}"

    async def _authenticate(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """RFC 1929: ``VER=1 ULEN UNAME PLEN PASSWD`` → ``VER=1 STATUS`` (0 = success)."""
        version, ulen = await reader.readexactly(2)
        user = await reader.readexactly(ulen)
        plen = (await reader.readexactly(1))[0]
        password = await reader.readexactly(plen)
        attempt = (user.decode("utf-8", "replace"), password.decode("utf-8", "replace"))
        self.auth_attempts.append(attempt)
        ok = version == 1 and attempt == self.credentials
        writer.write(b"\x01\x00" if ok else b"\x01\x01")
        await writer.drain()
        return ok

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        try:
            version, count = await reader.readexactly(2)
            methods = await reader.readexactly(count)
            wanted = 0 if self.credentials is None else 2  # no auth | username/password
            if version != 5 or wanted not in methods:
                writer.write(b"\x05\xff")
                return
            writer.write(bytes([5, wanted]))
            if wanted == 2 and not await self._authenticate(reader, writer):
                return
            version, command, _, atyp = await reader.readexactly(4)
            if atyp == 1:
                host = socket.inet_ntop(socket.AF_INET, await reader.readexactly(4))
            elif atyp == 3:
                host = (await reader.readexactly((await reader.readexactly(1))[0])).decode("idna")
            else:
                host = socket.inet_ntop(socket.AF_INET6, await reader.readexactly(16))
            port = int.from_bytes(await reader.readexactly(2), "big")
            self.connects.append((host, port))
            if command != 1:  # only CONNECT
                writer.write(b"\x05\x07\x00\x01\x00\x00\x00\x00\x00\x00")
                return
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
            writer.write(b"\x05\x00\x00\x01\x7f\x00\x00\x01" + self.upstream[1].to_bytes(2, "big"))
            await writer.drain()
            await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()
