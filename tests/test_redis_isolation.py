"""The tests never touch data they did not create (issue 13 item 6): they run their own
``redis-server``, and a server given through ``A3S_TEST_REDIS_URL`` is used only when empty."""

from __future__ import annotations

from collections.abc import Callable

import redis

from tests.redis_server import ENV_URL, check_given_url, given_url


def test_the_session_redis_is_private_unless_one_was_given(redis_urls: Callable[[int], str]) -> None:
    url = redis_urls(3)
    if given_url() is None:
        assert ":6379/" not in url  # never the well-known port someone else's Redis listens on
    client = redis.Redis.from_url(url)
    try:
        assert client.ping()
    finally:
        client.close()


def test_a_given_non_empty_database_is_refused_and_left_alone(redis_urls: Callable[[int], str]) -> None:
    url = redis_urls(4)
    client = redis.Redis.from_url(url)
    try:
        client.set("someone-elses-data", "precious")
        problem = check_given_url(url)
        assert problem is not None and ENV_URL in problem and "1 keys" in problem
        assert client.get("someone-elses-data") == b"precious"  # refused, never flushed
        client.delete("someone-elses-data")
        assert check_given_url(url) is None
    finally:
        client.close()


def test_an_unreachable_given_url_is_a_clear_refusal() -> None:
    from tests.redis_server import free_port

    problem = check_given_url(f"redis://127.0.0.1:{free_port()}/0")
    assert problem is not None and "not reachable" in problem
