"""One tool call as the kernel carries it through the K-3 stages (``Invocation``), and what a
stage may catch from user code and still turn into a failed result (``CONTAINED``, SPEC K-8)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from kernel.origin import ControlPlane, Origin, is_governed
from kernel.registry import ScopedRegistry

# What a tool, hook or handler may raise that must still become a failed result (SPEC K-8): every
# Exception, plus the two BaseExceptions a library raises on its own (argparse's SystemExit, a
# handler's KeyboardInterrupt). CancelledError (and GeneratorExit) keep their meaning.
CONTAINED = (Exception, SystemExit, KeyboardInterrupt)


# How an inline call awaits something (a hook's awaitable): run it on the loop, block until done.
RunOnLoop = Callable[[Awaitable[Any]], Any]


@dataclass(slots=True)
class Invocation:
    """One call: who asked (origin), what, where it sits in the call tree, and its limits."""

    name: str
    args: Any
    origin: Origin
    plane: ControlPlane | None
    call_id: str
    scope: ScopedRegistry
    parent_call_id: str | None = None
    depth: int = 0
    stack: tuple[str, ...] = ()
    deadline: float | None = None
    tags: dict[str, Any] | None = None  # extra tool_start data (the agent loop's model call id, step)
    # Set for a call running on its synchronous caller's thread (``Kernel.invoke_host_inline``).
    inline: RunOnLoop | None = None
    governed: bool = field(init=False)

    def __post_init__(self) -> None:
        self.governed = is_governed(self.origin, self.plane)
