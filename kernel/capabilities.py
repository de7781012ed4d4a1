"""Per-call scheduling capabilities (SPEC K-5, REFERENCE §3).

A tool computes them from its validated arguments (an ``edit`` with ``dry_run`` is read-only).
``batch`` fans out only calls whose capabilities ``allows_parallel_batch``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

OutputKind = Literal["text", "structured", "diff", "mixed"]


@dataclass(frozen=True, slots=True)
class ToolCapabilities:
    """Per-call scheduling capabilities of a tool (SPEC K-5)."""

    read_only: bool = False
    idempotent: bool = False
    resumable: bool = False
    cancel_safe: bool = False
    paginated: bool = False
    max_parallelism: int = 1
    output_kind: OutputKind = "text"

    @classmethod
    def conservative(cls) -> ToolCapabilities:
        """Every flag false, parallelism 1: the default for any tool that says nothing."""
        return cls()

    @classmethod
    def read_only_paginated(cls, max_parallelism: int) -> ToolCapabilities:
        return cls(True, True, True, True, True, max_parallelism, "text")

    @classmethod
    def parallel_safe_read(cls, max_parallelism: int) -> ToolCapabilities:
        return cls(True, True, False, True, False, max_parallelism, "text")

    def with_output(self, output_kind: OutputKind) -> ToolCapabilities:
        return replace(self, output_kind=output_kind)

    @property
    def allows_parallel_batch(self) -> bool:
        return self.read_only and self.idempotent and self.cancel_safe and self.max_parallelism > 1

    def to_json(self) -> dict[str, object]:
        return {
            "read_only": self.read_only,
            "idempotent": self.idempotent,
            "resumable": self.resumable,
            "cancel_safe": self.cancel_safe,
            "paginated": self.paginated,
            "max_parallelism": self.max_parallelism,
            "output_kind": self.output_kind,
        }
