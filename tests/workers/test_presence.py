"""Worker presence and the orphan sweep (issue 13 item 4, issue 15 item 8; SPEC F-1, F-3) on a real Redis
with kombu's own Redis transport: a worker's beat makes its queue consumed; a silent worker is buried
once; a message that sat unacknowledged longer than ``worker_lost_after_s`` and that no live worker
holds goes back to the front of its queue — on the second sighting, never when a live worker holds it,
never for a queue the sweeping worker does not consume."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
import redis
from kombu import Connection, Exchange, Queue

from config.settings import Settings
from workers.presence import PresenceKeeper, count_live_consumers, held_tags
from workers.protocol import FleetKeys

pytestmark = pytest.mark.fleet

LOST_AFTER_S = 3


@dataclass
class Broker:
    url: str
    client: redis.Redis
    connection: Connection
    keys: FleetKeys

    def queue(self, name: str) -> Queue:
        q = Queue(name, Exchange(name), routing_key=name)(self.connection.default_channel)
        q.declare()
        return q

    def take_unacked(self, q: Queue, age_s: float) -> str:
        """Publish one message to ``q`` and take it without acknowledging, as a worker would; its
        unacked entry is backdated by ``age_s``. Returns the delivery tag."""
        with self.connection.Producer() as producer:
            producer.publish({"job": q.name}, exchange=q.exchange, routing_key=q.routing_key)
        message = q.get(no_ack=False)
        assert message is not None
        tag = str(message.delivery_tag)
        self.client.zadd("unacked_index", {tag: time.time() - age_s})
        return tag

    def keeper(self, name: str, queues: list[str], held: Callable[[], list[str]] = list) -> PresenceKeeper:
        settings = Settings(broker_url=self.url, worker_lost_after_s=LOST_AFTER_S)
        channel = self.connection.default_channel
        return PresenceKeeper(
            settings,
            name,
            queues,
            self.client,
            self.client,
            channel.qos.restore_by_tag,
            held,
            keys=self.keys,
        )


@pytest.fixture()
def broker(redis_urls: Callable[[int], str]) -> Iterator[Broker]:
    url = redis_urls(11)
    client = redis.Redis.from_url(url)
    connection = Connection(url)
    keys = FleetKeys(f"a3s:test:{uuid.uuid4().hex[:6]}")
    yield Broker(url, client, connection, keys)
    connection.release()
    client.close()


def _name(prefix: str) -> str:
    return f"{prefix}.{uuid.uuid4().hex[:8]}"


def test_f1_a_beat_makes_the_queue_consumed_and_a_silent_worker_is_buried_once(broker: Broker) -> None:
    q = _name("a3s.presence")
    assert count_live_consumers(broker.client, broker.keys, q, LOST_AFTER_S) == 0
    alive, silent = broker.keeper("alive@h", [q]), broker.keeper("silent@h", [q])
    now = int(time.time() * 1000)
    silent.beat(now - (LOST_AFTER_S + 1) * 1000)  # its last beat, long ago
    assert count_live_consumers(broker.client, broker.keys, q, LOST_AFTER_S) == 0
    assert alive.beat(now) == ["silent@h"]
    assert alive.beat(now) == []  # reported once
    assert count_live_consumers(broker.client, broker.keys, q, LOST_AFTER_S) == 1
    alive.leave()
    assert count_live_consumers(broker.client, broker.keys, q, LOST_AFTER_S) == 0


def test_f3_an_orphan_goes_back_to_the_front_of_its_queue_on_the_second_sighting(broker: Broker) -> None:
    q = broker.queue(_name("a3s.orphans"))
    tag = broker.take_unacked(q, age_s=LOST_AFTER_S + 2)
    assert q.get(no_ack=True) is None  # nothing left to deliver: the message waits for its dead holder
    sweeper = broker.keeper("sweeper@h", [q.name])
    sweeper.tick()
    assert q.get(no_ack=True) is None  # first sighting: a suspect only
    sweeper.tick()
    again = q.get(no_ack=True)
    assert again is not None and again.payload == {"job": q.name}
    assert again.delivery_info.get("redelivered") or again.headers.get("redelivered")
    assert broker.client.hget("unacked", tag) is None


def test_f3_a_message_a_live_worker_holds_or_a_young_one_is_never_restored(broker: Broker) -> None:
    q = broker.queue(_name("a3s.held"))
    held = broker.take_unacked(q, age_s=LOST_AFTER_S + 2)
    young = broker.take_unacked(q, age_s=0)
    holder = broker.keeper("holder@h", [q.name], held=lambda: [held])
    sweeper = broker.keeper("sweeper@h", [q.name])
    for _ in range(3):
        holder.tick()
        sweeper.tick()
    assert q.get(no_ack=True) is None
    assert broker.client.hget("unacked", held) and broker.client.hget("unacked", young)
    for tag in (held, young):  # clean up: these belong to no one
        broker.connection.default_channel.qos.restore_by_tag(tag)


def test_f3_a_worker_restores_only_queues_it_consumes(broker: Broker) -> None:
    theirs = broker.queue(_name("a3s.theirs"))
    tag = broker.take_unacked(theirs, age_s=LOST_AFTER_S + 2)
    sweeper = broker.keeper("sweeper@h", [_name("a3s.mine")])
    sweeper.tick()
    sweeper.tick()
    assert broker.client.hget("unacked", tag) is not None
    broker.connection.default_channel.qos.restore_by_tag(tag)


def test_f3_held_tags_reads_the_delivery_tags_of_reserved_requests() -> None:
    @dataclass
    class Msg:
        delivery_tag: str | None

    @dataclass
    class Req:
        message: Msg | None

    assert held_tags([Req(Msg("t1")), Req(None), Req(Msg(None)), Req(Msg("t2"))]) == ["t1", "t2"]
