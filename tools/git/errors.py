"""The one place pygit2 failures become kernel errors (CONVENTIONS §9).

pygit2 raises ``GitError`` and its subclasses, which also derive from ``KeyError``
(``NotFoundError``) or ``ValueError`` (``AlreadyExistsError``, ``InvalidSpecError``,
``InvalidError``, ``AmbiguousError``), plus bare ``KeyError``/``ValueError``/``OSError`` from its
Python layer. ``translate_git_error`` maps every one of them, by class, never by message text:

    ToolError (already typed)      → itself
    AuthError                      → permission_denied
    CertificateError               → transport{op: "git"}
    KeyError (NotFoundError, …)    → not_found
    ValueError (AlreadyExists, InvalidSpec, Invalid, Ambiguous, …) → invalid_argument
    GitError (generic libgit2)     → an untyped ToolError (the reference's ``Backend(_)``: no kind)
    OSError                        → an untyped ToolError

``git_errors()`` applies it around a block: ``raise translated from original``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pygit2

from kernel.errors import InvalidArgument, NotFound, PermissionDenied, ToolError, Transport

GIT_OP = "git"
# What the edge catches; anything else is a bug and propagates untouched.
FOREIGN_ERRORS: tuple[type[BaseException], ...] = (pygit2.GitError, KeyError, ValueError, OSError)


def _message(exc: BaseException) -> str:
    # KeyError's str() is the repr of its argument ("'x'"): use the argument itself.
    if isinstance(exc, KeyError) and len(exc.args) == 1:
        return str(exc.args[0])
    return str(exc) or type(exc).__name__


def translate_git_error(exc: BaseException) -> ToolError:
    """The kernel error for a pygit2 (or Python-layer) failure; total over ``FOREIGN_ERRORS``."""
    if isinstance(exc, ToolError):
        return exc
    msg = _message(exc)
    if isinstance(exc, pygit2.AuthError):
        return PermissionDenied(f"git authentication failed: {msg}", reason=msg)
    if isinstance(exc, pygit2.CertificateError):
        return Transport(f"git transport failed: {msg}", op=GIT_OP)
    if isinstance(exc, KeyError):
        return NotFound(f"git: not found: {msg}", path=msg)
    if isinstance(exc, ValueError):
        return InvalidArgument(f"git: {msg}")
    if isinstance(exc, pygit2.GitError):
        return ToolError(f"git: {msg}")
    if isinstance(exc, OSError):
        return ToolError(f"git: I/O error: {msg}")
    raise TypeError(f"not a git failure: {type(exc).__name__}") from exc


@contextmanager
def git_errors() -> Iterator[None]:
    """Translate foreign failures raised inside the block (typed ToolErrors pass through)."""
    try:
        yield
    except ToolError:
        raise
    except FOREIGN_ERRORS as exc:
        raise translate_git_error(exc) from exc
