"""A bound on the work of one JSON Schema validation (SPEC K-4, K-8; G-2, M-1).

A schema can make jsonschema's work grow exponentially in its own size: ``$defs`` where each
``dN`` is ``{"allOf": [{"$ref": "#/$defs/dN+1"}, {"$ref": "#/$defs/dN+1"}]}`` applies 2^N subschemas
to one value. Eighteen of them (1.3 KB) took 31 s to check ``{}``, holding the GIL — every session
of the process stopped — and thirty would take about 35 hours. The model writes such a schema itself
(``generate_object``, a task's ``output_schema``), and a hostile MCP server offers one as a tool's
``inputSchema`` for the model's arguments to be checked against on every call.

``linear_validator`` (``kernel.schema_patterns``) counts every keyword a validator applies;
``bounded_errors(validator, value)`` collects the errors within ``BASE_STEPS`` + ``STEPS_PER_NODE``
per JSON node of the value, and raises ``ValidationTooCostly`` (``invalid_argument``, reason
``too_costly``) past it: the work stays linear in the value, whatever the schema. A real schema
applies about two keywords per node (a 2,000-row array of objects: 22,005 steps for 12,000 nodes);
a step costs 5-25 µs (``$ref`` resolution is the dear one), so the exponential schema above is
refused within 0.1-0.5 s for a small value.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from typing import Any

from kernel.errors import InvalidArgument

BASE_STEPS = 20_000
STEPS_PER_NODE = 16

# [steps taken, limit] of the validation running in this context; None: not counted.
_budget: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar("schema_steps", default=None)


class ValidationTooCostly(InvalidArgument):
    """Checking a value against a schema took more keyword applications than the budget."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"checking the value against the schema took more than {limit} validation steps "
            f"({BASE_STEPS} + {STEPS_PER_NODE} per JSON node of the value): the schema applies its "
            "subschemas too many times over ($ref/allOf/anyOf)",
            reason="too_costly",
        )


def counted(keyword: Callable[..., Any]) -> Callable[..., Any]:
    """``keyword`` (a jsonschema keyword function) charged one step of the running budget."""

    def charged(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        budget = _budget.get()
        if budget is not None:
            budget[0] += 1
            if budget[0] > budget[1]:
                raise ValidationTooCostly(budget[1])
        return keyword(validator, value, instance, schema)

    return charged


def bounded_errors(validator: Any, value: Any) -> list[Any]:
    """Every error of ``validator`` (a ``linear_validator`` instance) for ``value``, within the
    budget (see the module docstring); ``ValidationTooCostly`` past it."""
    token = _budget.set([0, BASE_STEPS + STEPS_PER_NODE * json_nodes(value)])
    try:
        return list(validator.iter_errors(value))
    finally:
        _budget.reset(token)


def json_nodes(value: Any) -> int:
    """How many values ``value`` holds, itself included (iteratively: no recursion limit)."""
    count = 0
    stack = [value]
    while stack:
        item = stack.pop()
        count += 1
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return count
