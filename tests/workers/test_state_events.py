"""Session event streams (SPEC S-5): EventSink on a Redis Stream and a resumable reader
(fakeredis here; the cross-process live read is in tests/fleet/test_state_concurrency.py)."""

from __future__ import annotations

import threading

import fakeredis
import pytest

from kernel.errors import Transport
from kernel.events import Event, FanoutSink, MemoryEventSink
from workers.state import RedisStreamReader, RedisStreamSink, make_client


def ev(call: str, kind: str = "tool_output_delta", **data: object) -> Event:
    return Event(type=kind, call_id=call, tool="bash", origin="agent", ts_ms=1, data=dict(data))


@pytest.fixture()
def client():
    return fakeredis.FakeRedis(server=fakeredis.FakeServer(), decode_responses=True)


def test_s5_events_round_trip_in_order_with_session_sequence(client) -> None:
    sink = RedisStreamSink(client, "sess-1", prefix="t")
    sent = [ev("c1", "tool_start"), ev("c1", chunk="a"), ev("c1", "tool_end", exit_code=0)]
    for e in sent:
        sink.emit(e)
    got = list(RedisStreamReader(client, "sess-1", prefix="t").read(idle_timeout_s=0, block_ms=1))
    assert [g.event.to_json() for g in got] == [e.to_json() for e in sent]
    assert [g.event.seq for g in got] == [1, 2, 3]
    assert [g.id for g in got] == sorted(g.id for g in got)


def test_s5_reader_resumes_after_an_id_and_stops_on_a_predicate(client) -> None:
    sink = RedisStreamSink(client, "s", prefix="t")
    for i in range(5):
        sink.emit(ev("c1", n=i))
    reader = RedisStreamReader(client, "s", prefix="t")
    first_two = reader.range(count=2)
    rest = list(reader.read(first_two[-1].id, until=lambda e: e.data["n"] == 3, block_ms=1))
    assert [r.event.data["n"] for r in rest] == [2, 3]
    assert [r.event.data["n"] for r in reader.range(rest[-1].id)] == [4]


def test_s5_fanout_keeps_the_memory_sinks_numbering(client) -> None:
    memory = MemoryEventSink()
    sink = FanoutSink(memory, RedisStreamSink(client, "s", prefix="t"))
    sink.emit(ev("c1"))
    sink.emit(ev("c2"))
    stored = RedisStreamReader(client, "s", prefix="t").range()
    assert [s.event.seq for s in stored] == [e.seq for e in memory.snapshot()] == [1, 2]


def test_s5_stream_is_capped_approximately(client) -> None:
    sink = RedisStreamSink(client, "s", prefix="t", max_len=10)
    for i in range(500):
        sink.emit(ev("c", n=i))
    length = client.xlen("t:events:s")
    assert 10 <= length < 500
    assert RedisStreamReader(client, "s", prefix="t").range(count=1000)[-1].event.data["n"] == 499


def test_s5_dollar_reads_only_new_events_without_gaps(client) -> None:
    sink = RedisStreamSink(client, "s", prefix="t")
    sink.emit(ev("old"))
    reader = RedisStreamReader(client, "s", prefix="t")
    stop = threading.Event()
    gen = reader.read("$", block_ms=1, until=lambda e: e.call_id == "new-2", stop=stop)
    sink.emit(ev("new-1"))
    sink.emit(ev("new-2"))
    assert [g.event.call_id for g in gen] == ["new-1", "new-2"]


def test_s5_emit_on_unreachable_redis_is_a_transport_error() -> None:
    client = make_client("redis://127.0.0.1:1/0", connect_timeout_s=0.2, socket_timeout_s=0.2)
    with pytest.raises(Transport):
        RedisStreamSink(client, "s").emit(ev("c"))
