"""The ``git`` tool (REFERENCE §4.8, SPEC S-2, S-3, B-1, K-5): repository operations on pygit2, no shell.

Forms and their capabilities (computed per call from the arguments):

    read  (read_only_paginated(8)): status (not paginated), log, diff (output ``diff``),
          remote, branch without ``name``, stash without ``message``/``include_untracked``,
          worktree list
    write (conservative):           branch create, checkout, stash save, worktree create/remove

On a ``GitTreeWorkspace`` (a read-only commit view) the read forms answer for that commit (status
is clean, log starts at the commit, diff compares the commit with ``target``); every mutating form
is ``unsupported``. Every path argument goes through the workspace resolver; pygit2 failures are
translated in ``tools.git.errors``; the blocking work runs in a thread that polls cancellation.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from kernel.capabilities import ToolCapabilities
from kernel.context import ToolContext
from kernel.errors import InvalidArgument, Unsupported
from kernel.result import ToolResult
from kernel.spec import ToolSpec

NAME = "git"
MAX_LIMIT = 200
DEFAULT_LOG_LIMIT = 10
DEFAULT_LIST_LIMIT = 50
MIN_DIFF_BYTES = 256
MAX_DIFF_BYTES = 102_400
DEFAULT_DIFF_BYTES = 65_536
READ_PARALLELISM = 8

Command = Literal["status", "log", "branch", "checkout", "diff", "stash", "remote", "worktree"]
PAGINATED = frozenset({"log", "branch", "diff", "stash", "remote", "worktree"})


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid")

    command: Command = Field(description="The git operation.")
    subcommand: Literal["list", "create", "remove"] | None = Field(
        default=None,
        description="worktree: list (default), create or remove. branch/stash: list or create "
        "(inferred when omitted: branch with name creates; stash with message or include_untracked saves).",
    )
    name: str | None = Field(
        default=None, min_length=1, description="Branch name (branch create, worktree create/remove)."
    )
    path: str | None = Field(
        default=None,
        min_length=1,
        description="Workspace-relative path: the worktree directory (worktree create/remove; "
        "default .worktrees/<name>), or a path filter for diff.",
    )
    ref: str | None = Field(
        default=None, min_length=1, description="checkout: branch, tag or commit. log: where to start."
    )
    force: bool = Field(default=False, description="checkout / worktree remove: discard local changes.")
    target: str | None = Field(
        default=None,
        min_length=1,
        description="diff: the revision to compare against; if absent, diffs the working tree "
        "(untracked files included) against HEAD.",
    )
    max_count: int | None = Field(
        default=None, ge=1, le=MAX_LIMIT, description="Deprecated alias of limit (log only)."
    )
    limit: int | None = Field(
        default=None,
        ge=1,
        le=MAX_LIMIT,
        description=f"Page size, 1..{MAX_LIMIT}: default {DEFAULT_LOG_LIMIT} for log, "
        f"{DEFAULT_LIST_LIMIT} for other lists.",
    )
    cursor: int | str | None = Field(
        default=None, description="Opaque continuation cursor from a previous page; copy it back verbatim."
    )
    byte_offset: int | None = Field(default=None, ge=0, description="diff: continuation offset in bytes.")
    max_bytes: int | None = Field(
        default=None,
        ge=MIN_DIFF_BYTES,
        le=MAX_DIFF_BYTES,
        description=f"diff: page size in bytes, {MIN_DIFF_BYTES}..{MAX_DIFF_BYTES}, default {DEFAULT_DIFF_BYTES}.",
    )
    message: str | None = Field(default=None, min_length=1, description="stash: the stash message (saves).")
    include_untracked: bool = Field(default=False, description="stash: also stash untracked files (saves).")
    remote_name: str | None = Field(default=None, min_length=1, description="remote: show only this remote.")
    new_branch: bool = Field(default=True, description="worktree create: create branch `name` (else use it).")
    base: str | None = Field(
        default=None, min_length=1, description="branch / worktree create: start point (default HEAD)."
    )


def action(p: Params) -> str:
    """The form a call takes: ``<command>`` or ``<command> <list|create|remove>``."""
    if p.command == "worktree":
        return f"worktree {p.subcommand or 'list'}"
    if p.command == "branch":
        if p.subcommand == "remove":
            raise InvalidArgument("branch supports subcommand list or create")
        create = p.subcommand == "create" or (p.subcommand is None and p.name is not None)
        return "branch create" if create else "branch list"
    if p.command == "stash":
        if p.subcommand == "remove":
            raise InvalidArgument("stash supports subcommand list or create")
        save = p.subcommand == "create" or (
            p.subcommand is None and (p.message is not None or p.include_untracked)
        )
        return "stash create" if save else "stash list"
    if p.subcommand is not None:
        raise InvalidArgument(f"subcommand does not apply to git {p.command}")
    return p.command


READ_FORMS = frozenset({"status", "log", "diff", "remote", "branch list", "stash list", "worktree list"})


def is_read(p: Params) -> bool:
    try:
        return action(p) in READ_FORMS
    except InvalidArgument:
        return False


def capabilities(p: Params) -> ToolCapabilities:
    if not is_read(p):
        return ToolCapabilities.conservative()
    caps = ToolCapabilities.read_only_paginated(READ_PARALLELISM)
    if p.command not in PAGINATED:
        caps = ToolCapabilities(True, True, True, True, False, READ_PARALLELISM, "text")
    if p.command == "diff":
        caps = caps.with_output("diff")
    return caps


def subject(p: Params) -> str:
    return p.command


def _check_combination(p: Params, form: str) -> None:
    """Arguments that cannot apply to this form are refused before anything runs (K-4)."""
    if (p.byte_offset is not None or p.max_bytes is not None) and p.command != "diff":
        raise InvalidArgument("byte_offset and max_bytes apply to diff only")
    if p.max_count is not None and p.command != "log":
        raise InvalidArgument("max_count is a deprecated alias of limit for log only")
    if p.max_count is not None and p.limit is not None and p.max_count != p.limit:
        raise InvalidArgument("limit and its deprecated alias max_count disagree")
    if p.path is not None and form not in ("diff", "worktree create", "worktree remove"):
        raise InvalidArgument(f"path does not apply to git {form}")
    listing = form in READ_FORMS and p.command not in ("status", "diff")
    if (p.cursor not in (None, "") or p.limit is not None) and not listing:
        raise InvalidArgument(f"cursor and limit apply to paginated lists, not to git {form}")


def _limit(p: Params, default: int) -> int:
    return p.limit or p.max_count or default


def _run_sync(ctx: ToolContext, p: Params, form: str) -> tuple[str, dict[str, Any]]:
    # pygit2 loads with the first git call, not with every session (CLI start-up, issue 13 item 7).
    from tools.git import read_ops, write_ops
    from tools.git.errors import git_errors
    from tools.git.view import Guard, open_view, parse_cursor

    guard = Guard(ctx)
    guard.check()
    with git_errors():
        view = open_view(ctx.workspace, deadline=time.monotonic() + ctx.remaining_s())
        try:
            if view.read_only and form not in READ_FORMS:
                raise Unsupported(
                    f"git {form} needs a writable work tree; {ctx.workspace.name} is a read-only commit view"
                )
            offset = parse_cursor(p.cursor)
            if form == "status":
                return read_ops.status(view)
            if form == "log":
                return read_ops.log(view, guard, ref=p.ref, offset=offset, limit=_limit(p, DEFAULT_LOG_LIMIT))
            if form == "diff":
                prefix = ctx.workspace.normalize(p.path) if p.path is not None else None
                return read_ops.diff(
                    view,
                    guard,
                    target=p.target,
                    path=prefix or None,
                    byte_offset=p.byte_offset or 0,
                    max_bytes=p.max_bytes or DEFAULT_DIFF_BYTES,
                )
            lim = _limit(p, DEFAULT_LIST_LIMIT)
            if form == "branch list":
                return read_ops.branch_list(view, offset=offset, limit=lim)
            if form == "stash list":
                return read_ops.stash_list(view, offset=offset, limit=lim)
            if form == "remote":
                return read_ops.remote_list(view, remote_name=p.remote_name, offset=offset, limit=lim)
            if form == "worktree list":
                return read_ops.worktree_list(view, offset=offset, limit=lim)
            guard.check()  # last chance to stop before a mutation starts
            if form == "branch create":
                return write_ops.branch_create(view, name=p.name, base=p.base)
            if form == "checkout":
                return write_ops.checkout(view, ref=p.ref, force=p.force)
            if form == "stash create":
                return write_ops.stash_save(view, message=p.message, include_untracked=p.include_untracked)
            if form == "worktree create":
                return write_ops.worktree_create(
                    view, name=p.name, path=p.path, new_branch=p.new_branch, base=p.base
                )
            if form == "worktree remove":
                return write_ops.worktree_remove(view, name=p.name, path=p.path, force=p.force)
            raise InvalidArgument(f"unknown git form: {form}")
        finally:
            view.close()


async def run(ctx: ToolContext, p: Params) -> ToolResult:
    form = action(p)
    _check_combination(p, form)
    output, metadata = await asyncio.to_thread(_run_sync, ctx, p, form)
    metadata = {"command": p.command, "form": form, **metadata}
    return ToolResult.success(NAME, output, metadata)


DESCRIPTION = (
    "Run a git operation on the workspace repository (no shell). Commands: status; log (paginated: "
    "limit, cursor); diff (working tree incl. untracked vs HEAD, or vs `target`; paginated by "
    "byte_offset/max_bytes; optional `path` filter; a file over 8 MiB or 100,000 lines on a side is "
    "listed with its sizes, without its patch); branch (list, or create `name` at `base`); "
    "checkout `ref` (refuses to overwrite local changes unless force); stash (list, or save with "
    "`message` / `include_untracked`); remote (list); worktree (list | create `name` at `path` | "
    "remove). Paths are workspace-relative. Lists return `continue with cursor=N` when more remain."
)

TOOL = ToolSpec(
    name=NAME,
    description=DESCRIPTION,
    run=run,
    params=Params,
    capabilities=capabilities,
    requires=frozenset({"git"}),
    subject=subject,
    path_fields=("path",),
    builtin=True,
    examples=(
        {"command": "status"},
        {"command": "log", "limit": 20},
        {"command": "diff", "target": "HEAD~1"},
        {"command": "worktree", "subcommand": "create", "name": "feature-x", "path": "wt/feature-x"},
    ),
)
