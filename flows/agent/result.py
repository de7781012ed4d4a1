"""What one agent run returns (``RunResult``) and records per tool call (``ToolCallRecord``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from flows.providers.types import Usage

# stop_reason values
END_TURN = "end_turn"  # the model answered without tool calls: success
MAX_STEPS = "max_steps"
ERROR = "error"
CANCELLED = "cancelled"
TIMEOUT = "timeout"
SUSPENDED = "suspended"  # a tool asked the run to wait (a3s_suspend); the conversation keeps it pending


@dataclass(frozen=True, slots=True)
class ToolCallRecord:
    tool: str
    call_id: str  # the kernel's call id (events)
    model_call_id: str  # the id the model gave the call
    exit_code: int
    error_kind: dict[str, Any] | None
    duration_ms: int
    step: int

    def to_json(self) -> dict[str, Any]:
        return {
            "tool": self.tool,
            "exit_code": self.exit_code,
            "call_id": self.call_id,
            "model_call_id": self.model_call_id,
            "error_kind": self.error_kind,
            "duration_ms": self.duration_ms,
            "step": self.step,
        }


@dataclass(slots=True)
class RunResult:
    text: str
    success: bool
    steps: int
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    error: dict[str, Any] | None = None  # the error_kind that ended the run; None on success
    stop_reason: str = END_TURN
    session_id: str = ""
    run_id: str = ""
    model: str = ""
    message: str = ""  # one human-readable line when the run failed

    def to_json(self) -> dict[str, Any]:
        return {
            "success": self.success,
            "text": self.text,
            "session_id": self.session_id,
            "run_id": self.run_id,
            "model": self.model,
            "steps": self.steps,
            "stop_reason": self.stop_reason,
            "tool_calls": [c.to_json() for c in self.tool_calls],
            "usage": self.usage.to_json(),
            "error": self.error,
            "message": self.message,
        }
