"""The redis edge (CONVENTIONS §9): every redis-py exception class maps to a kernel error."""

from __future__ import annotations

import inspect

import pytest
import redis.exceptions as rx

from kernel.errors import KernelFault, Transport
from workers.state.redis_client import (
    FAULT_ERRORS,
    OTHER_ERRORS,
    TRANSIENT_ERRORS,
    make_client,
    map_redis_error,
    redis_errors,
)

REDIS_EXCEPTIONS = sorted(
    (cls for _, cls in inspect.getmembers(rx, inspect.isclass) if issubclass(cls, BaseException)),
    key=lambda c: c.__name__,
)
EXPECTED_TRANSIENT = {
    "AskError",
    "BusyLoadingError",
    "ClusterDownError",
    "ConnectionError",
    "MasterDownError",
    "MaxConnectionsError",
    "MovedError",
    "OutOfMemoryError",
    "ReadOnlyError",
    "TimeoutError",
    "TryAgainError",
}


def build(cls: type[BaseException]) -> BaseException:
    if issubclass(cls, rx.AskError):  # parses "slot host:port" from the server's reply
        return cls("3999 127.0.0.1:6381")
    return cls("boom")


def test_k8_every_redis_exception_class_is_caught_and_mapped() -> None:
    assert len(REDIS_EXCEPTIONS) >= 30
    transient = set()
    for cls in REDIS_EXCEPTIONS:
        assert issubclass(cls, OTHER_ERRORS), f"{cls.__name__} would escape redis_errors()"
        with pytest.raises((Transport, KernelFault)) as info:
            with redis_errors("test"):
                raise build(cls)
        assert info.value.__cause__ is not None
        if isinstance(info.value, Transport):
            assert info.value.to_kind() == {"type": "transport", "op": "redis"}
            transient.add(cls.__name__)
    assert transient == EXPECTED_TRANSIENT


def test_k8_credentials_problems_are_faults_not_retryable_transport() -> None:
    for cls in FAULT_ERRORS:
        assert isinstance(map_redis_error(build(cls)), KernelFault)
    assert all(issubclass(c, rx.RedisError) for c in TRANSIENT_ERRORS)


def test_k8_a_refused_connection_is_transport_quickly() -> None:
    client = make_client("redis://127.0.0.1:1/0", connect_timeout_s=0.2, socket_timeout_s=0.2)
    with pytest.raises(Transport), redis_errors():
        client.ping()
