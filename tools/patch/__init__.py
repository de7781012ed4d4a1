"""The ``patch`` tool: apply a unified diff or an apply_patch envelope to workspace files (SPEC B-3, B-6).

Parts: ``parse.py`` (text → file sections and hunks), ``apply.py`` (strict hunk placement and the
commit plan), ``tools/_fileio.py`` (the atomic multi-file commit). Invariants:

- All or nothing: every hunk of every file is checked before anything is written; a failure
  names the file, the hunk and the first mismatching line, and leaves every file byte-identical.
  The files are then committed together (temp files first, CAS checks, renames, rollback from
  backups if a rename fails; see ``_fileio``).
- Every path — headers, renames (source and destination), envelope sections, ``file_path`` —
  goes through ``LocalWorkspace.locate``; one outside the workspace fails the whole patch with
  ``path_outside_workspace``, and for governed origins one inside git metadata (``.git``) fails it
  with ``permission_denied`` (``_fileio.check_not_git_metadata``) before anything is written.
- ``subject`` (what permission rules match) is the sorted list of every path the patch touches
  (both sides of renames, deletes, creates), or ``file_path`` when the diff cannot be parsed; the
  kernel resolves each and every one must pass the rules.
- Metadata: ``file_path`` (the first file), ``format``, ``files[]`` (per file: action, path,
  ``from_path``, SHA-256 and sizes of both sides, hunk count, ``offsets`` used) and a bounded
  combined ``diff``. ``before``/``after`` hold the full texts for a single-file patch; for several
  files they hold each file's text under a ``=== path ===`` line, so the kernel's §6.5 compaction
  still keeps every original retrievable as an artifact.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from kernel.capabilities import ToolCapabilities
from kernel.context import ToolContext
from kernel.errors import ToolError
from kernel.result import ToolResult
from kernel.spec import ToolSpec
from tools import _fileio
from tools._filetext import bound_text, change_metadata, sha256_hex
from tools.patch.apply import Planned, plan
from tools.patch.parse import parse_patch

NAME = "patch"


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid")

    file_path: str | None = Field(
        default=None,
        min_length=1,
        max_length=4096,
        description="The file a diff without ---/+++ headers applies to (optional otherwise).",
    )
    diff: str = Field(
        min_length=1,
        description=(
            "A unified diff (one or more files; --- /dev/null creates, +++ /dev/null deletes, git "
            "rename headers rename) or an apply_patch envelope (*** Begin Patch ... *** End Patch)."
        ),
    )


def capabilities(_params: Params) -> ToolCapabilities:
    return ToolCapabilities.conservative()


def patch_paths(params: Params) -> list[str]:
    """Every path the diff names (sorted, unique); the ``file_path`` default included."""
    paths: set[str] = set()
    if params.file_path:
        paths.add(params.file_path)
    try:
        parsed = parse_patch(params.diff)
    except ToolError:
        return sorted(paths)
    for f in parsed.files:
        if f.has_headers:
            paths.update(p for p in (f.old_path, f.new_path) if p is not None)
    return sorted(paths)


def _subject(params: Params) -> list[str] | None:
    return patch_paths(params) or None


def _metadata(fmt: str, planned: list[Planned]) -> dict[str, Any]:
    per_file = [
        change_metadata(p.path, p.before_text, p.after_text, p.before_data, p.after_data) for p in planned
    ]
    files = [
        {
            "file_path": p.path,
            "action": p.action,
            "from_path": p.from_path,
            "before_sha256": sha256_hex(p.before_data) if p.before_data is not None else None,
            "after_sha256": sha256_hex(p.after_data) if p.after_data is not None else None,
            "before_bytes": m["before_bytes"],
            "after_bytes": m["after_bytes"],
            "hunks": p.hunks,
            "offsets": p.offsets,
        }
        for p, m in zip(planned, per_file, strict=True)
    ]
    if len(planned) == 1:
        meta = per_file[0]
    else:
        diff, truncated = bound_text("".join(m["diff"] for m in per_file))
        meta = {
            "file_path": planned[0].path,
            "before": "".join(f"=== {p.from_path or p.path} ===\n{p.before_text}" for p in planned),
            "after": "".join(f"=== {p.path} ===\n{p.after_text}" for p in planned),
            "diff": diff,
            "diff_truncated": truncated or any(m["diff_truncated"] for m in per_file),
            "diff_omitted": any(m["diff_omitted"] for m in per_file),
        }
    meta.update(format=fmt, files=files)
    return meta


def _summary(planned: list[Planned]) -> str:
    lines = [f"Applied patch to {len(planned)} file(s):"]
    for p in planned:
        what = f"renamed {p.from_path} -> {p.path}" if p.action == "renamed" else f"{p.action} {p.path}"
        if p.hunks:
            what += f" ({p.hunks} hunk(s))"
        for off in p.offsets:
            what += (
                f"; hunk {off['hunk']} applied at line {off['applied_line']} (stated {off['stated_line']})"
            )
        lines.append(f"  {what}")
    return "\n".join(lines)


def _run_sync(ctx: ToolContext, params: Params) -> ToolResult:
    ws = _fileio.local_workspace(ctx)
    _fileio.require_session(ctx)
    parsed = parse_patch(params.diff)
    planned = plan(parsed.files, ws, params.file_path, protect=ctx.governed)
    changes = [c for p in planned for c in p.changes]
    _fileio.commit(changes, cancelled=ctx.cancelled.is_set)
    return ToolResult.success(NAME, _summary(planned), _metadata(parsed.format, planned))


async def run(ctx: ToolContext, params: Params) -> ToolResult:
    # File I/O runs in a thread; the commit re-checks ctx.cancelled right before renaming.
    return await asyncio.to_thread(_run_sync, ctx, params)


TOOL = ToolSpec(
    name=NAME,
    description=(
        "Apply a unified diff (one or many files) or an apply_patch envelope "
        "(*** Begin Patch / *** Update File: / *** Add File: / *** Delete File: / *** Move to: / @@). "
        "Hunks must match the files exactly (at their stated line, or at one unique place); otherwise "
        "nothing is written and the error shows the first mismatching line. All files change together "
        "or not at all. Line endings and encoding are preserved."
    ),
    params=Params,
    run=run,
    capabilities=capabilities,
    requires=frozenset({"read", "write"}),
    subject=_subject,
    subject_kind="path",
    path_fields=("file_path",),
    examples=(
        {
            "diff": "--- a/src/app.py\n+++ b/src/app.py\n@@ -1,2 +1,2 @@\n import os\n-DEBUG = True\n+DEBUG = False\n",
        },
        {
            "diff": "*** Begin Patch\n*** Update File: src/app.py\n@@ import os\n-DEBUG = True\n+DEBUG = False\n*** End Patch",
        },
    ),
    builtin=True,
)

__all__ = ["TOOL", "Params", "patch_paths"]
