"""``generate_object``'s arguments and every rule on them (SPEC G-1; REFERENCE 4.14).

All of these are checked by the kernel's argument validation — before confirmation, admission or any
model request (K-4) — and name the JSON path that failed: ``schema`` an object that is a valid
draft 2020-12 schema (≤ 64 KiB, nesting ≤ 32, every ``$ref``/``$dynamicRef`` local and resolvable:
``kernel.schema_refs``, nothing is fetched), ``prompt`` non-blank (≤ 128 KiB),
``schema_name`` 1–59 of ``[A-Za-z0-9_-]``, ``schema_description`` ≤ 4,096 bytes, ``system`` ≤ 32 KiB,
``mode`` one of auto|strict|json|tool|prompt, ``max_repair_attempts`` 0–5, ``timeout_ms``
1,000–600,000.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

MAX_SCHEMA_BYTES = 64 * 1024
MAX_SCHEMA_DEPTH = 32
MAX_PROMPT_BYTES = 128 * 1024
MAX_DESCRIPTION_BYTES = 4096
MAX_SYSTEM_BYTES = 32 * 1024
DEFAULT_TIMEOUT_MS = 120_000
DEFAULT_MAX_REPAIR_ATTEMPTS = 2

Mode = Literal["auto", "strict", "json", "tool", "prompt"]


def _nbytes(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _depth(value: Any) -> int:
    """Container nesting depth, iteratively (a hostile schema cannot exhaust the stack)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        if depth > MAX_SCHEMA_DEPTH:
            return depth
        stack.extend((child, depth + 1) for child in children)
    return deepest


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid")
    schema_: dict[str, Any] = Field(
        alias="schema",
        description="The JSON Schema (draft 2020-12) the object must match; local $ref/$defs allowed.",
    )
    prompt: str = Field(description="What to generate.")
    schema_name: str = Field(
        default="result",
        min_length=1,
        max_length=59,
        pattern=r"^[A-Za-z0-9_-]+$",
        description="Name of the schema (and of the forced tool in tool mode).",
    )
    schema_description: str | None = Field(default=None, description="What the object is, ≤ 4096 bytes.")
    system: str | None = Field(default=None, description="System instructions, ≤ 32 KiB.")
    mode: Mode = Field(
        default="auto",
        description="auto (forced tool, else prompt), strict (native strict schema), json (native JSON mode), tool, prompt.",
    )
    max_repair_attempts: int = Field(
        default=DEFAULT_MAX_REPAIR_ATTEMPTS,
        ge=0,
        le=5,
        description="Times validation errors go back to the model.",
    )
    include_raw_text: bool = Field(default=False, description="Also return the model's raw text.")
    timeout_ms: int = Field(
        default=DEFAULT_TIMEOUT_MS,
        ge=1000,
        le=600_000,
        description="Deadline of the whole generation (repairs included), from admission.",
    )

    @field_validator("schema_")
    @classmethod
    def _schema(cls, value: dict[str, Any]) -> dict[str, Any]:
        if _depth(value) > MAX_SCHEMA_DEPTH:
            raise ValueError(f"schema nests deeper than {MAX_SCHEMA_DEPTH} levels")
        try:
            size = _nbytes(json.dumps(value))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"schema is not JSON ({exc})") from None
        if size > MAX_SCHEMA_BYTES:
            raise ValueError(f"schema is larger than {MAX_SCHEMA_BYTES} bytes")
        import jsonschema  # on first use: not with every session build (CLI start-up, issue 13 item 7)

        try:
            jsonschema.Draft202012Validator.check_schema(value)
        except jsonschema.SchemaError as exc:
            where = "/".join(str(p) for p in exc.path) or "(root)"
            raise ValueError(f"not a valid draft 2020-12 schema at {where}: {exc.message}") from None
        from kernel.schema_patterns import check_patterns
        from kernel.schema_refs import check_refs

        check_patterns(value)  # PatternRefused is a ValueError: the schema is refused before any request
        check_refs(value, jsonschema.Draft202012Validator)  # RefRefused (ValueError): local, resolvable
        return value

    @field_validator("prompt")
    @classmethod
    def _prompt(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("prompt must not be blank")
        if _nbytes(value) > MAX_PROMPT_BYTES:
            raise ValueError(f"prompt is larger than {MAX_PROMPT_BYTES} bytes")
        return value

    @field_validator("schema_description")
    @classmethod
    def _description(cls, value: str | None) -> str | None:
        if value is not None and _nbytes(value) > MAX_DESCRIPTION_BYTES:
            raise ValueError(f"schema_description is larger than {MAX_DESCRIPTION_BYTES} bytes")
        return value

    @field_validator("system")
    @classmethod
    def _system(cls, value: str | None) -> str | None:
        if value is not None and _nbytes(value) > MAX_SYSTEM_BYTES:
            raise ValueError(f"system is larger than {MAX_SYSTEM_BYTES} bytes")
        return value
