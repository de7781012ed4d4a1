"""``ToolContext``: everything a tool body may touch, handed in by the kernel (CONVENTIONS §6, §11).

A tool never reaches for globals: the workspace, artifact store, clock, ids, runtimes (``services``:
sandbox, HTTP transport, LLM client, retrieval index, shared state store), per-session tool state,
the deadline and cancellation all arrive here. Nested calls go back through the kernel with
``await ctx.invoke(name, args)``; the kernel — not the tool — decides the child's origin.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kernel.capabilities import ToolCapabilities
from kernel.clock import Clock
from kernel.origin import ControlPlane, Origin, is_governed

if TYPE_CHECKING:
    from kernel.artifacts import ArtifactStore
    from kernel.budget import BudgetTracker
    from kernel.result import ToolResult
    from kernel.workspace import Workspace


class NestedInvoker:
    """The scoped invoker a tool uses for nested calls (bound to one parent call by the kernel)."""

    def __init__(
        self,
        invoke: Callable[[str, dict[str, Any]], Awaitable[ToolResult]],
        names: Callable[[], list[str]],
        capabilities: Callable[[str, dict[str, Any]], ToolCapabilities | None],
        narrow: Callable[[list[str]], NestedInvoker] | None = None,
    ) -> None:
        self._invoke = invoke
        self._names = names
        self._capabilities = capabilities
        self._narrow = narrow

    async def invoke(self, name: str, args: dict[str, Any]) -> ToolResult:
        return await self._invoke(name, args)

    def available_tools(self) -> list[str]:
        return self._names()

    def capabilities_of(self, name: str, args: dict[str, Any]) -> ToolCapabilities | None:
        """Declared capabilities for a prospective call, or None when unknown/invalid."""
        return self._capabilities(name, args)

    def narrowed(self, allowed: list[str]) -> NestedInvoker:
        """An invoker whose scope is this one intersected with ``allowed`` (program allow-lists)."""
        if self._narrow is None:
            raise RuntimeError("this invoker cannot be narrowed")
        return self._narrow(allowed)


class CancelFlag(threading.Event):
    """``threading.Event`` whose condition variable is made only when somebody waits on it.

    Every call gets one (``ToolContext.cancelled``) but few calls ever wait on it; an Event's
    Condition + Lock cost more than the rest of a no-op call's context (issue 13 item 7).
    """

    _make_lock = threading.Lock()

    def __init__(self) -> None:  # no Event.__init__: the condition comes with the first wait()
        self._flag = False
        self._cond: threading.Condition | None = None

    def _condition(self) -> threading.Condition:
        cond = self._cond
        if cond is None:
            with CancelFlag._make_lock:
                if self._cond is None:
                    self._cond = threading.Condition(threading.Lock())
                cond = self._cond
        return cond

    def set(self) -> None:
        self._flag = True  # before reading _cond: a waiter that made it meanwhile sees the flag
        cond = self._cond
        if cond is not None:
            with cond:
                cond.notify_all()

    def clear(self) -> None:
        cond = self._cond
        if cond is None:
            self._flag = False
            return
        with cond:
            self._flag = False

    def wait(self, timeout: float | None = None) -> bool:
        cond = self._condition()
        with cond:
            signaled = self._flag
            if not signaled:
                signaled = cond.wait(timeout)
            return signaled

    def _at_fork_reinit(self) -> None:
        if self._cond is not None:
            self._cond._at_fork_reinit()  # type: ignore[attr-defined]


@dataclass(eq=False)
class ToolContext:
    """What a running tool body gets besides its parameters: ids, origin, workspace, limits, services."""

    session_id: str
    call_id: str
    tool_name: str
    origin: Origin
    control_plane: ControlPlane | None
    workspace: Workspace
    artifacts: ArtifactStore
    clock: Clock
    new_id: Callable[[str], str]
    deadline: float
    invoker: NestedInvoker
    emit_delta: Callable[[Any], None]
    session_state: dict[str, Any]
    services: dict[str, Any]
    settings: Any = None
    parent_call_id: str | None = None
    depth: int = 0
    # Set when the call is cancelled or times out; thread-offloaded work polls it.
    cancelled: threading.Event = field(default_factory=CancelFlag)
    # A session event of this call other than output deltas (``task``: ``subagent_start``/``_end``).
    emit_event: Callable[[str, dict[str, Any]], None] | None = None
    # The session's budget tracker (``task`` gives each child a share of what is left).
    budget: BudgetTracker | None = None

    @property
    def governed(self) -> bool:
        """True when model-side policy applies (agent, governed_nested, governed host-direct)."""
        return is_governed(self.origin, self.control_plane)

    def remaining_s(self) -> float:
        return max(0.0, self.deadline - self.clock.monotonic())

    async def invoke(self, name: str, args: dict[str, Any]) -> ToolResult:
        """A nested call through the kernel (``InvocationRuntime.invoke_tool``)."""
        return await self.invoker.invoke(name, args)

    def service(self, key: str) -> Any:
        """A runtime the session was built with; KeyError names what is missing."""
        try:
            return self.services[key]
        except KeyError:
            raise KeyError(f"service {key!r} is not configured for this session") from None
