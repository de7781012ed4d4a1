"""Session budget (SPEC K-3): tool calls, output bytes, wall time and model tokens, checked before
side effects.

``check_before_call`` answers ``ok`` / ``soft`` (crossed ``soft_ratio`` for the first time: an event,
the call goes on) / raises ``budget_exhausted`` (hard: the call is rejected before it runs).
Output bytes are charged after projection, so the next call sees them. The agent loop charges each
model response's usage (``charge_model``) and asks ``check_before_model`` before the next request:
``max_model_tokens`` bounds prompt + completion tokens over the session (cached prompt tokens count:
they are still context the model read). ``charge_delegated`` adds what delegated ``task`` children
spent: their budgets were shares of this one.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kernel.errors import BudgetExhausted

DEFAULT_SOFT_RATIO = 0.8


@dataclass(frozen=True, slots=True)
class Budget:
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


@dataclass(frozen=True, slots=True)
class Threshold:
    resource: str
    kind: str  # "soft" | "hard"
    consumed: int
    limit: int
    message: str


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
            levels = (
                ("tool_calls", self.tool_calls + 1, b.max_tool_calls),
                ("output_bytes", self.output_bytes, b.max_output_bytes),
                ("wall_time_ms", now_ms - self.started_ms, b.max_wall_time_ms),
            )
            for resource, consumed, limit in levels:
                if limit is None:
                    continue
                over = consumed > limit if resource == "tool_calls" else consumed >= limit
                if over:
                    raise BudgetExhausted(
                        f"Budget exhausted: {resource} {consumed if resource != 'tool_calls' else consumed - 1}"
                        f" of {limit} used",
                        resource=resource,
                        reason=f"{resource} limit {limit} reached",
                        consumed=consumed,
                        limit=limit,
                    )
            self.tool_calls += 1
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

    def wall_time_left_ms(self, now_ms: int) -> int | None:
        """What is left of ``max_wall_time_ms`` (None: no limit): a running call's deadline too."""
        limit = self.budget.max_wall_time_ms
        return None if limit is None else limit - (now_ms - self.started_ms)

    def charge_output(self, nbytes: int) -> None:
        with self._lock:
            self.output_bytes += nbytes

    def charge_model(self, prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> None:
        with self._lock:
            self.prompt_tokens += prompt_tokens
            self.completion_tokens += completion_tokens
            self.cached_tokens += cached_tokens

    def charge_delegated(self, usage: Mapping[str, Any]) -> None:
        """What delegated child runs spent (their ``TaskResult.usage``): their shares came out of
        this budget, so their tool calls, output bytes and model tokens count here too."""

        def count(key: str) -> int:
            value = usage.get(key)
            return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0

        with self._lock:
            self.tool_calls += count("tool_calls")
            self.output_bytes += count("output_bytes")
            self.prompt_tokens += count("prompt_tokens")
            self.completion_tokens += count("completion_tokens")
            self.cached_tokens += count("cached_tokens")

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
                if limit is not None and consumed >= limit:
                    raise BudgetExhausted(
                        f"Budget exhausted: {resource} {consumed} of {limit} used",
                        resource=resource,
                        reason=f"{resource} limit {limit} reached",
                        consumed=consumed,
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
