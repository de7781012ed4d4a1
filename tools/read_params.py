"""``read``'s arguments as a pydantic model: the source of its JSON Schema (CONVENTIONS 2) and the
validator of anything ``tools.read_args.quick_params`` leaves to it. Imported on first need, not with
the tool (``kernel.spec.DeferredParams``)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tools.read_args import (
    MAX_BATCH_FILES,
    MAX_BATCH_OUTPUT_BYTES,
    MAX_LIMIT_LINES,
    MAX_PATH_CHARS,
    MIN_BATCH_OUTPUT_BYTES,
    exclusivity_error,
)


class FileRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str = Field(min_length=1, max_length=MAX_PATH_CHARS)
    offset: int = Field(default=0, ge=0)
    limit: int | None = Field(default=None, ge=1, le=MAX_LIMIT_LINES)


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid")
    file_path: str | None = Field(default=None, min_length=1, description="Workspace-relative file to read.")
    files: list[FileRequest] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_BATCH_FILES,
        description="Batch mode: several files, one budget.",
    )
    offset: int | None = Field(default=None, ge=0, description="Lines to skip (0-based).")
    limit: int | None = Field(
        default=None, ge=1, description="Lines to return (max 2000; larger is clamped)."
    )
    max_output_bytes: int | None = Field(
        default=None,
        ge=MIN_BATCH_OUTPUT_BYTES,
        le=MAX_BATCH_OUTPUT_BYTES,
        description="Batch mode byte budget.",
    )

    @model_validator(mode="after")
    def _exclusive(self) -> Params:
        error = exclusivity_error(self)
        if error is not None:
            raise ValueError(error)
        return self
