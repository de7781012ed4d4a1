"""The ``write`` tool: create or replace one workspace file with the given text (SPEC B-3, B-6).

Invariants:

- The file gets exactly the UTF-8 bytes of ``content``: no BOM added, line endings as given.
- The write is atomic and compare-and-swap (``tools/_fileio.py``): temp file beside the target,
  fsync, rename, directory fsync; a change made by someone else between our read and the rename
  gives ``version_conflict`` and nothing is written.
- Missing parent directories are created, inside the workspace only. A directory at the path is
  refused. An existing file keeps its permission bits; a new file gets 0o644 (umask not applied,
  see ``_fileio.NEW_FILE_MODE``).
- Metadata: ``file_path``, ``created``, full ``before``/``after`` (``before`` is "" for a new
  file; an old non-UTF-8 file is shown decoded as latin-1), SHA-256 and byte sizes of both sides,
  and a bounded unified ``diff``. The kernel's projection compacts big ``before``/``after``.
"""

from __future__ import annotations

import asyncio

from pydantic import BaseModel, ConfigDict, Field

from kernel.capabilities import ToolCapabilities
from kernel.context import ToolContext
from kernel.result import ToolResult
from kernel.spec import ToolSpec
from tools import _fileio
from tools._filetext import change_metadata, decode_bytes, encode_text

NAME = "write"


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid")

    file_path: str = Field(
        min_length=1, max_length=4096, description="Workspace-relative path of the file to create or replace."
    )
    content: str = Field(description="The complete new content of the file (written as UTF-8).")


def capabilities(_params: Params) -> ToolCapabilities:
    return ToolCapabilities.conservative()


def _run_sync(ctx: ToolContext, params: Params) -> ToolResult:
    ws = _fileio.local_workspace(ctx)
    t = _fileio.target(ws, params.file_path, protect=ctx.governed)
    _fileio.require_session(ctx)
    state = _fileio.read_state(t)
    data = encode_text(params.content, "utf-8", path=t.rel)
    _fileio.commit(
        [_fileio.Change(target=t, expected=state, data=data)],
        cancelled=ctx.cancelled.is_set,
    )
    before = decode_bytes(state.data).text if state.exists else ""
    meta = change_metadata(t.rel, before, params.content, state.data if state.exists else None, data)
    meta["created"] = not state.exists
    verb = "updated" if state.exists else "created"
    return ToolResult.success(NAME, f"Wrote {len(data)} bytes to {t.rel} ({verb})", meta)


async def run(ctx: ToolContext, params: Params) -> ToolResult:
    # File I/O runs in a thread; the commit re-checks ctx.cancelled right before renaming.
    return await asyncio.to_thread(_run_sync, ctx, params)


TOOL = ToolSpec(
    name=NAME,
    description=(
        "Create a file or replace its whole content with `content` (UTF-8). Parent directories are "
        "created. The write is atomic; if the file changed since it was read the call fails with "
        "version_conflict. Prefer `edit` or `patch` to change part of an existing file."
    ),
    params=Params,
    run=run,
    capabilities=capabilities,
    requires=frozenset({"write"}),
    subject=lambda p: p.file_path,
    subject_kind="path",
    path_fields=("file_path",),
    examples=({"file_path": "src/hello.py", "content": "print('hello')\n"},),
    builtin=True,
)
