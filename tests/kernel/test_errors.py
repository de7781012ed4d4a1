"""Error kinds are API (SPEC K-8; CONVENTIONS §7-§8): the list is pinned, and errors round-trip as data."""

from __future__ import annotations

import json

import pytest

from kernel.errors import ERROR_KINDS, ToolError, error_from_kind
from kernel.result import ToolResult

PINNED = [
    "budget_exhausted",
    "cancelled",
    "confirmation_rejected",
    "hook_denied",
    "internal_error",
    "invalid_argument",
    "not_found",
    "partial_failure",
    "path_outside_workspace",
    "permission_denied",
    "provider_error",
    "rate_limited",
    "recursion_limit",
    "retrieval_requirements_not_met",
    "timeout",
    "transport",
    "unsupported",
    "version_conflict",
]


def test_k8_error_kinds_are_pinned() -> None:
    assert sorted(ERROR_KINDS) == PINNED


@pytest.mark.parametrize("kind", PINNED)
def test_k8_every_kind_round_trips_through_json(kind: str) -> None:
    cls = ERROR_KINDS[kind]
    err = cls("boom", **{f: 1 for f in cls.fields})
    result = ToolResult.failure("t", err)
    wire = json.loads(json.dumps(result.to_json()))
    back = ToolResult.from_json(wire)
    assert back.error_kind == err.to_kind()
    rebuilt = error_from_kind(back.error_kind, back.output)
    assert type(rebuilt) is cls and rebuilt.data == err.data and rebuilt.kind == kind


def test_k8_unknown_kinds_never_import_anything() -> None:
    rebuilt = error_from_kind({"type": "os.system", "x": 1}, "msg")
    assert type(rebuilt) is ToolError
    assert rebuilt.to_kind() == {"type": "os.system", "x": 1}


def test_k8_timeout_and_hook_denied_shapes() -> None:
    assert ERROR_KINDS["timeout"]("t", op="bash", duration_ms=5).to_kind() == {
        "type": "timeout",
        "op": "bash",
        "duration_ms": 5,
    }
    assert ERROR_KINDS["hook_denied"]("d", reason="r", retryable=True, retry_after_ms=10).to_kind() == {
        "type": "hook_denied",
        "reason": "r",
        "retryable": True,
        "retry_after_ms": 10,
    }
