"""The ``program`` tool's parameters (REFERENCE 4.12) and ``session.program`` name normalisation (P-2).

Wire names follow the reference exactly: ``type`` (only ``"script"``), ``language`` (only
``"javascript"``), ``source`` xor ``path``, ``inputs``, ``allowed_tools`` and
``limits{timeoutMs, maxToolCalls, maxOutputBytes}`` (each ≥ 1). ``normalize_program_options`` maps the
SDK's spellings (``allowedTools``, ``limits.timeout_ms``…) onto them, as the reference's
``session.program(...)`` does.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from kernel.errors import InvalidArgument

DEFAULT_TIMEOUT_MS = 30_000
TASK_TIMEOUT_MS = 600_000  # the reference's default whenever `task` is allowed
MAX_TIMEOUT_MS = 3_600_000
DEFAULT_MAX_TOOL_CALLS = 20
MAX_TOOL_CALLS = 1_000
DEFAULT_MAX_OUTPUT_BYTES = 64 * 1024
MAX_OUTPUT_BYTES = 1024 * 1024


class Limits(BaseModel):
    model_config = ConfigDict(extra="forbid")
    timeoutMs: int | None = Field(  # camelCase: the reference's wire names
        default=None,
        ge=1,
        le=MAX_TIMEOUT_MS,
        description="Wall-clock limit for the whole script (default 30000; 600000 when `task` is allowed).",
    )
    maxToolCalls: int | None = Field(
        default=None, ge=1, le=MAX_TOOL_CALLS, description="Most tool calls the script may make (default 20)."
    )
    maxOutputBytes: int | None = Field(
        default=None,
        ge=1,
        le=MAX_OUTPUT_BYTES,
        description="Bytes of each tool result's text handed to the script (default 65536).",
    )


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["script"] = Field(description='Always "script".')
    language: Literal["javascript"] = "javascript"
    source: str | None = Field(
        default=None, description="JavaScript defining `async function run(ctx, inputs)` (≤ 192 KiB)."
    )
    path: str | None = Field(
        default=None, description="Workspace-relative .js or .mjs file instead of source."
    )
    inputs: dict[str, Any] = Field(default_factory=dict, description="JSON object passed as `inputs`.")
    allowed_tools: list[str] | None = Field(
        default=None,
        max_length=256,
        description="Tools the script may call (a search mode name such as `grep` allows that mode). "
        "Default: every tool except program, dynamic_workflow and parallel_task.",
    )
    limits: Limits = Field(default_factory=Limits)


_TOP_LEVEL = {"allowedTools": "allowed_tools"}
_LIMITS = {
    "timeout_ms": "timeoutMs",
    "max_tool_calls": "maxToolCalls",
    "max_output_bytes": "maxOutputBytes",
}


def normalize_program_options(options: dict[str, Any]) -> dict[str, Any]:
    """``session.program(...)`` → the ``program`` tool's arguments (``type``/``language`` filled in)."""
    if not isinstance(options, dict):
        raise InvalidArgument("program options must be an object")
    out: dict[str, Any] = {"type": "script", "language": "javascript"}
    for key, value in options.items():
        name = _TOP_LEVEL.get(key, key)
        if name in out and key != name and name in options:
            raise InvalidArgument(f"program options give both {key!r} and {name!r}")
        out[name] = value
    limits = out.get("limits")
    if isinstance(limits, dict):
        fixed: dict[str, Any] = {}
        for key, value in limits.items():
            name = _LIMITS.get(key, key)
            if name in fixed:
                raise InvalidArgument(f"program limits give {name!r} twice")
            fixed[name] = value
        out["limits"] = fixed
    return out
