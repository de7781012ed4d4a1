"""Worker presence, and the jobs of a lost worker handed back at once (SPEC F-1, F-3; issues 13.4, 15.8).

Every fleet worker (the app of ``workers.app.make_app``, whatever started it) runs ``PresenceStep``,
a consumer bootstep that calls ``PresenceKeeper.tick`` every ``PRESENCE_INTERVAL_S`` on the worker's
own timer. A tick:

1. **beats**: writes the worker's presence record (``FleetKeys.worker``: queues, pid and the
   delivery tags of the messages it holds — reserved or running) and its score in the ``workers``
   and ``consumers:<queue>`` sorted sets (score: the beat, ms). A dispatcher reads
   ``consumers:<queue>`` before it sends a run's jobs — no live consumer, no run (issue 13 item 4);
2. **buries** workers whose last beat is older than ``worker_lost_after_s`` (a SIGKILLed worker, a
   lost machine): they leave the sets, and their record expires on its own;
3. **redelivers orphans**: a message of a queue this worker consumes that has sat in kombu's
   ``unacked`` hash for longer than ``worker_lost_after_s`` and that no live worker's record holds
   belonged to a worker that is gone. Without this, Redis hands it back only after the visibility
   timeout (1800 s). A tag is restored on the *second* consecutive tick that finds it orphaned (a
   message acknowledged between a holder's beat and our look is not a false orphan), through
   kombu's own ``QoS.restore_by_tag`` (a ``WATCH`` transaction: a message acknowledged meanwhile is
   not restored), so it goes back to the front of its queue, marked redelivered.

Why this is safe: a live worker reports every message it holds at every beat, and a message must be
older than ``worker_lost_after_s`` — by then its holder, if alive, has beaten since it received it —
so only the messages of silent workers qualify. A worker merely *stalled* for that long (a frozen
machine) is treated as lost: its jobs run again elsewhere, which at-least-once delivery allows — the
step store recovers or fences them (F-3), and a redelivered read-only call simply runs twice.

Every consumer of a fleet queue must run this step (i.e. be a fleet worker): a foreign consumer's
messages on the same queue would look orphaned.

A tick never raises: Redis trouble is logged once per outage and retried after ``BACKOFF_S``.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Iterable
from typing import Any

import redis
from celery import bootsteps

from config.settings import Settings
from workers.protocol import FleetKeys

log = logging.getLogger("a3s.fleet.presence")

PRESENCE_INTERVAL_S = 1.0
BACKOFF_S = 5.0
REDIS_TIMEOUT_S = 2.0  # a tick runs on the worker's timer: a dead Redis must not hold it for long
RECORD_TTL_FACTOR = 3  # the record outlives the lost-after window, then expires on its own
UNACKED_KEY = "unacked"  # kombu's Redis transport defaults (we never override them)
UNACKED_INDEX_KEY = "unacked_index"


def live_since_ms(now_ms: int, lost_after_s: int) -> int:
    """The oldest beat that still counts as alive."""
    return now_ms - lost_after_s * 1000


def count_live_consumers(client: redis.Redis, keys: FleetKeys, queue: str, lost_after_s: int) -> int:
    """How many workers beat for ``queue`` within the lost-after window (one round trip)."""
    since = live_since_ms(int(time.time() * 1000), lost_after_s)
    return int(client.zcount(keys.consumers(queue), since, "+inf"))


def held_tags(requests: Iterable[Any]) -> list[str]:
    """The delivery tags of the messages a worker holds (``celery.worker.state.requests`` values)."""
    tags = []
    for req in requests:
        message = getattr(req, "message", None)
        tag = getattr(message, "delivery_tag", None)
        if tag is not None:
            tags.append(str(tag))
    return tags


class PresenceKeeper:
    """One worker's presence and its share of the orphan sweep (see the module docstring)."""

    def __init__(
        self,
        settings: Settings,
        name: str,
        queues: list[str],
        state: redis.Redis,
        broker: redis.Redis,
        restore: Callable[[str], None],
        held: Callable[[], list[str]],
        *,
        keys: FleetKeys | None = None,
    ) -> None:
        self.settings = settings
        self.name = name
        self.queues = sorted(set(queues))
        self.state = state
        self.broker = broker
        self.restore = restore
        self.held = held
        self.keys = keys or FleetKeys()
        self.lost_after_s = settings.worker_lost_after_s
        self._suspects: set[str] = set()
        self._paused_until = 0.0
        self._failing = False

    # ---- the tick -------------------------------------------------------------------------------

    def tick(self) -> None:
        """Beat, bury the lost, redeliver orphans. Never raises."""
        if time.monotonic() < self._paused_until:
            return
        try:
            now_ms = int(time.time() * 1000)
            for name in self.beat(now_ms):
                log.warning(
                    "fleet worker %s lost (no presence for %ss): its unacknowledged jobs go back to the queue",
                    name,
                    self.lost_after_s,
                )
            for tag in self.sweep(now_ms):
                log.warning("fleet: redelivered job %s held by a lost worker", tag)
            if self._failing:
                log.warning("fleet presence: redis reachable again")
            self._failing = False
        except Exception as exc:  # Redis down, a broken transport: try again later, never raise
            if not self._failing:
                log.warning("fleet presence: cannot reach redis (%s: %s); retrying", type(exc).__name__, exc)
            self._failing = True
            self._paused_until = time.monotonic() + BACKOFF_S

    def beat(self, now_ms: int) -> list[str]:
        """Write this worker's presence; return the workers this beat found lost (and buried)."""
        since = live_since_ms(now_ms, self.lost_after_s)
        record = json.dumps(
            {"queues": self.queues, "pid": os.getpid(), "tags": self.held(), "beat_ms": now_ms},
            separators=(",", ":"),
        )
        pipe = self.state.pipeline(transaction=False)
        pipe.set(self.keys.worker(self.name), record, px=self.lost_after_s * 1000 * RECORD_TTL_FACTOR)
        pipe.zadd(self.keys.workers(), {self.name: now_ms})
        for q in self.queues:
            pipe.zadd(self.keys.consumers(q), {self.name: now_ms})
            pipe.zremrangebyscore(self.keys.consumers(q), "-inf", f"({since}")
        pipe.zrangebyscore(self.keys.workers(), "-inf", f"({since}")
        *_, stale = pipe.execute()
        lost = []
        for raw in stale:
            name = raw.decode() if isinstance(raw, bytes) else str(raw)
            if self.state.zrem(self.keys.workers(), name):  # one live worker reports each loss
                lost.append(name)
        return lost

    def leave(self) -> None:
        """A worker shutting down leaves at once (its queued jobs are restored by kombu itself)."""
        try:
            pipe = self.state.pipeline(transaction=False)
            pipe.zrem(self.keys.workers(), self.name)
            for q in self.queues:
                pipe.zrem(self.keys.consumers(q), self.name)
            pipe.delete(self.keys.worker(self.name))
            pipe.execute()
        except Exception as exc:  # the record expires on its own
            log.warning("fleet presence: could not leave the registry (%s)", exc)

    # ---- orphans --------------------------------------------------------------------------------

    def sweep(self, now_ms: int) -> list[str]:
        """Restore the messages no live worker holds (second sighting); return their tags."""
        oldest = now_ms / 1000 - self.lost_after_s
        candidates = {_text(t) for t in self.broker.zrangebyscore(UNACKED_INDEX_KEY, "-inf", oldest)}
        if not candidates:
            self._suspects = set()
            return []
        orphans = candidates - self._live_tags(now_ms)
        if orphans:
            orphans = self._ours(sorted(orphans))
        restored = []
        for tag in sorted(orphans & self._suspects):
            self.restore(tag)
            restored.append(tag)
        self._suspects = orphans - set(restored)
        return restored

    def _live_tags(self, now_ms: int) -> set[str]:
        since = live_since_ms(now_ms, self.lost_after_s)
        names = [_text(n) for n in self.state.zrangebyscore(self.keys.workers(), since, "+inf")]
        tags: set[str] = set(self.held())
        if not names:
            return tags
        for raw in self.state.mget([self.keys.worker(n) for n in names]):
            if raw:
                try:
                    tags.update(str(t) for t in json.loads(raw).get("tags", []))
                except (ValueError, AttributeError):
                    continue
        return tags

    def _ours(self, tags: list[str]) -> set[str]:
        """The tags among ``tags`` whose message belongs to a queue this worker consumes."""
        ours = set()
        for tag, raw in zip(tags, self.broker.hmget(UNACKED_KEY, tags), strict=True):
            if not raw:
                continue  # acknowledged meanwhile
            try:
                _payload, exchange, routing_key = json.loads(raw)
            except (ValueError, TypeError):
                continue
            if routing_key in self.queues or exchange in self.queues:
                ours.add(tag)
        return ours


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _consumed(c: Any, settings: Settings) -> list[str]:
    """The queues a worker's consumer consumes right now."""
    try:
        return sorted({q.name for q in c.task_consumer.queues})
    except AttributeError:  # not started yet
        return [settings.queue]


def _client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=REDIS_TIMEOUT_S, socket_connect_timeout=REDIS_TIMEOUT_S)


def presence_step(settings: Settings) -> type[bootsteps.StartStopStep]:
    """The consumer bootstep that runs a ``PresenceKeeper`` for ``settings`` (``make_app`` adds it)."""

    class PresenceStep(bootsteps.StartStopStep):
        """Fleet presence: beat, bury lost workers, redeliver their jobs (``workers.presence``)."""

        requires = ("celery.worker.consumer.tasks:Tasks",)

        def __init__(self, c: Any, **kwargs: Any) -> None:
            self.keeper: PresenceKeeper | None = None
            self.tref: Any = None
            self.connection: Any = None
            super().__init__(c, **kwargs)

        def start(self, c: Any) -> None:
            from celery.worker import state as worker_state

            from workers.app import broker_url
            from workers.runtime import state_url

            broker, state = broker_url(settings), state_url(settings)
            broker_client = _client(broker)
            state_client = broker_client if state == broker else _client(state)
            self.keeper = PresenceKeeper(
                settings,
                c.hostname,
                _consumed(c, settings),
                state_client,
                broker_client,
                lambda tag: self._restore(c, tag),
                lambda: held_tags(list(worker_state.requests.values())),
            )
            self.keeper.tick()  # present before the worker reports ready
            self.tref = c.timer.call_repeatedly(PRESENCE_INTERVAL_S, self._tick, (c,), priority=10)

        def _tick(self, c: Any) -> None:
            if self.keeper is not None:
                # Queues added or cancelled at run time (`celery control add_consumer`) count too.
                self.keeper.queues = _consumed(c, settings)
                self.keeper.tick()

        def _restore(self, c: Any, tag: str) -> None:
            # kombu's own restore (the message format and routing are kombu's business), on a
            # connection of our own: the consumer's channel belongs to its event loop.
            if self.connection is None:
                self.connection = c.app.connection_for_write()
            self.connection.default_channel.qos.restore_by_tag(tag)

        def stop(self, c: Any) -> None:
            if self.tref is not None:
                self.tref.cancel()
                self.tref = None
            if self.keeper is not None:
                self.keeper.leave()
                self.keeper = None
            if self.connection is not None:
                try:
                    self.connection.release()
                except Exception:
                    pass
                self.connection = None

        shutdown = stop

    return PresenceStep
