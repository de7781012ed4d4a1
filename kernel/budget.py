"""Session budget (SPEC K-3): tool calls, output bytes, wall time and model tokens, checked before
side effects.

``check_before_call`` answers ``ok`` / ``soft`` (crossed ``soft_ratio`` for the first time: an event,
the call goes on) / raises ``budget_exhausted`` (hard: the call is rejected before it runs).
Output bytes are charged after projection, so the next call sees them. The agent loop charges each
model response's usage (``charge_model``) and asks ``check_before_model`` before the next request:
``max_model_tokens`` bounds prompt + completion tokens over the session (cached prompt tokens count:
they are still context the model read). ``charge_delegated`` adds what delegated ``task`` children
spent: their budgets were shares of this one.

Delegation reserves (``reserve``): a ``task`` call holds its children's shares of what is left —
limit minus used minus what running calls already hold — when it starts, atomically, and ``settle``
charges what they spent and releases the rest when it ends. Concurrent calls therefore never hand
out the same remainder twice (the first holds all that is left; the next finds it held and is
refused), and every check counts what is held as spent. A
reservation is never persisted (``usage``): a run that suspends on its calls is charged their
children's spend when it resumes.

A call that runs elsewhere (a fleet job) is held by the session (``hold_call``) and settled with
what it spent there: the worker runs it under ``metered()``, which adds up everything charged in
that call's context — its nested calls and their tasks included, but not a concurrent job's on the
same cached session — and sends that back with the result. The hold comes with an ``Allotment``,
all the call may spend there: the call itself, or — for a tool that ``delegates`` (nested calls,
child runs, model requests) — also what is left of the session's budget, held for it alone. The
worker's copy of the budget (a snapshot that knows nothing of other calls in flight) admits
nothing past it, so two such calls in flight never both spend the same remainder.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from kernel.errors import BudgetExhausted

DEFAULT_SOFT_RATIO = 0.8
USAGE_KEYS = ("tool_calls", "output_bytes", "prompt_tokens", "completion_tokens", "cached_tokens")

# What the running call has been charged so far (``metered``); None outside one.
_METER: contextvars.ContextVar[dict[str, int] | None] = contextvars.ContextVar(
    "a3s_budget_meter", default=None
)


@dataclass(frozen=True, slots=True)
class Allotment:
    """All that one call run elsewhere may spend, nested calls and child runs included (None: no
    limit of its own). ``tool_calls`` counts the call itself."""

    tool_calls: int | None = None
    output_bytes: int | None = None
    model_tokens: int | None = None

    def to_json(self) -> dict[str, int | None]:
        return {
            "tool_calls": self.tool_calls,
            "output_bytes": self.output_bytes,
            "model_tokens": self.model_tokens,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Allotment:
        def bound(key: str) -> int | None:
            value = d.get(key)
            return max(0, value) if isinstance(value, int) and not isinstance(value, bool) else None

        return cls(bound("tool_calls"), bound("output_bytes"), bound("model_tokens"))


# The running call's allotment and its meter (``metered(allotment)``); None: no allotment.
_ALLOTTED: contextvars.ContextVar[tuple[dict[str, int], Allotment] | None] = contextvars.ContextVar(
    "a3s_budget_allotted", default=None
)


@contextlib.contextmanager
def metered(allotment: Allotment | None = None) -> Iterator[dict[str, int]]:
    """Count what every tracker charges in this context (tasks started in it included) into the
    yielded usage mapping: what one call run elsewhere spent, reported back to its session. With an
    ``allotment``, every tracker also refuses what would take this context past it."""
    meter = dict.fromkeys(USAGE_KEYS, 0)
    token = _METER.set(meter)
    allotted = _ALLOTTED.set((meter, allotment) if allotment is not None else None)
    try:
        yield meter
    finally:
        _ALLOTTED.reset(allotted)
        _METER.reset(token)


def _allotment_left(resource: str) -> int | None:
    """What the running call's allotment still allows of ``resource`` (None: no allotment)."""
    allotted = _ALLOTTED.get()
    if allotted is None:
        return None
    meter, allotment = allotted
    limit: int | None = getattr(allotment, resource)
    if limit is None:
        return None
    spent = (
        meter["prompt_tokens"] + meter["completion_tokens"] if resource == "model_tokens" else meter[resource]
    )
    return limit - spent


def _metering(key: str, amount: int) -> None:
    meter = _METER.get()
    if meter is not None and amount > 0:
        meter[key] = meter.get(key, 0) + amount


@dataclass(frozen=True, slots=True)
class Budget:
    """A session's limits (SPEC S-5): tool calls, output bytes, wall time, model tokens; ``None`` is unlimited."""

    max_tool_calls: int | None = None
    max_output_bytes: int | None = None
    max_wall_time_ms: int | None = None
    soft_ratio: float = DEFAULT_SOFT_RATIO
    max_model_tokens: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "max_tool_calls": self.max_tool_calls,
            "max_output_bytes": self.max_output_bytes,
            "max_wall_time_ms": self.max_wall_time_ms,
            "soft_ratio": self.soft_ratio,
            "max_model_tokens": self.max_model_tokens,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any] | None) -> Budget:
        return cls(**(d or {}))


# The consumables a delegated run gets a share of (wall time is not: children run side by side).
RESERVABLE = ("tool_calls", "output_bytes", "model_tokens")


@dataclass(slots=True)
class Reservation:
    """What one delegating call holds: ``per_run[resource]`` for each of ``runs`` children (None: no
    limit). ``settle`` ends it once."""

    runs: int
    per_run: dict[str, int | None]
    settled: bool = False
    call: bool = False  # a held call (``hold_call``), not a delegation
    allotment: Allotment | None = None  # a held call's: all it may spend where it runs
    crossed: list[Threshold] = field(default_factory=list)  # soft thresholds its hold crossed

    def share(self, resource: str) -> int | None:
        return self.per_run.get(resource)

    def whole(self) -> dict[str, int]:
        """Every child's whole share, as a usage mapping (model tokens counted as prompt tokens)."""
        keys = {"tool_calls": "tool_calls", "output_bytes": "output_bytes", "model_tokens": "prompt_tokens"}
        return {keys[r]: (v or 0) * self.runs for r, v in self.per_run.items()}


@dataclass(frozen=True, slots=True)
class Threshold:
    """A soft or hard budget line crossed by one resource (the ``budget_threshold`` event)."""

    resource: str
    kind: str  # "soft" | "hard"
    consumed: int
    limit: int
    message: str

    def event_data(self) -> dict[str, Any]:
        """A ``budget_threshold`` event's data."""
        return {
            "kind": self.kind,
            "resource": self.resource,
            "consumed": self.consumed,
            "limit": self.limit,
            "message": self.message,
        }


class BudgetTracker:
    def __init__(self, budget: Budget, started_ms: int, used: dict[str, int] | None = None) -> None:
        self.budget = budget
        self.started_ms = started_ms
        used = used or {}
        self.tool_calls = int(used.get("tool_calls", 0))
        self.output_bytes = int(used.get("output_bytes", 0))
        self.prompt_tokens = int(used.get("prompt_tokens", 0))
        self.completion_tokens = int(used.get("completion_tokens", 0))
        self.cached_tokens = int(used.get("cached_tokens", 0))
        self._soft_sent: set[str] = set(used.get("soft_sent", []) or [])  # type: ignore[arg-type]
        self.reserved: dict[str, int] = dict.fromkeys(RESERVABLE, 0)  # held by running `task` calls
        self.held_calls = 0  # of reserved["tool_calls"]: calls running elsewhere (``hold_call``)
        self._lock = threading.Lock()

    def usage(self) -> dict[str, Any]:
        return {
            "tool_calls": self.tool_calls,
            "output_bytes": self.output_bytes,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cached_tokens": self.cached_tokens,
            "soft_sent": sorted(self._soft_sent),
        }

    def check_before_call(self, now_ms: int) -> list[Threshold]:
        """Admit one call (counting it) or raise; returns newly crossed soft thresholds."""
        b = self.budget
        with self._lock:
            held = self.reserved
            levels = (
                ("tool_calls", self.tool_calls + 1, b.max_tool_calls),
                ("output_bytes", self.output_bytes, b.max_output_bytes),
                ("wall_time_ms", now_ms - self.started_ms, b.max_wall_time_ms),
            )
            for resource, consumed, limit in levels:
                if limit is None:
                    continue
                reserved = held.get(resource, 0)
                total = consumed + reserved
                over = total > limit if resource == "tool_calls" else total >= limit
                if over:
                    # Calls held while they run elsewhere are calls made, as embedded says so.
                    calls = self.held_calls if resource == "tool_calls" else 0
                    used = (consumed if resource != "tool_calls" else consumed - 1) + calls
                    raise BudgetExhausted(
                        f"Budget exhausted: {resource} {used} of {limit} used" + _held(reserved - calls),
                        resource=resource,
                        reason=f"{resource} limit {limit} reached",
                        consumed=total,
                        limit=limit,
                    )
                left = _allotment_left(resource) if resource != "wall_time_ms" else None
                if left is not None and (left < 1 if resource == "tool_calls" else left <= 0):
                    # Run elsewhere: the session holds the rest of its budget for its other calls.
                    used = consumed if resource != "tool_calls" else consumed - 1
                    raise BudgetExhausted(
                        f"Budget exhausted: {resource} {used} of {limit} used"
                        + _held_elsewhere(limit - used),
                        resource=resource,
                        reason=f"{resource} limit {limit} reached",
                        consumed=limit,
                        limit=limit,
                    )
            allotted = _ALLOTTED.get()
            if allotted is not None and allotted[0]["tool_calls"] == 0:
                # The call a worker runs for a session: the session checked it and emitted its
                # thresholds when it held it; this copy's count knows nothing of the session's
                # other calls. Its nested calls are reported as usual.
                self.tool_calls += 1
                _metering("tool_calls", 1)
                return []
            self.tool_calls += 1
            _metering("tool_calls", 1)
            crossed: list[Threshold] = []
            for resource, consumed, limit in levels:
                if limit is None or resource in self._soft_sent:
                    continue
                if resource == "tool_calls":
                    consumed += self.held_calls  # calls running elsewhere are calls made
                if consumed >= limit * b.soft_ratio:
                    self._soft_sent.add(resource)
                    crossed.append(
                        Threshold(resource, "soft", consumed, limit, f"{resource} at {consumed} of {limit}")
                    )
            return crossed

    def wall_time_left_ms(self, now_ms: int) -> int | None:
        """What is left of ``max_wall_time_ms`` (None: no limit): a running call's deadline too."""
        limit = self.budget.max_wall_time_ms
        return None if limit is None else limit - (now_ms - self.started_ms)

    def charge_output(self, nbytes: int) -> None:
        with self._lock:
            self.output_bytes += nbytes
            _metering("output_bytes", nbytes)

    def charge_model(self, prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> None:
        with self._lock:
            self.prompt_tokens += prompt_tokens
            self.completion_tokens += completion_tokens
            self.cached_tokens += cached_tokens
            _metering("prompt_tokens", prompt_tokens)
            _metering("completion_tokens", completion_tokens)
            _metering("cached_tokens", cached_tokens)

    def charge_delegated(self, usage: Mapping[str, Any]) -> None:
        """What delegated child runs spent (their ``TaskResult.usage``): their shares came out of
        this budget, so their tool calls, output bytes and model tokens count here too."""
        with self._lock:
            self._charge(usage)

    def _charge(self, usage: Mapping[str, Any]) -> None:
        def count(key: str) -> int:
            value = usage.get(key)
            return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0

        self.tool_calls += count("tool_calls")
        self.output_bytes += count("output_bytes")
        self.prompt_tokens += count("prompt_tokens")
        self.completion_tokens += count("completion_tokens")
        self.cached_tokens += count("cached_tokens")
        for key in USAGE_KEYS:
            _metering(key, count(key))

    def reserve(self, runs: int) -> Reservation:
        """Hold an equal share of what is left of each limited consumable for each of ``runs``
        delegated runs, or raise ``budget_exhausted`` naming the resource when what is left (not
        spent, not held by another call) is less than one unit per run."""
        b = self.budget
        n = max(1, runs)
        with self._lock:
            spent = {
                "tool_calls": self.tool_calls,
                "output_bytes": self.output_bytes,
                "model_tokens": self.prompt_tokens + self.completion_tokens,
            }
            limits = {
                "tool_calls": b.max_tool_calls,
                "output_bytes": b.max_output_bytes,
                "model_tokens": b.max_model_tokens,
            }
            per: dict[str, int | None] = {}
            for resource in RESERVABLE:
                limit = limits[resource]
                if limit is None:
                    per[resource] = None
                    continue
                held = self.reserved[resource]
                left = limit - spent[resource] - held
                allotted = _allotment_left(resource)
                if allotted is not None and allotted < left:  # run elsewhere: what its session allotted
                    held, left = limit - spent[resource] - allotted, allotted
                if left < n:
                    raise BudgetExhausted(
                        f"Budget exhausted: {resource} {spent[resource]} of {limit} used{_held(held)}:"
                        f" {max(0, left)} left for {n} delegated run(s), at least 1 each",
                        resource=resource,
                        reason=f"{resource} limit {limit} reached",
                        consumed=spent[resource] + held,
                        limit=limit,
                    )
                per[resource] = left // n
            for resource, share in per.items():
                self.reserved[resource] += (share or 0) * n
            return Reservation(n, per)

    def hold_call(self, now_ms: int, *, delegates: bool = False) -> Reservation:
        """Admit one call that runs elsewhere (a workflow step as a fleet job) as ``check_before_call``
        does, but *hold* it instead of counting it: ``settle`` charges it with what it spent. A
        snapshot taken meanwhile (the one its worker starts from) does not count it, while every
        check here — a concurrent step's included — does.

        The reservation's ``allotment`` is all the call may spend there, for each limited resource:
        the call alone (no nested call, no model request), or, when the tool ``delegates``, also all
        that is left — held until it settles, so a concurrent call finds it held and is refused,
        as a second concurrent ``task`` call is embedded."""
        with _unmetered():
            crossed = self.check_before_call(now_ms)
        b = self.budget
        limits = {
            "tool_calls": b.max_tool_calls,
            "output_bytes": b.max_output_bytes,
            "model_tokens": b.max_model_tokens,
        }
        with self._lock:
            self.tool_calls -= 1
            self.reserved["tool_calls"] += 1
            self.held_calls += 1
            per: dict[str, int | None] = {"tool_calls": 1}
            if delegates:
                spent = {
                    "tool_calls": self.tool_calls,
                    "output_bytes": self.output_bytes,
                    "model_tokens": self.prompt_tokens + self.completion_tokens,
                }
                for resource, limit in limits.items():
                    if limit is not None:
                        left = max(0, limit - spent[resource] - self.reserved[resource])
                        self.reserved[resource] += left
                        per[resource] = (per.get(resource) or 0) + left
            allotment = Allotment(
                tool_calls=per["tool_calls"] if limits["tool_calls"] is not None else None,
                output_bytes=per.get("output_bytes") if delegates else None,
                # The call alone asks no model: a limited budget allots it no tokens.
                model_tokens=(per.get("model_tokens") or 0) if limits["model_tokens"] is not None else None,
            )
        return Reservation(1, per, call=True, allotment=allotment, crossed=crossed)

    def settle(self, reservation: Reservation, spent: Mapping[str, Any]) -> None:
        """End ``reservation``: release what it held and charge what its runs ``spent`` (a usage
        mapping, as ``charge_delegated``). A second settle of the same reservation does nothing."""
        with self._lock:
            if reservation.settled:
                return
            reservation.settled = True
            if reservation.call:
                self.held_calls = max(0, self.held_calls - 1)
            for resource, share in reservation.per_run.items():
                self.reserved[resource] = max(0, self.reserved[resource] - (share or 0) * reservation.runs)
            self._charge(spent)

    def check_before_model(self, now_ms: int) -> list[Threshold]:
        """Admit one model request or raise ``budget_exhausted`` (model tokens, wall time); returns
        newly crossed soft thresholds."""
        b = self.budget
        with self._lock:
            levels = (
                ("model_tokens", self.prompt_tokens + self.completion_tokens, b.max_model_tokens),
                ("wall_time_ms", now_ms - self.started_ms, b.max_wall_time_ms),
            )
            for resource, consumed, limit in levels:
                reserved = self.reserved.get(resource, 0)
                allotted = _allotment_left(resource) if resource == "model_tokens" else None
                if limit is not None and allotted is not None and allotted < limit - consumed - reserved:
                    # Run elsewhere: the rest is held for the session's other calls.
                    reserved = limit - consumed - allotted
                if limit is not None and consumed + reserved >= limit:
                    raise BudgetExhausted(
                        f"Budget exhausted: {resource} {consumed} of {limit} used" + _held(reserved),
                        resource=resource,
                        reason=f"{resource} limit {limit} reached",
                        consumed=consumed + reserved,
                        limit=limit,
                    )
            crossed: list[Threshold] = []
            for resource, consumed, limit in levels:
                if limit is None or resource in self._soft_sent:
                    continue
                if consumed >= limit * b.soft_ratio:
                    self._soft_sent.add(resource)
                    crossed.append(
                        Threshold(resource, "soft", consumed, limit, f"{resource} at {consumed} of {limit}")
                    )
            return crossed


@contextlib.contextmanager
def _unmetered() -> Iterator[None]:
    token = _METER.set(None)
    try:
        yield
    finally:
        _METER.reset(token)


def _held(reserved: int) -> str:
    return f", {reserved} held by running task calls" if reserved else ""


def _held_elsewhere(held: int) -> str:
    return f", {held} held by the session's other calls" if held > 0 else ""
