"""Invocation lifecycle (REFERENCE §5.2): exactly one terminal transition.

``created → admitted → gate_pending → running → completed|rejected|cancelled|failed``; a terminal
state is reachable from any earlier state; any transition after a terminal one is a kernel fault.
"""

from __future__ import annotations

from enum import StrEnum

from kernel.errors import (
    BudgetExhausted,
    Cancelled,
    ConfirmationRejected,
    HookDenied,
    KernelFault,
    PermissionDenied,
    ToolError,
)


class State(StrEnum):
    CREATED = "created"
    ADMITTED = "admitted"
    GATE_PENDING = "gate_pending"
    RUNNING = "running"
    COMPLETED = "completed"
    REJECTED = "rejected"
    CANCELLED = "cancelled"
    FAILED = "failed"


TERMINAL = frozenset({State.COMPLETED, State.REJECTED, State.CANCELLED, State.FAILED})
_ORDER = {State.CREATED: 0, State.ADMITTED: 1, State.GATE_PENDING: 2, State.RUNNING: 3}


class Lifecycle:
    __slots__ = ("history", "state")

    def __init__(self) -> None:
        self.state = State.CREATED
        self.history: list[State] = [State.CREATED]

    def to(self, new: State) -> None:
        if self.state in TERMINAL:
            raise KernelFault(f"invocation already terminal ({self.state.value}); cannot move to {new.value}")
        if new not in TERMINAL and _ORDER[new] <= _ORDER[self.state]:
            raise KernelFault(f"invalid lifecycle transition {self.state.value} -> {new.value}")
        self.state = new
        self.history.append(new)

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL


def terminal_state(err: ToolError) -> State:
    """The terminal state of a call that ended with ``err``: refused before running, cancelled, or failed."""
    if isinstance(err, (PermissionDenied, ConfirmationRejected, HookDenied, BudgetExhausted)):
        return State.REJECTED
    if isinstance(err, Cancelled):
        return State.CANCELLED
    return State.FAILED
