"""A raw schema's ``pattern`` runs in linear time (SPEC K-4, K-8, M-1).

A dynamic tool's JSON Schema comes from its host — or from an MCP server, which may be hostile.
jsonschema matches ``pattern`` and ``patternProperties`` with Python's backtracking ``re``: a
pattern such as ``^(a+)+$`` against 40 ``a`` and a ``!`` takes hours, holding the GIL, and no
deadline can stop a match in progress — every session of the process (a fleet worker's heartbeat
included) would stop with it. The model picks the string. So patterns are matched by RE2, and a
pattern RE2 cannot match in linear time (backreferences, lookaround) refuses the tool at
registration, before a model ever sees it.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from kernel import SessionOptions
from orchestrator import Agent

EVIL = "a" * 40 + "!"


def _session(agent: Agent, tmp_path: Any, schema: dict[str, Any], seen: list[Any]) -> Any:
    s = agent.session(tmp_path, SessionOptions())
    s.register_tool("shaped", lambda a: seen.append(a) or "ok", description="x", parameters=schema)
    return s


@pytest.mark.parametrize(
    ("schema", "bad", "good"),
    [
        (
            {"type": "object", "properties": {"code": {"type": "string", "pattern": "^(a+)+$"}}},
            {"code": EVIL},
            {"code": "aaaa"},
        ),
        (
            {"type": "object", "patternProperties": {"^(a+)+$": {"type": "integer"}}},
            {EVIL: "not checked by name", "aaaa": "not an integer"},
            {"aaaa": 1, EVIL: "x"},
        ),
    ],
    ids=["pattern", "patternProperties"],
)
def test_k4_a_catastrophic_pattern_is_matched_in_linear_time(
    agent: Agent, tmp_path: Any, schema: dict[str, Any], bad: dict[str, Any], good: dict[str, Any]
) -> None:
    seen: list[Any] = []
    s = _session(agent, tmp_path, schema, seen)
    started = time.monotonic()
    res = s.model_tool_call("shaped", bad)
    assert time.monotonic() - started < 5.0
    assert res.exit_code == 1 and res.error_kind is not None
    assert res.error_kind["type"] == "invalid_argument", res.error_kind
    assert seen == []
    assert s.tool("shaped", good).exit_code == 0
    assert seen == [good]


@pytest.mark.parametrize(
    "pattern",
    ["^(a)\\1$", "^(?=a)a+$", "^a(?!b)", "(?<=x)y"],
    ids=["backreference", "lookahead", "negative-lookahead", "lookbehind"],
)
def test_k4_a_pattern_without_a_linear_match_refuses_the_tool(
    agent: Agent, tmp_path: Any, pattern: str
) -> None:
    s = agent.session(tmp_path, SessionOptions())
    schema = {"type": "object", "properties": {"code": {"type": "string", "pattern": pattern}}}
    with pytest.raises(ValueError, match="linear time"):
        s.register_tool("shaped", lambda a: "ok", description="x", parameters=schema)
    assert "shaped" not in s.tool_names()
