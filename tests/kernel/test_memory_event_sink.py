"""The session's in-memory event log is bounded in bytes as well as in count (SPEC S-5).

``MemoryEventSink`` kept its last 10 000 events whatever they weighed: tool output deltas and results
of ~100 KiB each made that ~1 GB in one session. Now it also keeps at most ``max_bytes`` of them
(each weighed by its JSON size), dropping the oldest first and counting what it dropped.
"""

from __future__ import annotations

from kernel.events import MAX_MEMORY_EVENT_BYTES, Event, MemoryEventSink, event_bytes


def _delta(n: int, size: int) -> Event:
    return Event("tool_output_delta", f"call-{n}", "bash", "host_direct", n, data={"text": "x" * size})


def test_s5_the_memory_log_drops_its_oldest_events_past_its_byte_budget() -> None:
    """Before: 10 000 deltas of 100 KiB were all held (~1 GB); here the default budget keeps ≤ 64 MiB."""
    sink = MemoryEventSink()
    for n in range(1_000):
        sink.emit(_delta(n, 100 * 1024))
    kept = sink.snapshot()
    assert sum(event_bytes(e) for e in kept) <= MAX_MEMORY_EVENT_BYTES
    assert len(kept) < 1_000 and sink.dropped == 1_000 - len(kept)
    assert [e.seq for e in kept] == list(range(1_000 - len(kept) + 1, 1_001))  # the newest, in order


def test_s5_count_and_byte_budgets_both_hold_and_the_newest_event_is_always_kept() -> None:
    sink = MemoryEventSink(capacity=3, max_bytes=10_000)
    for n in range(5):
        sink.emit(_delta(n, 10))
    assert [e.seq for e in sink.snapshot()] == [3, 4, 5] and sink.dropped == 2
    sink.emit(_delta(5, 50_000))  # alone over the budget: kept, everything older dropped
    assert [e.seq for e in sink.snapshot()] == [6] and sink.dropped == 5
    sink.emit(_delta(6, 10))
    assert [e.seq for e in sink.snapshot()] == [7] and sink.dropped == 6
