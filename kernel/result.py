"""``ToolResult``: what every invocation returns, in every origin and every process (SPEC X-1, K-8).

A result is plain data: ``output`` (already projected, R), ``exit_code`` (0 = success), ``metadata``
(always carries ``a3s_tool_result_evidence`` once it left the kernel) and ``error_kind`` (the typed
failure, ``{"type": …}``, or None). ``to_json``/``from_json`` are the only way it crosses Celery.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kernel.errors import ToolError


@dataclass(slots=True)
class ToolResult:
    """The outcome of one tool call: output, exit code, metadata, typed error kind, trust."""

    name: str
    output: str
    exit_code: int = 0
    metadata: dict[str, Any] = field(default_factory=dict)
    error_kind: dict[str, Any] | None = None
    trust: str = "workspace_data"

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    @classmethod
    def success(cls, name: str, output: str, metadata: dict[str, Any] | None = None) -> ToolResult:
        return cls(name=name, output=output, exit_code=0, metadata=metadata or {})

    @classmethod
    def failure(cls, name: str, error: ToolError, metadata: dict[str, Any] | None = None) -> ToolResult:
        meta = dict(metadata or {})
        return cls(name=name, output=error.message, exit_code=1, metadata=meta, error_kind=error.to_kind())

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "output": self.output,
            "exit_code": self.exit_code,
            "metadata": self.metadata,
            "error_kind": self.error_kind,
            "trust": self.trust,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ToolResult:
        return cls(
            name=str(data["name"]),
            output=str(data["output"]),
            exit_code=int(data["exit_code"]),
            metadata=dict(data.get("metadata") or {}),
            error_kind=data.get("error_kind"),
            trust=str(data.get("trust", "workspace_data")),
        )
