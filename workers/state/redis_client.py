"""The one edge between our code and redis-py (CONVENTIONS §9): client construction and errors.

``make_client(url)`` builds a client with bounded timeouts (a dead server costs seconds, not
minutes) and a short retry on connection errors. ``redis_errors(op)`` translates every exception
class redis-py defines into a kernel error, ``raise … from exc``:

- the server is unreachable, slow, loading, read-only (fail-over), out of memory, or the cluster is
  re-sharding → ``Transport(op="redis")``: transient, the caller may retry or degrade;
- everything else (bad credentials, a script or data error, a protocol violation) → ``KernelFault``:
  a broken store or a bug, raised to the host, never retried.

``tests/workers/test_state_redis_client.py`` checks the table covers every class in
``redis.exceptions``, so a redis-py upgrade that adds one fails loudly.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import redis
from redis import exceptions as rx
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from kernel.errors import KernelFault, Transport

SOCKET_TIMEOUT_S = 5.0  # must exceed the longest XREAD BLOCK (events.MAX_BLOCK_MS)
CONNECT_TIMEOUT_S = 2.0
HEALTH_CHECK_INTERVAL_S = 30
MAX_CONNECTIONS = 64
CONNECT_RETRIES = 2

# Checked first: configuration errors that happen to subclass ConnectionError or ResponseError.
FAULT_ERRORS: tuple[type[BaseException], ...] = (
    rx.AuthenticationError,
    rx.AuthorizationError,
    rx.AuthenticationWrongNumberOfArgsError,
    rx.ExternalAuthProviderError,
    rx.NoPermissionError,
)
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    rx.ConnectionError,  # includes BusyLoadingError, MaxConnectionsError
    rx.TimeoutError,
    rx.ReadOnlyError,
    rx.OutOfMemoryError,
    rx.TryAgainError,
    rx.ClusterDownError,  # includes MasterDownError
    rx.AskError,  # includes MovedError: slots are moving
)
# Everything else that redis-py can raise at us.
OTHER_ERRORS: tuple[type[BaseException], ...] = (
    rx.RedisError,
    rx.RedisClusterException,
    rx.ChildDeadlockedError,
    rx.IncorrectPolicyType,
)


def map_redis_error(exc: BaseException, op: str = "redis") -> Exception:
    """The kernel error for a redis-py exception (total over ``redis.exceptions``)."""
    if isinstance(exc, FAULT_ERRORS):
        return KernelFault(f"{op}: redis rejected our credentials or permissions: {exc}")
    if isinstance(exc, TRANSIENT_ERRORS):
        return Transport(f"{op}: redis unavailable: {type(exc).__name__}: {exc}", op="redis")
    return KernelFault(f"{op}: redis error {type(exc).__name__}: {exc}")


@contextlib.contextmanager
def redis_errors(op: str = "redis") -> Iterator[None]:
    try:
        yield
    except OTHER_ERRORS as exc:  # every class in TRANSIENT/FAULT subclasses one of these
        raise map_redis_error(exc, op) from exc


def make_client(
    url: str,
    *,
    socket_timeout_s: float = SOCKET_TIMEOUT_S,
    connect_timeout_s: float = CONNECT_TIMEOUT_S,
    max_connections: int = MAX_CONNECTIONS,
) -> redis.Redis:
    """A ``decode_responses`` client (str in, str out) with bounded timeouts and a short retry."""
    return redis.Redis.from_url(
        url,
        decode_responses=True,
        socket_timeout=socket_timeout_s,
        socket_connect_timeout=connect_timeout_s,
        health_check_interval=HEALTH_CHECK_INTERVAL_S,
        max_connections=max_connections,
        retry=Retry(ExponentialBackoff(cap=0.2, base=0.01), CONNECT_RETRIES),
    )
