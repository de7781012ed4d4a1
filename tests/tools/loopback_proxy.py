"""What the loopback proxies of the tests share (``socks5server.Socks5Server``,
``httpproxy.HttpProxy``): an asyncio server on its own loop in a thread, bound to a free port, that
tunnels to ``upstream`` — a loopback server the test started — and closes every connection with it.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import threading


class LoopbackProxy(abc.ABC):
    """Subclasses implement ``_client`` (one accepted connection) and log what they saw."""

    def __init__(self, upstream: tuple[str, int], host: str) -> None:
        self.upstream = upstream
        self.host = host
        self.accepted = 0
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._closed = False
        ready = threading.Event()

        def serve() -> None:
            asyncio.set_event_loop(self._loop)
            self._server = self._loop.run_until_complete(asyncio.start_server(self._client, host, 0))
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=serve, daemon=True)
        self._thread.start()
        ready.wait(10)
        assert self._server is not None
        self.port = self._server.sockets[0].getsockname()[1]

    @abc.abstractmethod
    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve one accepted connection (each proxy speaks its own protocol)."""

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True

        async def stop() -> None:
            assert self._server is not None
            self._server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy ``reader`` to ``writer`` until EOF, then close ``writer``."""
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    finally:
        with contextlib.suppress(Exception):
            writer.close()
