"""Back ends for the state test suites (CONVENTIONS §14): the same behavioural tests run on the
in-memory store and on Redis semantics via ``fakeredis`` (its Lua engine runs our scripts).

``fakeredis`` is a test dependency; it is imported only when ``fakeredis_store`` is called.
"""

from __future__ import annotations

from kernel.clock import Clock
from kernel.state import MemoryStateStore
from workers.state import RedisStateStore

BACKENDS = ("memory", "fakeredis")


def fakeredis_store(clock: Clock | None = None, *, prefix: str = "t") -> RedisStateStore:
    import fakeredis

    client = fakeredis.FakeRedis(server=fakeredis.FakeServer(), decode_responses=True)
    return RedisStateStore(client, prefix=prefix, clock=clock)


def make_store(backend: str, clock: Clock | None = None) -> MemoryStateStore | RedisStateStore:
    if backend == "memory":
        return MemoryStateStore(clock=clock)
    if backend == "fakeredis":
        return fakeredis_store(clock)
    raise ValueError(f"unknown state backend {backend!r}")
