"""Is any worker consuming the fleet's queue? A run (``CeleryRunner.check_workers``) or a CLI
(``require_workers``, before a plan starts) fails fast with one line naming the queue and the
broker (credentials masked) instead of waiting silently for a worker that is not there (issue 13
item 4). Presence is read fresh from Redis each time: a worker's heartbeat key, not a cache.
"""

from __future__ import annotations

import time

from redis import exceptions as rx

from config.settings import Settings
from kernel.errors import Transport

# No live worker for the queue when a run starts: look again for this long (a worker beats every
# second; after a Redis restart it re-registers within one beat), then fail the run.
NO_WORKER_GRACE_S = 3.0
NO_WORKER_POLL_S = 0.25
CONNECTION_ERRORS = (rx.ConnectionError, rx.TimeoutError, OSError)


def broker_text(settings: Settings) -> str:
    from workers.app import broker_url, redact_url

    return redact_url(broker_url(settings))


def no_worker_error(settings: Settings) -> Transport:
    broker = broker_text(settings)
    return Transport(
        f"fleet: no worker consumes queue '{settings.queue}' on broker {broker} "
        f"(start one: a3s-fleet worker --broker {broker} --queues {settings.queue})",
        op="dispatch",
    )


def require_workers(settings: Settings) -> None:
    """Synchronous ``CeleryRunner.check_workers`` for a CLI: fail before a plan starts."""
    from workers.presence import count_live_consumers
    from workers.protocol import FleetKeys
    from workers.runtime import state_url
    from workers.state import make_client

    client = make_client(state_url(settings))
    try:
        deadline = time.monotonic() + NO_WORKER_GRACE_S
        while not count_live_consumers(client, FleetKeys(), settings.queue, settings.worker_lost_after_s):
            if time.monotonic() >= deadline:
                raise no_worker_error(settings)
            time.sleep(NO_WORKER_POLL_S)
    except CONNECTION_ERRORS as exc:
        raise Transport(f"fleet: redis unreachable at {broker_text(settings)}: {exc}", op="redis") from exc
    finally:
        client.close()
