"""``uniqueItems`` is linear in the array, with JSON's equality (SPEC K-4, K-8; ``kernel/schema_unique.py``).

jsonschema compares every pair of items it cannot sort (objects): 2,000 distinct 8-key objects took
6.9 s, 6,000 took 47.6 s, holding the GIL — and the step budget counted that as one keyword.
Now a set of canonical keys answers in one pass (0.035 s and 0.13 s).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from kernel.schema_patterns import linear_validator
from kernel.schema_steps import bounded_errors
from kernel.schema_unique import canonical, first_repeat
from orchestrator import Agent

PROMPT_S = 2.0  # the linear check takes ~0.04 s for these arrays; the pairwise one took 7-48 s


def _rows(n: int) -> list[dict[str, int]]:
    return [{f"k{j}": i * 10 + j for j in range(8)} for i in range(n)]


def _errors(schema: dict[str, Any], value: Any) -> list[str]:
    validator = linear_validator(jsonschema.Draft202012Validator)(schema)
    return [e.message for e in bounded_errors(validator, value)]


def test_k4_k8_unique_items_over_a_large_array_of_objects_is_answered_fast() -> None:
    schema = {"type": "array", "uniqueItems": True}
    rows = _rows(3000)
    started = time.monotonic()
    assert _errors(schema, rows) == []
    # A repeat at the very end is still found, and the message does not quote the whole array.
    errors = _errors(schema, [*rows, dict(reversed(list(rows[5].items())))])
    assert time.monotonic() - started < PROMPT_S
    assert errors == ["array of 3001 items has non-unique elements (items 5 and 3000)"]


def test_k4_k8_a_host_tool_with_unique_items_answers_a_large_call_fast(agent: Agent, workspace: Path) -> None:
    """Through the session's governed pipeline: a host tool whose schema says ``uniqueItems``."""
    s = agent.session(workspace)
    parameters = {
        "type": "object",
        "properties": {"rows": {"type": "array", "uniqueItems": True}},
        "required": ["rows"],
    }
    s.register_tool("take", lambda a: str(len(a["rows"])), description="x", parameters=parameters)
    rows = _rows(3000)
    started = time.monotonic()
    ok = s.tool("take", {"rows": rows})
    repeated = s.tool("take", {"rows": [*rows, rows[0]]})
    assert time.monotonic() - started < PROMPT_S
    assert ok.exit_code == 0 and ok.output == "3000", ok
    assert repeated.exit_code == 1 and repeated.error_kind is not None, repeated
    assert repeated.error_kind["type"] == "invalid_argument", repeated.error_kind
    assert "non-unique elements (items 0 and 3000)" in repeated.output, repeated.output


EQUAL = [
    (1, 1.0),
    ({"a": 1, "b": [1, 2]}, {"b": [1.0, 2], "a": 1}),
    ([{"x": None}], ({"x": None},)),
    ("s", "s"),
    (None, None),
    (True, True),
    (10**400, 10**400),
]
DIFFERENT = [
    (True, 1),
    (False, 0),
    ([True], [1]),
    ({"a": False}, {"a": 0}),
    ("1", 1),
    ([1, 2], [2, 1]),
    ([], {}),
    (None, False),
    ({"a": 1}, {"a": 1, "b": 1}),
    ("", None),
]


@pytest.mark.parametrize(("one", "two"), EQUAL)
def test_k4_json_equal_items_are_not_unique(one: Any, two: Any) -> None:
    assert first_repeat([one, two]) == (0, 1)
    assert _errors({"uniqueItems": True}, [one, two]), (one, two)
    # jsonschema's own answer is the same.
    assert not jsonschema.Draft202012Validator({"uniqueItems": True}).is_valid([one, two])


@pytest.mark.parametrize(("one", "two"), DIFFERENT)
def test_k4_json_different_items_are_unique(one: Any, two: Any) -> None:
    assert first_repeat([one, two]) is None
    assert _errors({"uniqueItems": True}, [one, two]) == [], (one, two)
    assert jsonschema.Draft202012Validator({"uniqueItems": True}).is_valid([one, two])


def test_k4_unique_items_false_or_a_non_array_is_not_checked() -> None:
    assert _errors({"uniqueItems": False}, [1, 1]) == []
    assert _errors({"uniqueItems": True}, "aa") == []
    assert _errors({"uniqueItems": True}, {"a": 1, "b": 1}) == []


def test_k4_an_item_nested_deeper_than_the_recursion_limit_is_keyed() -> None:
    deep: Any = 1
    twin: Any = 1.0
    for _ in range(50_000):
        deep, twin = [deep], [twin]
    table: dict[Any, int] = {}
    assert canonical(deep, table) == canonical(twin, table)
    assert first_repeat([deep, twin]) == (0, 1)
    assert first_repeat([deep, [deep]]) is None
