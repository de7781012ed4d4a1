"""Fakes that ship with the code (CONVENTIONS §14): a fake clock, a recording sink, a tool context.

``make_context`` builds a ``ToolContext`` for running one tool body directly in a test;
``kernel.testing.run_tool`` (below) runs a tool through a real kernel with a one-tool registry.
"""

from __future__ import annotations

import time
from typing import Any

from kernel.artifacts import ArtifactStore, MemoryArtifactStore
from kernel.clock import RandomIds
from kernel.context import NestedInvoker, ToolContext
from kernel.errors import Unsupported
from kernel.events import MemoryEventSink
from kernel.origin import ControlPlane, Origin
from kernel.result import ToolResult
from kernel.workspace import Workspace


class FakeClock:
    """A clock tests move by hand: ``advance(seconds)``."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._wall_ms = start_ms
        self._mono = 1000.0

    def now_ms(self) -> int:
        return self._wall_ms

    def monotonic(self) -> float:
        return self._mono

    def advance(self, seconds: float) -> None:
        self._mono += seconds
        self._wall_ms += int(seconds * 1000)


class RealClock:
    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic(self) -> float:
        return time.monotonic()


RecordingSink = MemoryEventSink


async def _no_nested(name: str, args: dict[str, Any]) -> ToolResult:
    raise Unsupported(f"nested calls are not available in this test context (tried {name})")


def make_context(
    workspace: Workspace,
    *,
    tool_name: str = "test",
    origin: Origin = Origin.HOST_DIRECT,
    control_plane: ControlPlane | None = ControlPlane.TRUSTED,
    timeout_s: float = 60.0,
    artifacts: ArtifactStore | None = None,
    services: dict[str, Any] | None = None,
    session_state: dict[str, Any] | None = None,
    settings: Any = None,
    deltas: list[Any] | None = None,
) -> ToolContext:
    clock = RealClock()
    ids = RandomIds()
    sink = deltas if deltas is not None else []
    return ToolContext(
        session_id="test-session",
        call_id=ids("call"),
        tool_name=tool_name,
        origin=origin,
        control_plane=control_plane if origin is Origin.HOST_DIRECT else None,
        workspace=workspace,
        artifacts=artifacts if artifacts is not None else MemoryArtifactStore(),  # an empty store is falsy
        clock=clock,
        new_id=ids,
        deadline=clock.monotonic() + timeout_s,
        invoker=NestedInvoker(_no_nested, lambda: [], lambda n, a: None),
        emit_delta=sink.append,
        session_state=session_state if session_state is not None else {},
        services=services or {},
        settings=settings,
    )
