"""The ``task`` and ``parallel_task`` argument schemas (SPEC X-3, K-4; REFERENCE 4.13).

``task`` always takes ``tasks``: 1–32 items of ``{agent, description, prompt, background?, max_steps?,
output_schema?}`` — no other keys. One item is a focused child run and may set ``background: true``;
several items run concurrently and may not. ``allow_partial_failure`` (default false),
``timeout_ms`` (≥ 1) and ``min_success_count`` (≥ 1, only with ``allow_partial_failure: true`` and at
most the number of tasks) shape the fan-in. ``timeoutMs`` and ``minSuccessCount`` are accepted as
aliases (the model is shown only the snake_case names; giving both spellings is an error).

The hidden ``parallel_task`` alias reads the legacy schema — 2–32 foreground items, no
``background`` — so persisted calls stay readable; it runs exactly like ``task``.

Every rule is checked by the kernel's validation stage (before confirmation or any side effect,
K-4), with the JSON path of the failure: ``/tasks/1/background``, ``/min_success_count``, …
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

MAX_TASKS = 32
MIN_PARALLEL_TASKS = 2
MAX_DESCRIPTION_CHARS = 500
MAX_PROMPT_CHARS = 128 * 1024
MAX_AGENT_NAME_CHARS = 64
MAX_TASK_STEPS = 1000
MAX_TIMEOUT_MS = 24 * 3600_000
MAX_OUTPUT_SCHEMA_BYTES = 64 * 1024
AGENT_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"


class _ItemBase(BaseModel):
    model_config = ConfigDict(extra="forbid")

    agent: str = Field(
        min_length=1,
        max_length=MAX_AGENT_NAME_CHARS,
        pattern=AGENT_NAME_PATTERN,
        description="Agent to run: general, explore, verification, or a .a3s/agents/<name>.md agent.",
    )
    description: str = Field(
        min_length=1, max_length=MAX_DESCRIPTION_CHARS, description="A short (3-5 words) label."
    )
    prompt: str = Field(min_length=1, max_length=MAX_PROMPT_CHARS, description="The child's full task.")
    max_steps: int | None = Field(
        default=None, ge=1, le=MAX_TASK_STEPS, description="Model turns the child may take."
    )
    output_schema: dict[str, Any] | None = Field(
        default=None, description="JSON Schema the child's final answer must match (returned as structured)."
    )

    @field_validator("prompt", "description")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise PydanticCustomError("blank", "must not be blank")
        return value

    @field_validator("output_schema")
    @classmethod
    def _valid_schema(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is None:
            return None
        check_output_schema(value)
        return value


class TaskItem(_ItemBase):
    background: bool = Field(
        default=False, description="Only with a single task: return at once with a handle."
    )


class ParallelTaskItem(_ItemBase):
    """Legacy ``parallel_task`` branch: always foreground."""


def _allow_partial_failure() -> Any:
    return Field(default=False, description="Return the successful children even when some fail.")


def _timeout_ms() -> Any:
    return Field(
        default=None,
        ge=1,
        le=MAX_TIMEOUT_MS,
        validation_alias=AliasChoices("timeout_ms", "timeoutMs"),
        description="Deadline for the whole fan-out; unfinished children are reported failed.",
    )


def _min_success_count() -> Any:
    return Field(
        default=None,
        ge=1,
        le=MAX_TASKS,
        validation_alias=AliasChoices("min_success_count", "minSuccessCount"),
        description="With allow_partial_failure: return as soon as this many children succeeded.",
    )


def _check_min_success(value: int | None, info: ValidationInfo) -> int | None:
    """``min_success_count`` only with ``allow_partial_failure: true``, and at most the number of
    tasks (fields are validated in declaration order: ``tasks`` and the flag come first)."""
    if value is None:
        return None
    if info.data.get("allow_partial_failure") is not True:
        raise PydanticCustomError(
            "min_success_without_partial",
            "min_success_count is only allowed with allow_partial_failure: true",
        )
    tasks = info.data.get("tasks")
    if tasks is not None and value > len(tasks):
        raise PydanticCustomError(
            "min_success_above_tasks",
            "min_success_count ({value}) must be at most the number of tasks ({n})",
            {"value": value, "n": len(tasks)},
        )
    return value


class TaskParams(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    tasks: list[TaskItem] = Field(min_length=1, max_length=MAX_TASKS)
    allow_partial_failure: bool = _allow_partial_failure()
    timeout_ms: int | None = _timeout_ms()
    min_success_count: int | None = _min_success_count()

    @field_validator("tasks")
    @classmethod
    def _background_alone(cls, tasks: list[TaskItem]) -> list[TaskItem]:
        if len(tasks) > 1:
            for i, item in enumerate(tasks):
                if item.background:
                    raise PydanticCustomError(
                        "background_with_several",
                        "background: true is only allowed with a single task (item {i} of {n})",
                        {"i": i, "n": len(tasks)},
                    )
        return tasks

    _min_success = field_validator("min_success_count")(_check_min_success)


class ParallelTaskParams(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    tasks: list[ParallelTaskItem] = Field(min_length=MIN_PARALLEL_TASKS, max_length=MAX_TASKS)
    allow_partial_failure: bool = _allow_partial_failure()
    timeout_ms: int | None = _timeout_ms()
    min_success_count: int | None = _min_success_count()

    _min_success = field_validator("min_success_count")(_check_min_success)


def check_output_schema(schema: dict[str, Any]) -> None:
    """An ``output_schema`` must be a valid Draft 2020-12 schema of at most 64 KiB, its patterns RE2's,
    its references local and resolvable (``kernel.schema_refs``)."""
    try:
        size = len(json.dumps(schema))
    except (TypeError, ValueError) as exc:
        raise PydanticCustomError(
            "schema_not_json", "output_schema is not JSON: {why}", {"why": str(exc)}
        ) from None
    if size > MAX_OUTPUT_SCHEMA_BYTES:
        raise PydanticCustomError(
            "schema_too_large",
            "output_schema is {size} bytes; at most {max} allowed",
            {"size": size, "max": MAX_OUTPUT_SCHEMA_BYTES},
        )
    import jsonschema  # on first use: session builds stay free of it (CLI start-up, issue 13 item 7)

    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise PydanticCustomError(
            "invalid_output_schema", "output_schema is not a valid JSON Schema: {why}", {"why": exc.message}
        ) from None
    from kernel.schema_patterns import PatternRefused, check_patterns
    from kernel.schema_refs import RefRefused, check_refs

    try:
        check_patterns(schema)  # its patterns are matched by RE2 (flows.task.runs.structured_answer)
        check_refs(schema, jsonschema.Draft202012Validator)  # local and resolvable: nothing is fetched
    except (PatternRefused, RefRefused) as exc:
        raise PydanticCustomError(
            "invalid_output_schema", "output_schema: {why}", {"why": str(exc)}
        ) from None


def normalize_task_options(options: dict[str, Any]) -> dict[str, Any]:
    """``session.task({...})``: one item (optionally with the fan-in options) → ``{"tasks": [item]}``."""
    item = dict(options)
    outer = {
        k: item.pop(k)
        for k in ("allow_partial_failure", "timeout_ms", "timeoutMs", "min_success_count", "minSuccessCount")
        if k in item
    }
    if "maxSteps" in item:
        item["max_steps"] = item.pop("maxSteps")
    if "outputSchema" in item:
        item["output_schema"] = item.pop("outputSchema")
    return {"tasks": [item], **outer}
