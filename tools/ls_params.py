"""``ls``'s arguments as a pydantic model: the source of its JSON Schema (CONVENTIONS 2) and the
validator of anything ``tools.ls.quick_params`` leaves to it. Imported on first need, not with the
tool (``kernel.spec.DeferredParams``)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from tools.ls import DEFAULT_PAGE_ENTRIES, MAX_PAGE_ENTRIES


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str = Field(default="", description="Workspace-relative directory ('' or '.' is the root).")
    limit: int = Field(default=DEFAULT_PAGE_ENTRIES, ge=1, le=MAX_PAGE_ENTRIES)
    cursor: str = Field(default="", description="Opaque cursor from a previous page; copy it back verbatim.")
