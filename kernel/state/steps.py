"""The step store (F-3): atomic claims fenced by attempt, recovery only on an exact completed match."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from kernel.clock import Clock, SystemClock
from kernel.errors import InvalidArgument, VersionConflict
from kernel.state.limits import MAX_STEP_RESULT_BYTES, STEP_LEASE_MS


@dataclass(frozen=True, slots=True)
class StepKey:
    run_id: str
    query_digest: str
    step_id: str

    def __post_init__(self) -> None:
        if not (self.run_id and self.query_digest and self.step_id):
            raise InvalidArgument("run_id, query_digest and step_id are all required")

    def __str__(self) -> str:
        return f"{self.run_id}/{self.query_digest}/{self.step_id}"


@dataclass(frozen=True, slots=True)
class Claimed:
    attempt: int
    lease_until_ms: int


@dataclass(frozen=True, slots=True)
class Completed:
    attempt: int
    result: Any


@dataclass(frozen=True, slots=True)
class Busy:
    attempt: int
    retry_after_ms: int


StepStatus = Literal["running", "completed", "failed"]


@dataclass(frozen=True, slots=True)
class StepRecord:
    status: StepStatus
    attempt: int
    lease_until_ms: int = 0
    result: Any = None
    error_kind: dict[str, Any] | None = None


def encode_step_result(result: Any) -> str:
    try:
        text = json.dumps(result, separators=(",", ":"), sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(f"step result must be JSON: {exc}") from exc
    if len(text.encode()) > MAX_STEP_RESULT_BYTES:
        raise InvalidArgument(
            f"step result is {len(text.encode())} bytes, over {MAX_STEP_RESULT_BYTES}; store a reference"
        )
    return text


class StepStore(Protocol):
    def claim(self, key: StepKey, *, lease_ms: int = STEP_LEASE_MS) -> Claimed | Completed | Busy: ...

    def complete(self, key: StepKey, attempt: int, result: Any) -> None: ...

    def fail(self, key: StepKey, attempt: int, error_kind: dict[str, Any] | None = None) -> None: ...

    def renew(self, key: StepKey, attempt: int, *, lease_ms: int = STEP_LEASE_MS) -> bool: ...

    def recover(self, key: StepKey) -> Completed | None: ...

    def get(self, key: StepKey) -> StepRecord | None: ...


def stale_attempt(key: StepKey, attempt: int, status: str, current: int) -> VersionConflict:
    return VersionConflict(
        f"step {key} attempt {attempt} is stale (status {status or 'absent'}, attempt {current})",
        path=str(key),
        expected=attempt,
        actual=current,
    )


@dataclass(slots=True)
class _StepRow:
    status: StepStatus
    attempt: int
    lease_until_ms: int = 0
    result: str | None = None
    error_kind: str | None = None


class MemoryStepStore:
    """Steps in a dict; results stored as JSON text like the Redis store (no aliasing)."""

    def __init__(self, *, clock: Clock | None = None) -> None:
        self._clock = clock or SystemClock()
        self._lock = threading.Lock()
        self._rows: dict[StepKey, _StepRow] = {}

    def claim(self, key: StepKey, *, lease_ms: int = STEP_LEASE_MS) -> Claimed | Completed | Busy:
        now = self._clock.now_ms()
        with self._lock:
            row = self._rows.get(key)
            if row is not None and row.status == "completed":
                return Completed(row.attempt, json.loads(row.result or "null"))
            if row is not None and row.status == "running" and row.lease_until_ms > now:
                return Busy(row.attempt, row.lease_until_ms - now)
            attempt = (row.attempt if row else 0) + 1
            self._rows[key] = _StepRow("running", attempt, now + lease_ms)
            return Claimed(attempt, now + lease_ms)

    def _fenced(self, key: StepKey, attempt: int) -> _StepRow:
        row = self._rows.get(key)
        if row is None or row.status != "running" or row.attempt != attempt:
            raise stale_attempt(key, attempt, row.status if row else "", row.attempt if row else 0)
        return row

    def complete(self, key: StepKey, attempt: int, result: Any) -> None:
        text = encode_step_result(result)
        with self._lock:
            row = self._fenced(key, attempt)
            row.status, row.result, row.lease_until_ms = "completed", text, 0

    def fail(self, key: StepKey, attempt: int, error_kind: dict[str, Any] | None = None) -> None:
        with self._lock:
            row = self._fenced(key, attempt)
            row.status, row.lease_until_ms = "failed", 0
            row.error_kind = json.dumps(error_kind) if error_kind is not None else None

    def renew(self, key: StepKey, attempt: int, *, lease_ms: int = STEP_LEASE_MS) -> bool:
        now = self._clock.now_ms()
        with self._lock:
            try:
                row = self._fenced(key, attempt)
            except VersionConflict:
                return False
            row.lease_until_ms = now + lease_ms
            return True

    def recover(self, key: StepKey) -> Completed | None:
        with self._lock:
            row = self._rows.get(key)
            if row is None or row.status != "completed":
                return None
            return Completed(row.attempt, json.loads(row.result or "null"))

    def get(self, key: StepKey) -> StepRecord | None:
        with self._lock:
            row = self._rows.get(key)
            if row is None:
                return None
            return StepRecord(
                row.status,
                row.attempt,
                row.lease_until_ms,
                json.loads(row.result) if row.result is not None else None,
                json.loads(row.error_kind) if row.error_kind is not None else None,
            )
