"""A schema cannot make one validation run without bound (SPEC K-4, K-8; G-2, M-1).

``$defs`` ``d0..dN``, each ``allOf`` two ``$ref``s to the next, apply 2^N subschemas to one value:
N = 18 (1.3 KB) took 31 s to check ``{}`` holding the GIL, N = 30 would take ~35 h — the model writes
such a schema (``generate_object``, a task's ``output_schema``) and a hostile MCP server offers one.
``kernel.schema_steps.bounded_errors`` now refuses past 20,000 + 16 steps per JSON node of the value
(``invalid_argument``, reason ``too_costly``). The cases that froze run in a fresh process with a
hard timeout, so a regression fails instead of hanging the suite.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from kernel.schema_patterns import linear_validator
from kernel.schema_steps import ValidationTooCostly, bounded_errors
from tests.tools.fixtures.costly_schema_mcp import costly_schema

REPO_ROOT = Path(__file__).resolve().parents[2]
MCP_FIXTURE = REPO_ROOT / "tests" / "tools" / "fixtures" / "costly_schema_mcp.py"
PROMPT_S = 10.0  # a refusal takes 0.1-0.5 s; before the bound, none of these ended

PROBE = r"""
import json, sys, time
from pathlib import Path
case, workdir = sys.argv[1], Path(sys.argv[2])
out = {}
started = time.monotonic()
if case == "mcp":
    from kernel.options import SessionOptions
    from orchestrator import Agent
    config = {"c": {"command": sys.executable, "args": [sys.argv[3]]}}
    with Agent() as agent, agent.session(workdir, SessionOptions(mcp_servers=config)) as s:
        out["state"] = s.mcp_status()["servers"][0]["state"]
        started = time.monotonic()
        r = s.tool("mcp__c__echo", {"x": 1})
        out.update(exit_code=r.exit_code, error_kind=r.error_kind)
elif case == "generate_object":
    import os
    from kernel.errors import ToolError
    from orchestrator import Agent
    from tests.model_servers import ScriptedOpenAIServer
    from tests.tools.fixtures.costly_schema_mcp import costly_schema
    turn = {"tool_calls": [{"id": "c1", "name": "result", "arguments": {}}]}
    with ScriptedOpenAIServer([turn], repeat_last=True) as srv:
        os.environ.update(srv.env())
        with Agent(model="openai:test-model") as agent, agent.session(workdir) as s:
            started = time.monotonic()
            try:
                s.generate_object(costly_schema(30), "anything", max_repair_attempts=0)
                out["error_kind"] = None
            except ToolError as err:
                out["error_kind"] = err.to_kind()
elif case == "task":
    from flows.task.runs import structured_answer
    from tests.tools.fixtures.costly_schema_mcp import costly_schema
    value, errors = structured_answer("{}", costly_schema(30))
    out["errors"] = errors
out["seconds"] = time.monotonic() - started
print(json.dumps(out))
"""


def _probe(case: str, tmp_path: Path, *extra: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    full_env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), **(env or {})}
    try:
        done = subprocess.run(
            [sys.executable, "-c", PROBE, case, str(tmp_path), *extra],
            env=full_env,
            capture_output=True,
            text=True,
            timeout=90,
            check=False,
            cwd=REPO_ROOT,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{case}: checking a value against an exponential schema froze the process")
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _too_costly(kind: Any) -> bool:
    return (
        isinstance(kind, dict)
        and kind.get("type") == "invalid_argument"
        and kind.get("reason") == "too_costly"
    )


def test_m1_k4_k8_an_mcp_tool_schema_that_applies_subschemas_2_30_times_fails_the_call_fast(
    tmp_path: Path,
) -> None:
    """A real MCP server (SDK) offers ``echo`` with the 2^30 schema: the call is refused
    ``invalid_argument{reason: too_costly}`` before it reaches the server, in well under a second."""
    log = tmp_path / "calls.jsonl"
    result = _probe("mcp", tmp_path, str(MCP_FIXTURE), env={"MCP_TEST_CALL_LOG": str(log)})
    assert result["state"] == "running" and result["exit_code"] == 1, result
    assert _too_costly(result["error_kind"]), result
    assert result["seconds"] < PROMPT_S, result
    assert not log.exists()  # the call never reached the server


def test_g2_k8_generate_object_with_an_exponential_schema_is_refused_not_frozen(tmp_path: Path) -> None:
    result = _probe("generate_object", tmp_path)
    assert _too_costly(result["error_kind"]), result
    assert result["seconds"] < PROMPT_S, result


def test_k8_a_task_output_schema_that_is_exponential_reads_as_a_schema_error(tmp_path: Path) -> None:
    result = _probe("task", tmp_path)
    assert len(result["errors"]) == 1 and "validation steps" in result["errors"][0], result
    assert result["seconds"] < PROMPT_S, result


def test_k4_the_budget_is_linear_in_the_value_a_real_large_value_passes() -> None:
    """A 2,000-row array of objects (about two keywords per node) is far inside the budget, and a
    value that breaks the schema still gets its ordinary errors."""
    row = {
        "type": "object",
        "properties": {"id": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}}},
        "required": ["id"],
        "additionalProperties": False,
    }
    schema = {"type": "object", "properties": {"rows": {"type": "array", "items": {"$ref": "#/$defs/row"}}}}
    schema["$defs"] = {"row": row}
    validator = linear_validator(jsonschema.Draft202012Validator)(schema)
    rows = [{"id": i, "tags": ["a", "b"]} for i in range(2000)]
    assert bounded_errors(validator, {"rows": rows}) == []
    errors = bounded_errors(validator, {"rows": [*rows, {"id": "x"}]})
    assert [e.message for e in errors] == ["'x' is not of type 'integer'"]


def test_k8_the_refusal_is_typed_and_names_the_budget() -> None:
    validator = linear_validator(jsonschema.Draft202012Validator)(costly_schema(40))
    with pytest.raises(ValidationTooCostly) as caught:
        bounded_errors(validator, {})
    assert caught.value.to_kind()["reason"] == "too_costly"
    assert "more than 20016 validation steps" in caught.value.message
