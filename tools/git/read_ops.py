"""Read forms of the ``git`` tool: status, log, diff and the branch/stash/remote/worktree lists.

Each function runs in a worker thread on a ``GitView`` and returns ``(output, metadata)``. Output
is bounded where it is produced: log pages hold at most ``MAX_LIMIT`` commits and walk at most
``LOG_SCAN_CAP`` entries; a diff page holds at most ``max_bytes`` bytes of patch text, and no
file's patch is built when a side is over the per-file limits of ``tools.git.diff_limits`` (it is
listed with its sizes and a note instead); listings hold at most ``MAX_LISTED_ENTRIES`` lines.
``.a3s/`` never appears in status or diff output.
"""

from __future__ import annotations

import os
import re
from datetime import datetime, timedelta, timezone
from typing import Any

import pygit2
from pygit2.enums import DiffOption, FileStatus, SortMode

from kernel import gitdiff, gitstatus
from kernel.errors import InvalidArgument, NotFound, ToolError
from kernel.gittree import open_repository, resolve_commit
from kernel.gitwhole import filtered_and_read
from tools.git.diff_limits import MAX_DIFF_FILE_BYTES, MAX_DIFF_FILE_LINES, DiffJudge, omission_block
from tools.git.view import (
    GitView,
    Guard,
    is_internal,
    large_files,
    page_list,
    relative_to_workspace,
    too_large,
)
from tools.shown_names import shown_name

LOG_SCAN_CAP = 5000  # commits a log walk may visit (offset + page)
MAX_LISTED_ENTRIES = 200  # status lines / per-file diff stats kept in output and metadata
SUMMARY_MAX_CHARS = 200
SHORT_ID = 7
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"  # git's well-known empty tree
WORKDIR_DIFF_FLAGS = (
    DiffOption.INCLUDE_UNTRACKED | DiffOption.RECURSE_UNTRACKED_DIRS | DiffOption.SHOW_UNTRACKED_CONTENT
)

_INDEX_CODES = (
    (FileStatus.INDEX_NEW, "A"),
    (FileStatus.INDEX_MODIFIED, "M"),
    (FileStatus.INDEX_DELETED, "D"),
    (FileStatus.INDEX_RENAMED, "R"),
    (FileStatus.INDEX_TYPECHANGE, "T"),
)
_WT_CODES = (
    (FileStatus.WT_MODIFIED, "M"),
    (FileStatus.WT_DELETED, "D"),
    (FileStatus.WT_RENAMED, "R"),
    (FileStatus.WT_TYPECHANGE, "T"),
)

Result = tuple[str, dict[str, Any]]


def _short(oid: object) -> str:
    return str(oid)[:SHORT_ID]


def status_code(flags: int) -> str:
    """A porcelain-style two-letter code: index column, work-tree column."""
    if flags & FileStatus.CONFLICTED:
        return "UU"
    if flags & FileStatus.WT_NEW and not flags & ~FileStatus.WT_NEW:
        return "??"
    x = next((c for f, c in _INDEX_CODES if flags & f), " ")
    y = next((c for f, c in _WT_CODES if flags & f), " ")
    return x + y


def head_state(repo: pygit2.Repository) -> dict[str, Any]:
    """branch name (None when detached), head commit id, detached/unborn flags."""
    if repo.head_is_unborn:
        target = repo.lookup_reference("HEAD").target
        branch = str(target).removeprefix("refs/heads/")
        return {"branch": branch, "head": None, "detached": False, "unborn": True}
    head = repo.head
    detached = repo.head_is_detached
    return {
        "branch": None if detached else head.shorthand,
        "head": str(head.target),
        "detached": detached,
        "unborn": False,
    }


def is_linked_worktree(repo: pygit2.Repository) -> bool:
    # A linked worktree's work tree holds a ``.git`` *file* pointing at <main>/.git/worktrees/<name>.
    return bool(repo.workdir) and os.path.isfile(os.path.join(repo.workdir, ".git"))


# --- status ----------------------------------------------------------------------------------------


def status(view: GitView) -> Result:
    if view.commit is not None:
        cid = str(view.commit.id)
        out = f"Read-only view of commit {cid} ({view.workspace.name})\nnothing to commit, working tree clean"
        return out, {
            "branch": None,
            "is_worktree": False,
            "dirty_count": 0,
            "is_dirty": False,
            "head": cid,
            "detached": True,
            "read_only": True,
        }
    repo = view.repo
    state = head_state(repo)
    read_whole = filtered_and_read(large_files(view, filtered_only=True))
    if read_whole:
        raise too_large(
            view, read_whole, "status (a .gitattributes or core.autocrlf filter applies)", "git status"
        )
    # Without the GIL (kernel/gitstatus.py): pygit2's status stopped every thread of the host.
    entries = sorted((p, f) for p, f in gitstatus.entries(repo).items() if not is_internal(p))
    if state["unborn"]:
        first = f"On branch {state['branch']} (no commits yet)"
    elif state["detached"]:
        first = f"HEAD detached at {_short(state['head'])}"
    else:
        first = f"On branch {state['branch']}"
    lines = [first]
    if not entries:
        lines.append("nothing to commit, working tree clean")
    else:
        lines.append(f"Changes ({len(entries)}):")
        # A name is quoted when it holds a newline or control character (it forged entry lines).
        lines.extend(f"  {status_code(f)} {shown_name(p)}" for p, f in entries[:MAX_LISTED_ENTRIES])
        if len(entries) > MAX_LISTED_ENTRIES:
            lines.append(f"  ... and {len(entries) - MAX_LISTED_ENTRIES} more")
    meta = {
        "branch": state["branch"],
        "is_worktree": is_linked_worktree(repo),
        "dirty_count": len(entries),
        "is_dirty": bool(entries),
        "head": state["head"],
        "detached": state["detached"],
        "files": [{"path": p, "status": status_code(f)} for p, f in entries[:MAX_LISTED_ENTRIES]],
        "files_truncated": len(entries) > MAX_LISTED_ENTRIES,
    }
    return "\n".join(lines), meta


# --- log -------------------------------------------------------------------------------------------


def _when(sig: pygit2.Signature) -> str:
    tz = timezone(timedelta(minutes=int(sig.offset)))
    return datetime.fromtimestamp(int(sig.time), tz).strftime("%Y-%m-%d %H:%M:%S %z")


def _summary(commit: pygit2.Commit) -> str:
    first = (commit.message or "").strip().split("\n", 1)[0]
    return first[:SUMMARY_MAX_CHARS]


def log(view: GitView, guard: Guard, *, ref: str | None, offset: int, limit: int) -> Result:
    repo = view.repo
    if offset >= LOG_SCAN_CAP:
        raise InvalidArgument(f"cursor {offset} is beyond the log scan cap of {LOG_SCAN_CAP} entries")
    if ref is not None:
        start: pygit2.Commit | None = resolve_commit(repo, ref)
    elif view.commit is not None:
        start = view.commit
    elif repo.head_is_unborn:
        start = None
    else:
        start = repo.head.peel(pygit2.Commit)
    end = min(offset + limit, LOG_SCAN_CAP)
    seen: list[pygit2.Commit] = []
    if start is not None:
        walker = repo.walk(start.id, SortMode.TOPOLOGICAL | SortMode.TIME)
        # One past the page tells whether more history exists, without walking it all.
        for index, commit in enumerate(walker):
            if index % 256 == 0:
                guard.check()
            if index > end:
                break
            if index >= offset:
                seen.append(commit)
    page = seen[: end - offset]
    if offset > 0 and not page:
        raise InvalidArgument(f"cursor {offset} is past the end of the history")
    more_history = len(seen) > len(page)
    has_more = more_history and end < LOG_SCAN_CAP
    scan_truncated = more_history and end >= LOG_SCAN_CAP
    lines = [f"Commit log ({len(page)} entries from offset {offset})"]
    commits = []
    for c in page:
        author = c.author
        lines.append(f"{_short(c.id)} {_when(author)} {author.name}: {_summary(c)}")
        commits.append(
            {
                "id": str(c.id),
                "short_id": _short(c.id),
                "author": author.name,
                "email": author.email,
                "time": int(c.commit_time),
                "summary": _summary(c),
                "parents": [str(p) for p in c.parent_ids],
            }
        )
    if has_more:
        lines.append(f"... (more commits available; continue with cursor={end})")
    elif scan_truncated:
        lines.append(f"... (log scan capped at {LOG_SCAN_CAP} entries; older history is not listed)")
    meta = {
        "count": len(page),
        "start": str(start.id) if start is not None else None,
        "page": {
            "offset": offset,
            "limit": limit,
            "returned": len(page),
            "has_more": has_more,
            "next_cursor": str(end) if has_more else None,
            "scan_cap": LOG_SCAN_CAP,
            "scan_truncated": scan_truncated,
        },
        "commits": commits,
    }
    return "\n".join(lines), meta


# --- diff ------------------------------------------------------------------------------------------


def _path_filter(prefix: str | None, delta: pygit2.DiffDelta) -> bool:
    paths = {delta.old_file.path, delta.new_file.path}
    if any(is_internal(p) for p in paths):
        return False
    if not prefix:
        return True
    return any(p == prefix or p.startswith(prefix + "/") for p in paths)


def _diff_object(view: GitView, guard: Guard, target: str | None) -> tuple[pygit2.Diff | None, str, str]:
    """(the diff, description of the old side, description of the new side)."""
    repo = view.repo
    if view.commit is not None:
        if target is None:
            return None, str(view.commit.id), str(view.commit.id)
        old = resolve_commit(repo, target)
        return repo.diff(old, view.commit), str(old.id), str(view.commit.id)
    if target is not None:
        old_commit = resolve_commit(repo, target)
        old_tree, old_name = old_commit.tree, str(old_commit.id)
    elif repo.head_is_unborn:
        empty = repo[EMPTY_TREE]
        assert isinstance(empty, pygit2.Tree)
        old_tree, old_name = empty, "(empty tree)"
    else:
        head = repo.head.peel(pygit2.Commit)
        old_tree, old_name = head.tree, str(head.id)
    # libgit2 hashes every tracked work-tree file inside this one call (a tree entry carries no
    # stat data to trust), whole when a filter applies: measured even for an unchanged file.
    read_whole = [
        f
        for f in large_files(view, filtered_only=True)
        if f.filtered and (f.tracked or _in_tree(old_tree, f.path))
    ]
    if read_whole:
        rev = EMPTY_TREE if old_name == "(empty tree)" else old_name
        raise too_large(
            view,
            read_whole,
            "diff (a .gitattributes or core.autocrlf filter applies)",
            f"git diff --stat {rev}",
        )
    return _workdir_diff(view, guard, old_tree), old_name, "working tree"


def _workdir_diff(view: GitView, guard: Guard, old_tree: pygit2.Tree) -> pygit2.Diff:
    """``old_tree`` against the work tree: without the GIL and stopped between two files once the
    call's deadline passed or it was cancelled (kernel/gitdiff.py); pygit2's own call where that
    binding is unavailable."""
    try:
        found = gitdiff.tree_to_workdir(view.repo, old_tree, WORKDIR_DIFF_FLAGS, guard.should_stop)
    except gitdiff.DiffStopped:
        guard.check()  # the typed timeout or cancellation that stopped it
        raise
    if found is None:
        found = old_tree.diff_to_workdir(flags=WORKDIR_DIFF_FLAGS)
    return found


def _in_tree(tree: pygit2.Tree, path: str) -> bool:
    try:
        tree[path]
    except KeyError:
        return False
    return True


def _bash_rev(view: GitView, old_name: str) -> str | None:
    """The revision an omitted file's note tells bash's ``git diff`` to compare the work tree with."""
    if view.commit is not None or "exec" not in view.workspace.capabilities:
        return None  # a git: view (two commits, no bash) or a workspace without bash
    return EMPTY_TREE if old_name == "(empty tree)" else old_name


def _cut(window: bytes, final: bool) -> bytes:
    """A page boundary that keeps lines whole when possible and never splits a UTF-8 character."""
    if final:
        return window
    nl = window.rfind(b"\n")
    if nl >= 0:
        return window[: nl + 1]
    end = len(window)
    while end > 0 and (window[end - 1] & 0xC0) == 0x80:
        end -= 1
    if end > 0 and window[end - 1] >= 0xC0:
        end -= 1  # drop the lead byte of the character the window split
    return window[:end] or window


def diff(
    view: GitView,
    guard: Guard,
    *,
    target: str | None,
    path: str | None,
    byte_offset: int,
    max_bytes: int,
) -> Result:
    diff_obj, old_name, new_name = _diff_object(view, guard, target)
    chunks: list[bytes] = []
    total = 0
    window_end = byte_offset + max_bytes
    files: list[dict[str, Any]] = []
    insertions = deletions = changed = omitted = 0
    if diff_obj is not None:
        # Deltas first (no patch built): a file over the per-file limits never gets one (diff_limits).
        judge = DiffJudge(view.repo, view.workspace, workdir_new=view.commit is None, check=guard.check)
        bash_rev = _bash_rev(view, old_name)
        for index, delta in enumerate(diff_obj.deltas):
            guard.check()  # per file: each patch is bounded, so the deadline is overrun by one at most
            if not _path_filter(path, delta):
                continue
            judged = judge.judge(delta)
            adds: int | None = None
            dels: int | None = None
            if judged.omitted:
                data = omission_block(delta, judged, bash_rev=bash_rev)
                omitted += 1
            else:
                patch = diff_obj[index]
                if patch is None:
                    continue
                data = patch.data
                _, adds, dels = patch.line_stats
                del patch  # free libgit2's copy before the next file's is built
                insertions += adds
                deletions += dels
            changed += 1
            if len(files) < MAX_LISTED_ENTRIES:
                files.append(
                    {
                        "path": delta.new_file.path,
                        "old_path": delta.old_file.path,
                        "status": delta.status_char(),
                        "additions": adds,
                        "deletions": dels,
                        "before_bytes": judged.before_bytes,
                        "after_bytes": judged.after_bytes,
                        "diff_omitted": judged.omitted,
                    }
                )
            # Keep only the bytes that can fall inside the requested window.
            if total < window_end and total + len(data) > byte_offset:
                chunks.append(data[max(0, byte_offset - total) : window_end - total])
            total += len(data)
            del data
    if byte_offset > total:
        raise InvalidArgument(f"byte_offset {byte_offset} is past the end of the diff ({total} bytes)")
    window = b"".join(chunks)
    final = byte_offset + len(window) >= total
    page = _cut(window, final)
    next_offset = byte_offset + len(page)
    has_more = next_offset < total
    if total == 0:
        if view.commit is not None and target is None:
            text = (
                "No changes: a git-tree view is a single commit with no working tree; "
                "pass target=<ref> to compare it with another revision."
            )
        else:
            text = "No changes."
    elif not page:
        text = f"(end of diff: byte_offset {byte_offset} equals diff length)"
    else:
        text = page.decode("utf-8", "replace")
        if has_more:
            text = text.rstrip("\n") + f"\n... (more diff available; continue with byte_offset={next_offset})"
    meta = {
        "target": target,
        "old": old_name,
        "new": new_name,
        "path": path,
        "files_changed": changed,
        "insertions": insertions,
        "deletions": deletions,
        "files": files,
        "files_truncated": changed > len(files),
        "files_omitted": omitted,
        "diff_omitted": omitted > 0,
        "max_file_bytes": MAX_DIFF_FILE_BYTES,
        "max_file_lines": MAX_DIFF_FILE_LINES,
        "byte_offset": byte_offset,
        "max_bytes": max_bytes,
        "returned_bytes": len(page),
        "next_byte_offset": next_offset if has_more else None,
        "total_bytes": total,
        "has_more": has_more,
    }
    return text, meta


# --- lists -----------------------------------------------------------------------------------------


def _listing(title: str, noun: str, rows: list[str], page_meta: dict[str, Any]) -> str:
    lines = [f"{title} ({page_meta['returned']} of {page_meta['total']} from offset {page_meta['offset']})"]
    lines.extend(rows)
    if page_meta["has_more"]:
        lines.append(f"... (more {noun} available; continue with cursor={page_meta['next_cursor']})")
    return "\n".join(lines)


def branch_list(view: GitView, *, offset: int, limit: int) -> Result:
    repo = view.repo
    current = None if view.commit is not None else head_state(repo)["branch"]
    here = str(view.commit.id) if view.commit is not None else None
    items: list[dict[str, Any]] = []
    for kind, names in (("local", repo.branches.local), ("remote", repo.branches.remote)):
        for name in sorted(names):
            br = repo.branches.local[name] if kind == "local" else repo.branches.remote[name]
            try:
                target = str(br.peel(pygit2.Commit).id)
            except (KeyError, ValueError, pygit2.GitError):
                target = None  # e.g. a symbolic origin/HEAD whose target is gone
            upstream = None
            if kind == "local":
                try:
                    up = br.upstream
                    upstream = up.shorthand if up is not None else None
                except (KeyError, ValueError, pygit2.GitError):
                    upstream = None
            items.append(
                {
                    "name": name,
                    "kind": kind,
                    "target": target,
                    "current": kind == "local" and name == current,
                    "at_view_commit": here is not None and target == here,
                    "upstream": upstream,
                }
            )
    page, pm = page_list(items, offset, limit, "branch")
    rows = [
        f"{'*' if b['current'] else ' '} {b['name'] if b['kind'] == 'local' else 'remotes/' + b['name']} "
        f"{_short(b['target']) if b['target'] else '-------'}"
        for b in page
    ]
    return _listing("Branches", "branches", rows, pm), {"count": len(page), "page": pm, "branches": page}


def stash_list(view: GitView, *, offset: int, limit: int) -> Result:
    stashes = view.repo.listall_stashes()
    items = [
        {"index": i, "name": f"stash@{{{i}}}", "id": str(s.commit_id), "message": s.message}
        for i, s in enumerate(stashes)
    ]
    page, pm = page_list(items, offset, limit, "stash")
    rows = [f"{s['name']}: {s['message']}" for s in page]
    return _listing("Stashes", "stashes", rows, pm), {"count": len(page), "page": pm, "stashes": page}


_URL_PASSWORD = re.compile(r"(://[^\s/:@]*:)[^\s/@]+(?=@)")


def _no_password(url: str | None) -> str | None:
    """``url`` with the password of its userinfo replaced (a token git stores in a remote URL): the
    kernel's redactor cleans the text, but ``metadata.remotes`` reached scripts and events whole."""
    return _URL_PASSWORD.sub(r"\1[REDACTED]", url) if url else url


def remote_list(view: GitView, *, remote_name: str | None, offset: int, limit: int) -> Result:
    remotes = sorted(view.repo.remotes, key=lambda r: r.name or "")
    items = [
        {"name": r.name, "url": _no_password(r.url), "push_url": _no_password(r.push_url)} for r in remotes
    ]
    if remote_name is not None:
        items = [r for r in items if r["name"] == remote_name]
        if not items:
            raise NotFound(f"no such remote: {remote_name}", path=remote_name)
    page, pm = page_list(items, offset, limit, "remote")
    rows = [f"{r['name']}\t{r['url']}" + (f" (push: {r['push_url']})" if r["push_url"] else "") for r in page]
    return _listing("Remotes", "remotes", rows, pm), {"count": len(page), "page": pm, "remotes": page}


def worktree_items(view: GitView) -> list[dict[str, Any]]:
    repo = view.repo
    items: list[dict[str, Any]] = []
    if repo.workdir and view.commit is None:
        state = head_state(repo)
        items.append(
            {
                "name": None,
                "path": os.path.realpath(repo.workdir),
                "workspace_path": relative_to_workspace(view, repo.workdir),
                "branch": state["branch"],
                "head": state["head"],
                "current": True,
                "prunable": False,
            }
        )
    for name in sorted(repo.list_worktrees()):
        wt = repo.lookup_worktree(name)
        branch = head = None
        if os.path.isdir(wt.path):
            try:
                sub = open_repository(wt.path)  # vetted like the main repository
                state = head_state(sub)
                branch, head = state["branch"], state["head"]
                sub.free()
            except (KeyError, ValueError, pygit2.GitError, ToolError):
                pass
        items.append(
            {
                "name": name,
                "path": os.path.realpath(wt.path),
                "workspace_path": relative_to_workspace(view, wt.path),
                "branch": branch,
                "head": head,
                "current": False,
                "prunable": bool(wt.is_prunable),
            }
        )
    return items


def worktree_list(view: GitView, *, offset: int, limit: int) -> Result:
    page, pm = page_list(worktree_items(view), offset, limit, "worktree")
    rows = []
    for w in page:
        where = w["workspace_path"] if w["workspace_path"] is not None else w["path"]
        label = w["name"] or "(current)"
        rows.append(f"{label}\t{where or '.'}\t[{w['branch'] or _short(w['head'] or '') or 'detached'}]")
    return _listing("Worktrees", "worktrees", rows, pm), {"count": len(page), "page": pm, "worktrees": page}
