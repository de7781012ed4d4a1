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
    ├── RetrievalRequirementsNotMet retrieval_requirements_not_met{…}
    ├── ProviderError              provider_error{status}  (a model API refused a request: 4xx other than 408/429)
    └── InternalError              internal_error{exception, errno}  (a tool raised something untyped)

Messages and string fields are bounded where an error is built (``MAX_ERROR_FIELD_BYTES``, UTF-8
safe, with a marker), so a hostile argument echoed into an error cannot flood the model's context;
``bound_error_kind`` applies the same bound to hand-built ``error_kind`` dicts when the kernel
releases a result. ``error_from_exception`` is the one place an untyped exception (OSError, plain
ValueError, a handler's SystemExit…) becomes a typed error; see its docstring for the table.

Kinds are API: they are added, never renamed (``tests/kernel/test_errors.py`` pins the list).
Errors cross process boundaries as data: ``to_kind()`` gives the JSON ``error_kind`` dict and
``error_from_kind()`` rebuilds an error from a closed table, never by importing a class named in
the payload.
"""

from __future__ import annotations

import errno as errno_mod
from typing import Any, ClassVar

MAX_ERROR_FIELD_BYTES = 4096
MAX_ERROR_LIST_ITEMS = 32
MAX_ERROR_DEPTH = 4


def bound_text(text: str, max_bytes: int = MAX_ERROR_FIELD_BYTES) -> str:
    """``text`` cut to at most ``max_bytes`` UTF-8 bytes (on a character boundary) plus a marker."""
    if len(text) * 4 <= max_bytes:  # cheap exit: cannot be longer than max_bytes when encoded
        return text
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= max_bytes:
        return text
    end = max_bytes
    while end > 0 and data[end] & 0xC0 == 0x80:
        end -= 1
    return data[:end].decode("utf-8", "ignore") + f" …[{len(data) - end} more bytes]"


def bound_error_value(value: Any, depth: int = 0) -> Any:
    """Strings bounded, lists cut to ``MAX_ERROR_LIST_ITEMS``, nesting cut at ``MAX_ERROR_DEPTH``."""
    if isinstance(value, str):
        return bound_text(value)
    if depth >= MAX_ERROR_DEPTH and isinstance(value, (dict, list, tuple)):
        return bound_text(repr(value), 256)
    if isinstance(value, dict):
        items = list(value.items())[:MAX_ERROR_LIST_ITEMS]
        return {bound_text(str(k), 256): bound_error_value(v, depth + 1) for k, v in items}
    if isinstance(value, (list, tuple)):
        return [bound_error_value(v, depth + 1) for v in list(value)[:MAX_ERROR_LIST_ITEMS]]
    return value


def bound_error_kind(kind: dict[str, Any] | None) -> dict[str, Any] | None:
    """An ``error_kind`` with every string field bounded (for kinds built by hand, not by ``ToolError``)."""
    if not isinstance(kind, dict):
        return kind
    return {str(k): bound_error_value(v) for k, v in kind.items()}


class ToolError(Exception):
    """A failure the model (or host) can see and act on; becomes ``exit_code=1`` + ``error_kind``.

    The message and every string field are bounded here (``MAX_ERROR_FIELD_BYTES``): errors echo
    arguments, and arguments are the model's.
    """

    kind: ClassVar[str] = "tool_error"
    fields: ClassVar[tuple[str, ...]] = ()

    def __init__(self, message: str, /, **data: Any) -> None:
        message = bound_text(str(message))
        super().__init__(message)
        self.message = message
        self.data: dict[str, Any] = {name: bound_error_value(data.get(name)) for name in self.fields}
        extra = {k: bound_error_value(v) for k, v in data.items() if k not in self.fields}
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


class ProviderError(ToolError):
    """A model API answered with a status that is neither retryable nor throttling (400, 401, 404…).

    Classified from the typed status only, never from the body (SPEC A-3, REFERENCE 4.14).
    """

    kind = "provider_error"
    fields = ("status",)


class InternalError(ToolError):
    """A tool (or hook) raised an exception that is not a ``ToolError``: a bug or an unmapped failure.

    ``exception`` names the exception type; ``errno`` the symbolic errno of an unmapped ``OSError``.
    The traceback goes to the ``kernel`` logger, never into the result.
    """

    kind = "internal_error"
    fields = ("exception", "errno")


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
        ProviderError,
        InternalError,
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


# errno → the closest kind (``error_from_exception``). Everything else is ``internal_error``.
_NOT_FOUND_ERRNOS = frozenset({errno_mod.ENOENT, errno_mod.ENOTDIR})
_INVALID_ERRNOS = frozenset(
    {
        errno_mod.ENAMETOOLONG,
        errno_mod.ELOOP,
        errno_mod.EINVAL,
        errno_mod.EISDIR,
        errno_mod.EEXIST,
        errno_mod.ENOTEMPTY,
        errno_mod.EXDEV,
        errno_mod.EFBIG,
        errno_mod.ENXIO,
        errno_mod.ESPIPE,
        errno_mod.EILSEQ,
    }
)
_DENIED_ERRNOS = frozenset({errno_mod.EACCES, errno_mod.EPERM, errno_mod.EROFS, errno_mod.ETXTBSY})
_TRANSPORT_ERRNOS = frozenset(
    {
        errno_mod.ECONNREFUSED,
        errno_mod.ECONNRESET,
        errno_mod.ECONNABORTED,
        errno_mod.EPIPE,
        errno_mod.ENETUNREACH,
        errno_mod.EHOSTUNREACH,
        errno_mod.ENETDOWN,
        errno_mod.EADDRNOTAVAIL,
    }
)


def error_from_exception(exc: BaseException, op: str) -> ToolError:
    """The typed error for an exception a tool (or hook) raised; ``op`` is the tool name.

    ========================================  ===========================================
    exception                                 kind
    ========================================  ===========================================
    ``ToolError``                             itself
    ``FileNotFoundError``, ENOENT, ENOTDIR    ``not_found{path}``
    ENAMETOOLONG, ELOOP, EINVAL, EISDIR, …    ``invalid_argument``
    EACCES, EPERM, EROFS, ETXTBSY             ``permission_denied{reason: "os_permission"}``
    ETIMEDOUT, ``TimeoutError``               ``timeout{op, duration_ms: None}``
    ECONNREFUSED, ECONNRESET, EPIPE, …        ``transport{op}``
    other ``OSError`` (ENOSPC, EIO, EMFILE…)  ``internal_error{exception, errno}``
    ``ValueError`` (``UnicodeError`` too)     ``invalid_argument``
    ``RecursionError``                        ``invalid_argument`` (input nested too deeply)
    anything else — ``SystemExit``,           ``internal_error{exception}``
    ``KeyboardInterrupt``, ``TypeError``,
    ``KeyError``, ``AssertionError``, …
    ========================================  ===========================================

    Messages name the exception type and carry ``str(exc)`` (bounded), never a traceback.
    """
    if isinstance(exc, ToolError):
        return exc
    name = type(exc).__name__
    detail = str(exc).strip()
    text = f"{name}: {detail}" if detail else name
    if isinstance(exc, OSError) and not isinstance(exc, TimeoutError):
        code = exc.errno
        sym = errno_mod.errorcode.get(code, str(code)) if isinstance(code, int) else None
        path = exc.filename if isinstance(exc.filename, str) else None
        where = f"Tool '{op}' failed: {exc.strerror or detail or name}" + (f": {path}" if path else "")
        if code in _NOT_FOUND_ERRNOS:
            return NotFound(where, path=path)
        if code in _INVALID_ERRNOS:
            return InvalidArgument(where + f" ({sym})")
        if code in _DENIED_ERRNOS:
            return PermissionDenied(where + f" ({sym})", reason="os_permission")
        if code == errno_mod.ETIMEDOUT:
            return Timeout(where, op=op, duration_ms=None)
        if code in _TRANSPORT_ERRNOS:
            return Transport(where + f" ({sym})", op=op)
        return InternalError(f"Tool '{op}' failed: {text}", exception=name, errno=sym)
    if isinstance(exc, TimeoutError):
        return Timeout(f"Tool '{op}' timed out: {text}", op=op, duration_ms=None)
    if isinstance(exc, RecursionError):
        return InvalidArgument(f"Tool '{op}' failed: input nested too deeply ({name})")
    if isinstance(exc, ValueError):
        return InvalidArgument(f"Tool '{op}' failed: {text}")
    return InternalError(f"Tool '{op}' failed with an internal error: {text}", exception=name, errno=None)
