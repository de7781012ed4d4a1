"""Name resolution for the safe transport, behind a protocol so tests decide the answers (SPEC D-3).

The guard asks a ``Resolver`` for *every* address of a name and connects only to answers it has
checked; nothing else in the transport resolves names. ``SystemResolver`` asks the operating
system (``getaddrinfo`` in threads of its own, ``DNS_THREADS`` per process, bounded by
``RESOLVE_TIMEOUT_S``);
``StaticResolver`` answers from a table, so a test can make ``internal.test`` resolve to
``10.0.0.5`` and watch the guard refuse it without any packet leaving the machine.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import socket
import threading
from collections.abc import Mapping, Sequence
from typing import Protocol

from kernel.errors import Timeout, Transport

RESOLVE_TIMEOUT_S = 10.0
# getaddrinfo cannot be interrupted: a lookup that outlives its timeout holds its thread until the
# C library gives up (tens of seconds against a name server that never answers). In the loop's
# default executor (6 threads on 2 cores) six such lookups — names the model chose — stopped every
# ``to_thread`` of the process (git, bash, search, conversions); now they can only delay lookups.
DNS_THREADS = 16
_POOL_LOCK = threading.Lock()
_POOL: tuple[int, concurrent.futures.ThreadPoolExecutor] | None = None


def _dns_pool() -> concurrent.futures.ThreadPoolExecutor:
    """The process's lookup threads (a forked worker makes its own: the parent's threads are gone)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or _POOL[0] != os.getpid():
            _POOL = (
                os.getpid(),
                concurrent.futures.ThreadPoolExecutor(DNS_THREADS, thread_name_prefix="a3s-dns"),
            )
        return _POOL[1]


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
                # a lookup still queued at the timeout is cancelled with its future, never run
                infos = await loop.run_in_executor(
                    _dns_pool(),
                    lambda: socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP),
                )
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
