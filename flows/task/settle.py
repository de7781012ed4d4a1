"""What a ``task`` call's children cost their parent (SPEC K-3, X-3).

A call reserves its children's shares when it starts (``kernel.budget.BudgetTracker.reserve``) and is
settled once when it ends — returned, failed or cancelled: the reservation is released and the
parent is charged what each child spent, taken from the best evidence there is:

1. what the child's session counted (in this process, recorded when the child ended, cancelled
   included) or its ``TaskResult.usage`` (a finished child, wherever it ran);
2. its whole share, for a child that started but whose spend never came back (a fleet job cut off by
   the fan-in, a lost job): it may have spent all of it, and the parent's budget is never overspent;
3. nothing, for a child that never started.

A background child reports later, not to its call: the share it was handed is charged when it starts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kernel.budget import Reservation

USAGE_KEYS = ("tool_calls", "output_bytes", "prompt_tokens", "completion_tokens", "cached_tokens")


def known_spend(usage: Any) -> dict[str, int] | None:
    """A child's usage when it says what the child's session spent (its tool calls are counted),
    else None (an aborted child's result carries no spend)."""
    if not isinstance(usage, Mapping) or "tool_calls" not in usage:
        return None
    out = {}
    for key in USAGE_KEYS:
        value = usage.get(key)
        out[key] = value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
    return out


def total(spends: Iterable[Mapping[str, int]]) -> dict[str, int]:
    out = dict.fromkeys(USAGE_KEYS, 0)
    for spend in spends:
        for key in USAGE_KEYS:
            out[key] += int(spend.get(key) or 0)
    return out


def whole_share(reservation: Reservation | None) -> dict[str, int]:
    """One child's whole share, as a usage mapping (model tokens counted as prompt tokens)."""
    if reservation is None:
        return {}
    one = Reservation(1, dict(reservation.per_run))
    return one.whole()


def child_spend(
    reservation: Reservation | None,
    index: int,
    *,
    recorded: Mapping[int, Mapping[str, int]],
    reported: Mapping[int, Any],
    started: Iterable[int] | None,
) -> dict[str, int]:
    """What child ``index`` is charged (the module docstring's order). ``started`` None: the runner
    does not say which started, so a child without a reported spend counts as never started."""
    if index in recorded:
        return dict(recorded[index])
    spend = known_spend(reported.get(index))
    if spend is not None:
        return spend
    if started is not None and index in set(started):
        return whole_share(reservation)
    return {}


def settle(tracker: Any, reservation: Reservation | None, spent: Mapping[str, int]) -> None:
    """End ``reservation`` on ``tracker``, charging ``spent`` (without a reservation: just charge)."""
    if tracker is None:
        return
    if reservation is None:
        tracker.charge_delegated(spent)
    else:
        tracker.settle(reservation, spent)


def reported_usage(tasks: Any) -> dict[int, Any]:
    """index → ``usage`` of the ``TaskResult`` JSONs in a call's ``metadata.tasks``."""
    out: dict[int, Any] = {}
    for child in tasks or ():
        if isinstance(child, dict) and isinstance(child.get("index"), int):
            out[child["index"]] = child.get("usage")
    return out
