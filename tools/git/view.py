"""What a git call works on: the repository behind the workspace, plus paging and cancellation helpers.

- A ``LocalWorkspace`` with the ``git`` capability gives a *working* view: its root is the work
  tree, every form (read and mutating) is available.
- A ``GitTreeWorkspace`` gives a *commit* view: the repository is opened again (pygit2 handles are
  not shared across threads) and pinned to the view's commit; only read forms are served.

Cursors are opaque strings (today: a decimal offset) and are copied back verbatim (SPEC B-1).
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pygit2

from kernel.context import ToolContext
from kernel.errors import Cancelled, InvalidArgument, Timeout, Unsupported
from kernel.gitblob import check_object_database
from kernel.gitsafe import WorkTreeAttributes, check_work_tree, layout_of_git_dir
from kernel.gittree import GitTreeWorkspace, open_repository
from kernel.gitwhole import MAX_WHOLE_FILE_BYTES, LargeFile, describe, filters_possible, large_work_tree_files
from kernel.workspace import INTERNAL_DIR, LocalWorkspace, Workspace

CURSOR_RE = re.compile(r"^[0-9]{1,10}$")
FALLBACK_SIGNATURE = ("a3s-fleet", "a3s-fleet@localhost")
# Directories checked for special ignore files before libgit2 walks a work tree (beyond: refused).
MAX_WORKTREE_DIRS = 100_000


@dataclass
class GitView:
    repo: pygit2.Repository
    workspace: Workspace
    # Set for a read-only commit view (GitTreeWorkspace); None for a working tree.
    commit: pygit2.Commit | None
    deadline: float | None = None  # monotonic: the call's, for walks done before libgit2 runs
    attributes: WorkTreeAttributes | None = None  # what open_view's walk saw (None: not walked)

    @property
    def read_only(self) -> bool:
        return self.commit is not None

    @property
    def root(self) -> Path:
        if self.workspace.root is None:
            raise Unsupported("this workspace has no local work tree")
        return self.workspace.root

    def close(self) -> None:
        self.repo.free()


def open_view(workspace: Workspace, *, deadline: float | None = None) -> GitView:
    """The repository behind ``workspace``, opened safely (``kernel.gitsafe``): its config vetted,
    its work directory pinned to the workspace root, no special file in its object database, and —
    for a local work tree — no ``.gitignore``/``.gitattributes`` that libgit2 would block on
    (checked until ``deadline``)."""
    if isinstance(workspace, GitTreeWorkspace):
        repo = _checked(open_repository(workspace.repo_path), deadline)
        commit = repo[workspace.commit_id]
        assert isinstance(commit, pygit2.Commit)
        return GitView(repo, workspace, commit)
    if "git" not in workspace.capabilities or workspace.root is None:
        raise Unsupported(f"workspace {workspace.name} has no git repository")
    attributes = None
    if isinstance(workspace, LocalWorkspace):
        attributes = check_work_tree(workspace.beneath, max_dirs=MAX_WORKTREE_DIRS, deadline=deadline)
    return GitView(_checked(open_repository(workspace.root), deadline), workspace, None, deadline, attributes)


def _checked(repo: pygit2.Repository, deadline: float | None) -> pygit2.Repository:
    """``repo`` once its object database holds no FIFO, socket, device or symlink
    (``kernel.gitblob.check_object_database``: libgit2 would block on one holding the GIL, freezing
    the whole process; a model with ``bash`` can plant one); else closed and refused."""
    try:
        check_object_database(layout_of_git_dir(Path(repo.path)).common_dir / "objects", deadline=deadline)
    except BaseException:
        repo.free()
        raise
    return repo


def large_files(view: GitView, *, filtered_only: bool = False) -> list[LargeFile]:
    """The work tree's files over ``MAX_WHOLE_FILE_BYTES`` (``kernel.gitwhole``); none on a commit
    view. ``filtered_only``: the caller keeps only filtered ones, so when no filter can apply the
    tree is not sized at all (an ``lstat`` per file)."""
    ws = view.workspace
    if view.commit is not None or not isinstance(ws, LocalWorkspace):
        return []
    if (
        filtered_only
        and view.attributes is not None
        and not filters_possible(view.repo, ws.beneath, view.attributes)
    ):
        return []
    files = large_work_tree_files(view.repo, ws.beneath, max_dirs=MAX_WORKTREE_DIRS, deadline=view.deadline)
    return [f for f in files if not is_internal(f.path)]


def too_large(view: GitView, files: list[LargeFile], what: str, bash_hint: str) -> InvalidArgument:
    """``invalid_argument`` (reason ``too_large``) for a call that would make libgit2 hold these
    files whole: names them, the limit, and what to run instead."""
    hint = (
        f"run `{bash_hint}` in bash instead (git runs in the sandbox there)"
        if "exec" in view.workspace.capabilities
        else "shrink or remove them first"
    )
    return InvalidArgument(
        f"git {what} would make libgit2 hold these files whole in memory: {describe(files)}; a file "
        f"over {MAX_WHOLE_FILE_BYTES} bytes ({MAX_WHOLE_FILE_BYTES >> 20} MiB) is refused here; {hint}",
        reason="too_large",
        paths=[f.path for f in files[:200]],
        max_bytes=MAX_WHOLE_FILE_BYTES,
    )


def is_internal(path: str) -> bool:
    """``.a3s/`` holds a3s-fleet's own state: git output never shows or touches it."""
    return path == INTERNAL_DIR or path.startswith(INTERNAL_DIR + "/")


def signature(repo: pygit2.Repository) -> pygit2.Signature:
    try:
        return repo.default_signature
    except (KeyError, pygit2.GitError):
        return pygit2.Signature(*FALLBACK_SIGNATURE)


class Guard:
    """Polled by loops running in a worker thread: the kernel's cancellation and the deadline."""

    def __init__(self, ctx: ToolContext) -> None:
        self._ctx = ctx
        self._started = time.monotonic()

    def should_stop(self) -> bool:
        """Cheap enough for libgit2's per-file callback (kernel/gitdiff.py); ``check`` says why."""
        return self._ctx.cancelled.is_set() or self._ctx.remaining_s() <= 0

    def check(self) -> None:
        if self._ctx.cancelled.is_set():
            raise Cancelled("git call cancelled", op="git")
        if self._ctx.remaining_s() <= 0:
            elapsed = int((time.monotonic() - self._started) * 1000)
            raise Timeout(f"git call timed out after {elapsed}ms", op="git", duration_ms=elapsed)


def parse_cursor(cursor: int | str | None) -> int:
    if cursor is None or cursor == "":
        return 0
    if isinstance(cursor, int):
        if cursor < 0:
            raise InvalidArgument(f"cursor must be a non-negative offset, got {cursor}")
        return cursor
    if not CURSOR_RE.match(cursor):
        raise InvalidArgument(f"invalid cursor {cursor!r}: pass back the cursor a previous page returned")
    return int(cursor)


def page_list(items: list[Any], offset: int, limit: int, noun: str) -> tuple[list[Any], dict[str, Any]]:
    """One page of an already computed, stably ordered list; a cursor past the end is an error."""
    total = len(items)
    if offset > 0 and offset >= total:
        raise InvalidArgument(f"cursor {offset} is past the end of the {noun} list ({total} entries)")
    page = items[offset : offset + limit]
    end = offset + len(page)
    has_more = end < total
    meta = {
        "offset": offset,
        "limit": limit,
        "returned": len(page),
        "total": total,
        "has_more": has_more,
        "next_cursor": str(end) if has_more else None,
    }
    return page, meta


def relative_to_workspace(view: GitView, path: str | os.PathLike[str]) -> str | None:
    """``path`` as a workspace-relative string, or None when it lies outside the workspace."""
    root = view.workspace.root
    if root is None:
        return None
    try:
        rel = Path(os.path.realpath(os.fspath(path))).relative_to(root)
    except ValueError:
        return None
    return rel.as_posix() if rel.parts else ""
