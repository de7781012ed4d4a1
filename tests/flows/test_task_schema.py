"""The ``task`` / ``parallel_task`` argument schemas, through the kernel's validation stage (SPEC X-3, K-4).

Every rule of REFERENCE 4.13 fails as ``invalid_argument`` naming the JSON path, before anything runs.
"""

from __future__ import annotations

from typing import Any

import pytest

from flows.task.schema import ParallelTaskParams, TaskParams, normalize_task_options
from kernel.errors import InvalidArgument
from kernel.spec import ToolSpec


async def _never(_ctx: Any, _params: Any) -> str:
    raise AssertionError("validation must fail before the tool runs")


TASK = ToolSpec(name="task", description="t", params=TaskParams, run=_never)
PARALLEL = ToolSpec(name="parallel_task", description="p", params=ParallelTaskParams, run=_never)
ITEM = {"agent": "explore", "description": "look", "prompt": "Find the config files."}


def items(n: int, **extra: Any) -> list[dict[str, Any]]:
    return [dict(ITEM, description=f"look {i}", **extra) for i in range(n)]


def invalid(spec: ToolSpec, args: dict[str, Any]) -> str:
    with pytest.raises(InvalidArgument) as info:
        spec.validate(args)
    return info.value.message


@pytest.mark.parametrize("n", [1, 2, 32])
def test_x3_task_takes_one_to_32_items(n: int) -> None:
    """X-3: 1–32 items."""
    params = TASK.validate({"tasks": items(n)})
    assert len(params.tasks) == n


@pytest.mark.parametrize("n", [0, 33])
def test_x3_task_refuses_zero_or_more_than_32_items(n: int) -> None:
    assert "/tasks" in invalid(TASK, {"tasks": items(n)})


@pytest.mark.parametrize("missing", ["agent", "description", "prompt"])
def test_x3_each_item_needs_agent_description_prompt(missing: str) -> None:
    item = dict(ITEM)
    del item[missing]
    assert f"/tasks/0/{missing}: required property is missing" in invalid(TASK, {"tasks": [item]})


def test_x3_items_take_no_extra_keys_and_the_call_neither() -> None:
    assert "/tasks/0/subagent_type: additional property" in invalid(
        TASK, {"tasks": [dict(ITEM, subagent_type="x")]}
    )
    assert "/parallel: additional property" in invalid(TASK, {"tasks": [ITEM], "parallel": True})


def test_x3_blank_prompt_and_bad_agent_name_are_refused() -> None:
    assert "/tasks/0/prompt" in invalid(TASK, {"tasks": [dict(ITEM, prompt="   ")]})
    assert "/tasks/0/agent" in invalid(TASK, {"tasks": [dict(ITEM, agent="../x")]})


def test_x3_background_only_with_a_single_item() -> None:
    assert TASK.validate({"tasks": [dict(ITEM, background=True)]}).tasks[0].background is True
    message = invalid(TASK, {"tasks": [ITEM, dict(ITEM, background=True)]})
    assert "/tasks: background: true is only allowed with a single task (item 1 of 2)" in message
    # background: false is fine with several
    assert len(TASK.validate({"tasks": items(2, background=False)}).tasks) == 2


def test_x3_min_success_count_only_with_allow_partial_failure() -> None:
    message = invalid(TASK, {"tasks": items(3), "min_success_count": 2})
    assert "/min_success_count: min_success_count is only allowed with allow_partial_failure: true" in message
    message = invalid(TASK, {"tasks": items(3), "allow_partial_failure": False, "min_success_count": 2})
    assert "only allowed with allow_partial_failure" in message


def test_x3_min_success_count_between_one_and_the_number_of_tasks() -> None:
    ok = TASK.validate({"tasks": items(3), "allow_partial_failure": True, "min_success_count": 3})
    assert ok.min_success_count == 3
    assert "must be at most the number of tasks (3)" in invalid(
        TASK, {"tasks": items(3), "allow_partial_failure": True, "min_success_count": 4}
    )
    assert "/min_success_count" in invalid(
        TASK, {"tasks": items(3), "allow_partial_failure": True, "min_success_count": 0}
    )


def test_x3_timeout_ms_at_least_one() -> None:
    assert TASK.validate({"tasks": [ITEM], "timeout_ms": 1}).timeout_ms == 1
    assert "/timeout_ms" in invalid(TASK, {"tasks": [ITEM], "timeout_ms": 0})
    assert "/timeout_ms" in invalid(TASK, {"tasks": [ITEM], "timeout_ms": "5"})


def test_x3_camel_case_aliases_are_accepted_but_not_both_spellings() -> None:
    params = TASK.validate(
        {"tasks": items(2), "allow_partial_failure": True, "minSuccessCount": 1, "timeoutMs": 500}
    )
    assert (params.min_success_count, params.timeout_ms) == (1, 500)
    assert "/minSuccessCount" in invalid(TASK, {"tasks": items(2), "minSuccessCount": 1})
    assert "additional property" in invalid(TASK, {"tasks": [ITEM], "timeout_ms": 5, "timeoutMs": 6})


def test_x3_model_schema_names_only_snake_case_and_forbids_extra_keys() -> None:
    schema = TASK.json_schema
    assert set(schema["properties"]) == {"tasks", "allow_partial_failure", "timeout_ms", "min_success_count"}
    assert schema["additionalProperties"] is False
    item = schema["$defs"]["TaskItem"]
    assert set(item["properties"]) == {
        "agent",
        "description",
        "prompt",
        "background",
        "max_steps",
        "output_schema",
    }
    assert item["additionalProperties"] is False
    assert set(item["required"]) == {"agent", "description", "prompt"}
    assert schema["properties"]["tasks"]["minItems"] == 1
    assert schema["properties"]["tasks"]["maxItems"] == 32


def test_x3_output_schema_must_be_a_valid_json_schema() -> None:
    good = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    assert TASK.validate({"tasks": [dict(ITEM, output_schema=good)]}).tasks[0].output_schema == good
    assert "/tasks/0/output_schema: output_schema is not a valid JSON Schema" in invalid(
        TASK, {"tasks": [dict(ITEM, output_schema={"type": 7})]}
    )


def test_x3_output_schema_references_are_local_and_resolve() -> None:
    """Nothing a task's output_schema names is fetched; a reference to nowhere fails the call, not the child."""
    remote = {"type": "object", "properties": {"n": {"$ref": "https://evil.example/n.json"}}}
    assert "only local references" in invalid(TASK, {"tasks": [dict(ITEM, output_schema=remote)]})
    dangling = {"type": "array", "items": {"$ref": "#/$defs/row"}}
    assert "does not resolve" in invalid(TASK, {"tasks": [dict(ITEM, output_schema=dangling)]})


def test_x3_max_steps_bounds() -> None:
    assert TASK.validate({"tasks": [dict(ITEM, max_steps=5)]}).tasks[0].max_steps == 5
    assert "/tasks/0/max_steps" in invalid(TASK, {"tasks": [dict(ITEM, max_steps=0)]})


def test_x3_parallel_task_reads_the_legacy_two_to_32_foreground_schema() -> None:
    assert len(PARALLEL.validate({"tasks": items(2)}).tasks) == 2
    assert "/tasks" in invalid(PARALLEL, {"tasks": items(1)})
    assert "/tasks" in invalid(PARALLEL, {"tasks": items(33)})
    assert "/tasks/0/background: additional property" in invalid(
        PARALLEL, {"tasks": items(2, background=False)}
    )
    params = PARALLEL.validate({"tasks": items(3), "allow_partial_failure": True, "minSuccessCount": 2})
    assert params.min_success_count == 2


def test_x3_session_task_options_wrap_one_item() -> None:
    args = normalize_task_options(dict(ITEM, maxSteps=3, timeoutMs=100, background=True))
    assert args == {"tasks": [dict(ITEM, max_steps=3, background=True)], "timeoutMs": 100}
    assert TASK.validate(args).timeout_ms == 100
