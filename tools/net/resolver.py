"""Name resolution for the safe transport, behind a protocol so tests decide the answers (SPEC D-3).

The guard asks a ``Resolver`` for *every* address of a name and connects only to answers it has
checked; nothing else in the transport resolves names. ``SystemResolver`` asks the operating
system (``getaddrinfo`` in the loop's executor, bounded by ``RESOLVE_TIMEOUT_S``);
``StaticResolver`` answers from a table, so a test can make ``internal.test`` resolve to
``10.0.0.5`` and watch the guard refuse it without any packet leaving the machine.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Mapping, Sequence
from typing import Protocol

from kernel.errors import Timeout, Transport

RESOLVE_TIMEOUT_S = 10.0


class Resolver(Protocol):
    async def resolve(self, host: str, port: int) -> list[str]:
        """Every address ``host`` resolves to (strings), in the resolver's order."""
        ...


class SystemResolver:
    def __init__(self, timeout_s: float = RESOLVE_TIMEOUT_S) -> None:
        self.timeout_s = timeout_s

    async def resolve(self, host: str, port: int) -> list[str]:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.timeout_s):
                infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
        except TimeoutError:
            raise Timeout(
                f"resolving {host} took longer than {self.timeout_s:.0f}s",
                op="dns",
                duration_ms=int(self.timeout_s * 1000),
            ) from None
        except socket.gaierror as exc:
            raise Transport(f"could not resolve host {host}: {exc.strerror or exc}", op="dns") from None
        out: list[str] = []
        for _family, _type, _proto, _canon, sockaddr in infos:
            addr = str(sockaddr[0])
            if addr not in out:
                out.append(addr)
        return out


class StaticResolver:
    """Answers from a table (tests, pinned deployments); unknown names do not resolve."""

    def __init__(self, table: Mapping[str, Sequence[str]]) -> None:
        self.table = {k.lower().rstrip("."): list(v) for k, v in table.items()}
        self.asked: list[str] = []

    async def resolve(self, host: str, port: int) -> list[str]:
        self.asked.append(host)
        answers = self.table.get(host.lower().rstrip("."))
        if answers is None:
            raise Transport(f"could not resolve host {host}", op="dns")
        return list(answers)
