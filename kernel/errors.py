"""Typed tool errors with stable wire kinds (SPEC K-8, CONVENTIONS §7-§8).

The tree::

    ToolError                      base; ``kind`` is the wire ``type`` of ``error_kind``
    ├── InvalidArgument            invalid_argument{message}
    ├── NotFound                   not_found{path}
    ├── Unsupported                unsupported{message}
    ├── Timeout                    timeout{op, duration_ms}
    ├── Transport                  transport{op}
    ├── RateLimited                rate_limited{retry_after_ms}
    ├── Cancelled                  cancelled{op}
    ├── HookDenied                 hook_denied{reason, retryable, retry_after_ms}
    ├── PartialFailure             partial_failure{failed, total}
    ├── VersionConflict            version_conflict{path, expected, actual}
    ├── PermissionDenied           permission_denied{reason}
    ├── ConfirmationRejected       confirmation_rejected{reason}
    ├── BudgetExhausted            budget_exhausted{resource, reason}
    ├── PathOutsideWorkspace       path_outside_workspace{path}
    ├── RecursionLimit             recursion_limit{tool, depth}
    └── RetrievalRequirementsNotMet retrieval_requirements_not_met{…}

Kinds are API: they are added, never renamed (``tests/kernel/test_errors.py`` pins the list).
Errors cross process boundaries as data: ``to_kind()`` gives the JSON ``error_kind`` dict and
``error_from_kind()`` rebuilds an error from a closed table, never by importing a class named in
the payload.
"""

from __future__ import annotations

from typing import Any, ClassVar


class ToolError(Exception):
    """A failure the model (or host) can see and act on; becomes ``exit_code=1`` + ``error_kind``."""

    kind: ClassVar[str] = "tool_error"
    fields: ClassVar[tuple[str, ...]] = ()

    def __init__(self, message: str, /, **data: Any) -> None:
        super().__init__(message)
        self.message = message
        self.data: dict[str, Any] = {name: data.get(name) for name in self.fields}
        extra = {k: v for k, v in data.items() if k not in self.fields}
        self.data.update(extra)

    def to_kind(self) -> dict[str, Any]:
        """The wire ``error_kind``: ``{"type": kind, **fields}`` (None fields kept, JSON-safe)."""
        return {"type": self.kind, **self.data}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, {self.data!r})"


class InvalidArgument(ToolError):
    kind = "invalid_argument"
    fields = ("message",)

    def __init__(self, message: str, /, **data: Any) -> None:
        data.setdefault("message", message)
        super().__init__(message, **data)


class NotFound(ToolError):
    kind = "not_found"
    fields = ("path",)


class Unsupported(ToolError):
    kind = "unsupported"
    fields = ("message",)

    def __init__(self, message: str, /, **data: Any) -> None:
        data.setdefault("message", message)
        super().__init__(message, **data)


class Timeout(ToolError):
    kind = "timeout"
    fields = ("op", "duration_ms")


class Transport(ToolError):
    kind = "transport"
    fields = ("op",)


class RateLimited(ToolError):
    kind = "rate_limited"
    fields = ("retry_after_ms",)


class Cancelled(ToolError):
    kind = "cancelled"
    fields = ("op",)


class HookDenied(ToolError):
    kind = "hook_denied"
    fields = ("reason", "retryable", "retry_after_ms")


class PartialFailure(ToolError):
    kind = "partial_failure"
    fields = ("failed", "total")


class VersionConflict(ToolError):
    kind = "version_conflict"
    fields = ("path", "expected", "actual")


class PermissionDenied(ToolError):
    kind = "permission_denied"
    fields = ("reason",)


class ConfirmationRejected(ToolError):
    kind = "confirmation_rejected"
    fields = ("reason",)


class BudgetExhausted(ToolError):
    kind = "budget_exhausted"
    fields = ("resource", "reason")


class PathOutsideWorkspace(ToolError):
    kind = "path_outside_workspace"
    fields = ("path",)


class RecursionLimit(ToolError):
    kind = "recursion_limit"
    fields = ("tool", "depth")


class RetrievalRequirementsNotMet(ToolError):
    kind = "retrieval_requirements_not_met"
    fields = ()


# The closed table: the only classes ``error_from_kind`` will ever build.
ERROR_KINDS: dict[str, type[ToolError]] = {
    cls.kind: cls
    for cls in (
        InvalidArgument,
        NotFound,
        Unsupported,
        Timeout,
        Transport,
        RateLimited,
        Cancelled,
        HookDenied,
        PartialFailure,
        VersionConflict,
        PermissionDenied,
        ConfirmationRejected,
        BudgetExhausted,
        PathOutsideWorkspace,
        RecursionLimit,
        RetrievalRequirementsNotMet,
    )
}


def error_from_kind(error_kind: dict[str, Any] | None, message: str) -> ToolError:
    """Rebuild a typed error from wire data; unknown kinds become a plain ``ToolError``."""
    if not error_kind:
        return ToolError(message)
    data = {k: v for k, v in error_kind.items() if k != "type"}
    cls = ERROR_KINDS.get(str(error_kind.get("type")))
    if cls is None:
        err = ToolError(message, **data)
        err.data["type"] = error_kind.get("type")
        return err
    return cls(message, **data)


class KernelFault(Exception):
    """A broken invariant or store: raised to the host, never shown to the model as a result."""
