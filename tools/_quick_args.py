"""Building blocks of a tool's ``quick`` validator (``kernel.spec.DeferredParams``).

A ``quick`` validator takes ordinary arguments — exact JSON types, known keys, values inside their
bounds — without importing pydantic, and leaves everything else to the tool's pydantic model by
raising ``Defer``: the model then accepts the arguments or words the error (K-4), so a ``quick``
validator never has to phrase one. Each check below accepts a subset of what pydantic's strict
mode accepts for the same field, and gives the same value.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

T = TypeVar("T")


class Defer(Exception):
    """Leave these arguments to the model."""


def quick(build: Callable[[Mapping[str, Any]], T]) -> Callable[[dict[str, Any]], T | None]:
    """``build`` as a ``DeferredParams.quick``: its value, or ``None`` when it raised ``Defer``."""

    def run(args: dict[str, Any]) -> T | None:
        try:
            return build(args)
        except Defer:
            return None

    return run


def only(args: Mapping[str, Any], keys: frozenset[str]) -> None:
    """Unknown keys (``extra="forbid"``): the model's error."""
    if not args.keys() <= keys:
        raise Defer


def string(value: Any, *, min_length: int = 0, max_length: int | None = None) -> str:
    """A ``str`` field (``Field(min_length=…, max_length=…)``): exactly ``str``, in UTF-8 (a lone
    surrogate has no JSON form), its length in code points within the bounds."""
    if (
        type(value) is not str
        or len(value) < min_length
        or (max_length is not None and len(value) > max_length)
    ):
        raise Defer
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise Defer from None
    return value


def integer(value: Any, *, ge: int | None = None, le: int | None = None) -> int:
    """An ``int`` field (``Field(ge=…, le=…)``): exactly ``int`` (strict mode takes no bool)."""
    if type(value) is not int or (ge is not None and value < ge) or (le is not None and value > le):
        raise Defer
    return value


def optional(value: Any, check: Callable[..., T], **bounds: Any) -> T | None:
    """A ``T | None`` field: ``None`` (given or absent) or what ``check`` accepts."""
    return None if value is None else check(value, **bounds)
