"""Step store (SPEC F-3): atomic claims, attempt fencing, exact-key recovery; memory and Redis."""

from __future__ import annotations

import pytest

from kernel.errors import InvalidArgument, VersionConflict
from kernel.state import MAX_STEP_RESULT_BYTES, Busy, Claimed, Completed, StepKey
from kernel.testing import FakeClock
from workers.state.testing import BACKENDS, make_store

KEY = StepKey("run-1", "sha256:q1", "step-a")


@pytest.fixture(params=BACKENDS)
def clock_steps(request: pytest.FixtureRequest):
    clock = FakeClock()
    return clock, make_store(request.param, clock).steps()


def test_f3_claim_complete_then_recover_the_result(clock_steps) -> None:
    clock, steps = clock_steps
    claim = steps.claim(KEY, lease_ms=10_000)
    assert claim == Claimed(1, clock.now_ms() + 10_000)
    assert steps.recover(KEY) is None  # running is not a result
    steps.complete(KEY, 1, {"output": "ok", "exit_code": 0})
    assert steps.recover(KEY) == Completed(1, {"output": "ok", "exit_code": 0})
    assert steps.claim(KEY) == Completed(1, {"output": "ok", "exit_code": 0})  # redelivery recovers
    assert steps.get(KEY).status == "completed"


def test_f3_recovery_needs_all_three_keys_never_cross_run(clock_steps) -> None:
    _clock, steps = clock_steps
    steps.claim(KEY)
    steps.complete(KEY, 1, "done")
    for other in (
        StepKey("run-2", KEY.query_digest, KEY.step_id),
        StepKey(KEY.run_id, "sha256:q2", KEY.step_id),
        StepKey(KEY.run_id, KEY.query_digest, "step-b"),
    ):
        assert steps.recover(other) is None
        assert isinstance(steps.claim(other), Claimed)


def test_f3_a_live_claim_is_busy_and_an_expired_one_is_reclaimed_with_a_new_attempt(clock_steps) -> None:
    clock, steps = clock_steps
    assert steps.claim(KEY, lease_ms=5_000).attempt == 1
    assert steps.claim(KEY) == Busy(1, 5_000)
    clock.advance(5)
    second = steps.claim(KEY, lease_ms=5_000)
    assert isinstance(second, Claimed) and second.attempt == 2
    with pytest.raises(VersionConflict) as info:  # the dead worker's late write is fenced off
        steps.complete(KEY, 1, "stale")
    assert info.value.data == {"path": "run-1/sha256:q1/step-a", "expected": 1, "actual": 2}
    steps.complete(KEY, 2, "fresh")
    assert steps.recover(KEY).result == "fresh"
    with pytest.raises(VersionConflict):
        steps.complete(KEY, 2, "again")  # completed steps are final


def test_f3_renew_extends_only_the_current_attempt(clock_steps) -> None:
    clock, steps = clock_steps
    steps.claim(KEY, lease_ms=5_000)
    clock.advance(4)
    assert steps.renew(KEY, 1, lease_ms=5_000)
    clock.advance(4)
    assert isinstance(steps.claim(KEY), Busy)
    assert not steps.renew(KEY, 7)


def test_f3_a_failed_step_is_never_promoted_and_is_retried(clock_steps) -> None:
    _clock, steps = clock_steps
    steps.claim(KEY)
    steps.fail(KEY, 1, {"type": "transport", "op": "web_fetch"})
    assert steps.recover(KEY) is None
    record = steps.get(KEY)
    assert (record.status, record.error_kind) == ("failed", {"type": "transport", "op": "web_fetch"})
    assert steps.claim(KEY).attempt == 2
    with pytest.raises(VersionConflict):
        steps.fail(KEY, 1)


def test_f3_results_are_bounded_json(clock_steps) -> None:
    _clock, steps = clock_steps
    steps.claim(KEY)
    with pytest.raises(InvalidArgument):
        steps.complete(KEY, 1, object())
    with pytest.raises(InvalidArgument):
        steps.complete(KEY, 1, "x" * MAX_STEP_RESULT_BYTES)
    assert steps.get(KEY).status == "running"  # a refused result changes nothing
    steps.complete(KEY, 1, {"result_ref": "a3s://tool-output/x/abc"})
    assert steps.recover(KEY).result == {"result_ref": "a3s://tool-output/x/abc"}


def test_f3_completing_an_unclaimed_step_is_rejected(clock_steps) -> None:
    _clock, steps = clock_steps
    with pytest.raises(VersionConflict):
        steps.complete(KEY, 1, "never claimed")
    assert steps.get(KEY) is None
    with pytest.raises(InvalidArgument):
        StepKey("run-1", "", "step-a")
