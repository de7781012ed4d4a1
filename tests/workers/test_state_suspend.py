"""The suspension store on a real Redis: a suspended run's children report once, the fan-in triggers the
continuation once it is complete, and a crash between trigger and publish is survivable (SPEC A-4, X-3, F-3).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

from kernel.errors import Transport
from workers.state import make_client
from workers.state.suspend import Group, SuspendStore


@pytest.fixture()
def store(redis_urls: Callable[[int], str]) -> SuspendStore:
    return SuspendStore(make_client(redis_urls(5)), prefix=f"t-{uuid.uuid4().hex[:8]}")


def ok(i: int) -> dict[str, object]:
    return {"index": i, "success": True}


def test_a4_create_is_once_and_a_complete_fan_in_triggers(store: SuspendStore) -> None:
    assert store.create("s1", {"run": "r"}, [Group(total=3, need=3, partial=False)])
    assert not store.create("s1", {"run": "other"}, [Group(total=1, need=1, partial=False)])
    r0 = store.report("s1", 0, 0, ok(0), True)
    r1 = store.report("s1", 0, 1, ok(1), True)
    assert (r0.trigger, r1.trigger) == (False, False)
    last = store.report("s1", 0, 2, ok(2), True)
    assert (last.stored, last.settled_now, last.trigger) == (1, True, True)
    state = store.load("s1")
    assert state is not None and state.state == {"run": "r"} and state.settled == {0: "done"}
    assert sorted(state.results) == [(0, 0), (0, 1), (0, 2)]


def test_x3_a_redelivered_child_reports_once_and_keeps_its_first_result(store: SuspendStore) -> None:
    store.create("s2", {}, [Group(total=2, need=2, partial=False)])
    store.report("s2", 0, 0, {"v": 1}, True)
    again = store.report("s2", 0, 0, {"v": 2}, True)
    assert (again.stored, again.settled_now, again.trigger) == (0, False, False)
    state = store.load("s2")
    assert state is not None and state.results[(0, 0)] == {"v": 1} and state.groups_left == 1


def test_x3_first_failure_settles_a_group_without_partial_failure_and_late_reports_are_dropped(
    store: SuspendStore,
) -> None:
    store.create("s3", {}, [Group(total=3, need=3, partial=False)])
    failed = store.report("s3", 0, 1, {"index": 1}, False)
    assert (failed.settled_now, failed.trigger) == (True, True)
    late = store.report("s3", 0, 0, ok(0), True)
    assert late.stored == -1 and late.trigger is True  # continuation not marked sent yet
    store.mark_sent("s3")
    assert store.report("s3", 0, 2, ok(2), True).trigger is False
    state = store.load("s3")
    assert state is not None and list(state.results) == [(0, 1)] and state.settled == {0: "failed"}


def test_x3_min_success_count_settles_early_and_unreachable_need_fails(store: SuspendStore) -> None:
    store.create("s4", {}, [Group(total=4, need=2, partial=True), Group(total=3, need=2, partial=True)])
    store.report("s4", 0, 0, {}, False)
    store.report("s4", 0, 1, {}, True)
    enough = store.report("s4", 0, 2, {}, True)
    assert enough.settled_now and not enough.trigger  # group 1 is still open
    store.report("s4", 1, 0, {}, False)
    doomed = store.report("s4", 1, 1, {}, False)  # 2 of 3 failed: need 2 can no longer be met
    assert doomed.settled_now and doomed.trigger
    state = store.load("s4")
    assert state is not None and state.settled == {0: "enough", 1: "failed"}


def test_x3_a_deadline_settles_an_open_group_once(store: SuspendStore) -> None:
    store.create("s5", {}, [Group(total=2, need=2, partial=False)])
    store.report("s5", 0, 0, ok(0), True)
    assert store.expire_group("s5", 0) == (True, True)
    assert store.expire_group("s5", 0) == (False, True)
    assert store.report("s5", 0, 1, ok(1), True).stored == -1
    state = store.load("s5")
    assert state is not None and state.settled == {0: "timed_out"} and list(state.results) == [(0, 0)]
    assert store.expire_group("missing", 0) == (False, False)


def test_k8_a_report_to_a_lost_suspension_is_a_typed_transport_error(store: SuspendStore) -> None:
    with pytest.raises(Transport):
        store.report("never", 0, 0, ok(0), True)
    assert store.load("never") is None
