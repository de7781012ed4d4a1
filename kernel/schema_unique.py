"""``uniqueItems`` in linear time (SPEC K-4, K-8; the step budget's blind spot).

jsonschema checks ``uniqueItems`` by sorting the items, and when they do not sort (objects, or
items mixing types) by comparing every pair: an array of n objects costs n²/2 deep comparisons,
all inside *one* keyword application, so ``kernel.schema_steps`` charged it one step. 6,000
distinct objects of 8 keys took seconds holding the GIL (a model's arguments, checked against a
host's or an MCP server's schema).

Here each item gets a hashable canonical key in one pass over its JSON nodes, and a set finds the
first repeat: the work is linear in the array's nodes. The keys follow JSON's equality (what
jsonschema's ``equal`` implements): ``1 == 1.0``, but ``true != 1`` and ``false != 0``; an object's
key order does not matter, an array's order does; a list and a tuple are both arrays. A NaN (not
JSON, but ``json.loads`` reads it) equals only itself as an object, as in jsonschema.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

# Tags keep the kinds apart: a string "1" is not the number 1, an array [] is not an object {}.
_NULL, _TRUE, _FALSE = ("null",), ("bool", True), ("bool", False)


def canonical(value: Any, table: dict[Any, int]) -> int:
    """A number equal for two values exactly when they are equal JSON, given the same ``table``.

    Each value's key holds its parts' numbers, not the parts, so hashing and comparing a key is
    shallow (a nested tuple would be hashed recursively in C) and a value nested deeper than the
    recursion limit is still keyed: the walk is post-order over an explicit stack."""
    out: list[int] = []  # numbers of the values built, in order
    stack: list[tuple[str, Any]] = [("visit", value)]
    while stack:
        task, item = stack.pop()
        if task == "array":  # fold the last ``item`` numbers into one array
            parts = tuple(out[len(out) - item :])
            del out[len(out) - item :]
            key: Any = ("array", parts)
        elif task == "object":  # fold the last len(item) numbers into one object
            parts = tuple(out[len(out) - len(item) :])
            del out[len(out) - len(item) :]
            key = ("object", frozenset(zip(item, parts, strict=True)))
        elif item is None:
            key = _NULL
        elif item is True:
            key = _TRUE
        elif item is False:
            key = _FALSE
        elif isinstance(item, str):
            key = ("string", item)
        elif isinstance(item, numbers.Number):
            # 1 and 1.0 (and Decimal(1)) hash and compare equal; NaN equals only itself, by identity.
            key = ("number", item) if item == item else ("nan", id(item))
        elif isinstance(item, Mapping):
            keys = list(item)
            stack.append(("object", keys))
            stack.extend(("visit", item[k]) for k in reversed(keys))
            continue
        elif isinstance(item, Sequence):  # str was handled above
            stack.append(("array", len(item)))
            stack.extend(("visit", each) for each in reversed(item))
            continue
        else:  # not JSON (a host's Python value): equal by ==, as jsonschema would compare it
            key = ("other", _Opaque(item))
        out.append(table.setdefault(key, len(table)))
    return out[0]


class _Opaque:
    """A non-JSON value: hashed by type (so unhashable ones work), compared with ``==``."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __hash__(self) -> int:
        return hash(type(self.value).__name__)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Opaque) and bool(self.value == other.value)


def first_repeat(items: Sequence[Any]) -> tuple[int, int] | None:
    """Indices (first, later) of the first item equal to an earlier one; None when all differ."""
    table: dict[Any, int] = {}
    seen: dict[int, int] = {}
    for index, item in enumerate(items):
        earlier = seen.setdefault(canonical(item, table), index)
        if earlier != index:
            return earlier, index
    return None


def unique_items(validator: Any, unique: Any, instance: Any, schema: Any) -> Iterator[Any]:
    """The ``uniqueItems`` keyword (jsonschema's signature), linear in the array's nodes."""
    from jsonschema.exceptions import ValidationError

    if not unique or not validator.is_type(instance, "array"):
        return
    repeat = first_repeat(instance)
    if repeat is not None:
        # The array is not quoted whole (jsonschema's message is its repr, of any size).
        yield ValidationError(
            f"array of {len(instance)} items has non-unique elements (items {repeat[0]} and {repeat[1]})"
        )
