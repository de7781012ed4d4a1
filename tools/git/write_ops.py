"""Mutating forms of the ``git`` tool: branch create, checkout, stash save, worktree create/remove.

Only a working view (a local workspace) serves them; ``run`` refuses them on a commit view before
anything is opened for writing. Invariants:

- checkout never overwrites local changes unless ``force``: libgit2's SAFE strategy reports every
  conflicting path to a notify callback *before* touching a file, and those paths become a typed
  ``version_conflict``; nothing is written;
- neither checkout nor stash lets libgit2 write or delete through a symlink it does not know
  (``workdir_links``): such a link is a ``version_conflict`` (stash always; checkout unless
  ``force``, which unlinks it first);
- a worktree's directory is a workspace-relative path that went through the workspace resolver;
  removing a worktree deletes only a directory inside the workspace, and refuses a dirty one
  unless ``force``;
- ``.a3s/`` is never stashed: before a stash that includes untracked files it is added to the
  repository's local ``info/exclude`` (ignored files are left in place).
"""

from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path
from typing import Any

import pygit2
from pygit2.enums import CheckoutNotify, CheckoutStrategy, DiffFlag, FileMode, FileStatus

from kernel import gitstatus
from kernel.beneath import O_WALK_DIR, Fd
from kernel.errors import (
    InvalidArgument,
    NotFound,
    PathOutsideWorkspace,
    PermissionDenied,
    Unsupported,
    VersionConflict,
)
from kernel.gittree import open_repository, resolve_commit
from kernel.gitwhole import MAX_WHOLE_FILE_BYTES, LargeFile, filtered_and_read
from kernel.workspace import INTERNAL_DIR, LocalWorkspace, normalize_relative
from tools._fileio import check_not_git_metadata
from tools.git.read_ops import head_state
from tools.git.view import GitView, is_internal, large_files, relative_to_workspace, signature, too_large
from tools.git.workdir_links import in_the_way, remove

MAX_CHANGED_PATHS = 1000  # paths reported in metadata.changed_paths
DEFAULT_WORKTREE_DIR = ".worktrees"

Result = tuple[str, dict[str, Any]]


def _check_branch_name(name: str | None) -> str:
    if not name:
        raise InvalidArgument("name is required (the branch to create)")
    if not pygit2.reference_is_valid_name(f"refs/heads/{name}"):
        raise InvalidArgument(f"invalid branch name: {name!r}")
    return name


def branch_create(view: GitView, *, name: str | None, base: str | None) -> Result:
    repo = view.repo
    name = _check_branch_name(name)
    if repo.branches.local.get(name) is not None:
        raise InvalidArgument(f"branch {name!r} already exists")
    commit = resolve_commit(repo, base or "HEAD")
    repo.branches.local.create(name, commit)
    out = f"Created branch {name} at {str(commit.id)[:7]}"
    return out, {"branch": name, "target": str(commit.id), "base": base or "HEAD", "created": True}


class _CheckoutNotes(pygit2.CheckoutCallbacks):
    """Collects what a checkout would conflict with, and what it updated."""

    def __init__(self) -> None:
        super().__init__()
        self.conflicts: list[str] = []
        self.updated: list[str] = []

    def checkout_notify_flags(self) -> CheckoutNotify:
        return CheckoutNotify.CONFLICT | CheckoutNotify.UPDATED

    def checkout_notify(self, why, path, baseline, target, workdir):  # type: ignore[no-untyped-def]
        if why & CheckoutNotify.CONFLICT:
            self.conflicts.append(path)
        elif why & CheckoutNotify.UPDATED and len(self.updated) < MAX_CHANGED_PATHS:
            self.updated.append(path)


def checkout(view: GitView, *, ref: str | None, force: bool) -> Result:
    repo = view.repo
    if not ref:
        raise InvalidArgument("ref is required (a branch, tag or commit to check out)")
    before = head_state(repo)
    branch = repo.branches.local.get(ref)
    if branch is not None:
        commit = branch.peel(pygit2.Commit)
        head_target: str | pygit2.Oid = branch.name
    else:
        commit = resolve_commit(repo, ref)
        head_target = commit.id
    _check_state_dir(repo, commit, ref)
    _check_checkout_sizes(view, commit, ref, force=force)
    links = in_the_way(repo, str(view.root), commit.tree)
    if links and not force:
        raise _links_conflict(
            f"checkout of {ref} would write through symlinks the repository does not record", links, commit
        )
    remove(str(view.root), links)  # a forced checkout discards them like any local change
    notes = _CheckoutNotes()
    strategy = CheckoutStrategy.FORCE if force else CheckoutStrategy.SAFE
    try:
        repo.checkout_tree(commit, strategy=strategy, callbacks=notes)
    except pygit2.GitError as exc:
        if notes.conflicts:
            shown = ", ".join(sorted(notes.conflicts)[:20])
            raise VersionConflict(
                f"checkout of {ref} would overwrite local changes to: {shown}. "
                "Commit or stash them first, or pass force=true to discard them.",
                path=sorted(notes.conflicts)[0],
                expected=str(commit.id),
                actual="local changes",
                paths=sorted(notes.conflicts)[:MAX_CHANGED_PATHS],
            ) from exc
        raise
    repo.set_head(head_target)
    after = head_state(repo)
    where = f"branch {after['branch']}" if branch is not None else f"detached HEAD at {str(commit.id)[:7]}"
    out = f"Switched to {where}" + (" (forced: local changes discarded)" if force else "")
    meta = {
        "ref": ref,
        "branch": after["branch"],
        "head": str(commit.id),
        "previous_branch": before["branch"],
        "previous_head": before["head"],
        "detached": branch is None,
        "forced": force,
        "changed_paths": sorted(p for p in notes.updated if not is_internal(p)),
    }
    return out, meta


def _state_dir_entry(tree: pygit2.Tree | None) -> tuple[str, int] | None:
    if tree is None or INTERNAL_DIR not in tree:
        return None
    entry = tree[INTERNAL_DIR]
    return str(entry.id), int(entry.filemode)


def _check_state_dir(repo: pygit2.Repository, commit: pygit2.Commit, ref: str) -> None:
    """Refuse a checkout that would write, replace or delete anything under ``.a3s/``: a commit
    whose top-level ``.a3s`` entry differs from HEAD's (an added, changed or removed tree, file or
    symlink). ``.a3s/`` is the host's (skills and agents read when a session is built, workflow
    logs replayed on resume, the search index, the ``.git`` link record): no model-side tool may
    write it, and libgit2 would write a commit's ``.a3s/`` files there like any others."""
    head_tree = None if repo.head_is_unborn else repo.head.peel(pygit2.Commit).tree
    if _state_dir_entry(commit.tree) == _state_dir_entry(head_tree):
        return
    raise PermissionDenied(
        f"checkout of {ref} would change {INTERNAL_DIR}/ (its commit's {INTERNAL_DIR} entry differs from "
        f"HEAD's): {INTERNAL_DIR}/ holds a3s-fleet's own state (skills, agents, workflow logs, the index), "
        "which the git tool never writes; check that commit out outside a3s-fleet",
        reason="protected_path",
        path=INTERNAL_DIR,
    )


def _check_checkout_sizes(view: GitView, commit: pygit2.Commit, ref: str, *, force: bool) -> None:
    """Refuse a checkout that would make libgit2 hold a file over ``MAX_WHOLE_FILE_BYTES`` whole:
    a blob it writes (inflated whole), or a changed work-tree file a filter applies to (read whole
    to compare). Sizes come from object headers and ``lstat``; nothing is read."""
    repo = view.repo
    held: list[LargeFile] = []
    files = large_files(view)
    held.extend(filtered_and_read(files))
    target = commit.tree
    if force:  # every changed file is restored from the target: its blob is inflated whole
        for f in files:
            if f.tracked and f.looks_changed and f not in held:
                size = _blob_size(repo, target, f.path)
                if size is not None and size > MAX_WHOLE_FILE_BYTES:
                    held.append(LargeFile(f.path, size, f.filtered, f.tracked, f.looks_changed))
    base = None if repo.head_is_unborn else repo.head.peel(pygit2.Commit).tree
    changes = target.diff_to_tree(base, swap=True) if base is not None else None  # no content read
    deltas = changes.deltas if changes is not None else ()
    known = {f.path for f in held}
    for delta in deltas:
        new = delta.new_file
        if not new.flags & DiffFlag.EXISTS or new.path in known or new.mode == FileMode.COMMIT:
            continue
        try:
            size = int(repo.odb.read_header(new.id)[1])
        except (KeyError, ValueError, pygit2.GitError):
            continue
        if size > MAX_WHOLE_FILE_BYTES:
            held.append(LargeFile(new.path, size, False, True, True))
    if held:
        raise too_large(
            view, held, f"checkout of {ref}", f"git checkout {'-f ' if force else ''}{shlex.quote(ref)}"
        )


def _blob_size(repo: pygit2.Repository, tree: pygit2.Tree, path: str) -> int | None:
    try:
        entry = tree[path]
        return int(repo.odb.read_header(entry.id)[1])
    except (KeyError, ValueError, pygit2.GitError):
        return None


def stash_save(view: GitView, *, message: str | None, include_untracked: bool) -> Result:
    repo = view.repo
    if repo.head_is_unborn:
        raise InvalidArgument("cannot stash: the repository has no commits yet")
    # Before libgit2 looks (its status reads a filtered changed file whole): stashing a changed or
    # untracked file writes its blob from the whole file, three copies of it under a filter.
    held = [f for f in large_files(view) if f.looks_changed and (f.tracked or include_untracked)]
    if held:
        raise too_large(view, held, "stash", "git stash" + (" -u" if include_untracked else ""))
    changed = gitstatus.entries(repo)  # without the GIL (kernel/gitstatus.py)
    eligible = [
        p
        for p, f in changed.items()
        if not is_internal(p) and (include_untracked or f != FileStatus.WT_NEW) and f != FileStatus.IGNORED
    ]
    if not eligible:
        return "No local changes to save", {"stashed": False, "include_untracked": include_untracked}
    links = in_the_way(repo, str(view.root))
    if links:
        raise _links_conflict("cannot stash: symlinks stand where HEAD or the index has files", links, None)
    if include_untracked and any(is_internal(p) for p in changed):
        # libgit2 1.9 sweeps every untracked file into the stash (and deletes it) even when given a
        # pathspec, so a3s-fleet's own directory is made ignored instead; ignored files are kept.
        exclude_internal(repo)
    oid = repo.stash(signature(repo), message, include_untracked=include_untracked)
    stashes = repo.listall_stashes()
    label = stashes[0].message if stashes else (message or "")
    out = f"Saved working directory and index state as stash@{{0}}: {label}"
    return out, {
        "stashed": True,
        "id": str(oid),
        "name": "stash@{0}",
        "message": label,
        "include_untracked": include_untracked,
        "changed_paths": sorted(eligible)[:MAX_CHANGED_PATHS],
    }


def _links_conflict(what: str, links: list[str], commit: pygit2.Commit | None) -> VersionConflict:
    shown = ", ".join(links[:20])
    return VersionConflict(
        f"{what}: {shown}. libgit2 would write or delete through them (outside the workspace when "
        "they lead there); remove or rename them first"
        + (", or pass force=true to discard them." if commit is not None else "."),
        path=links[0],
        expected=str(commit.id) if commit is not None else "HEAD",
        actual="symlink",
        paths=links[:MAX_CHANGED_PATHS],
    )


def exclude_internal(repo: pygit2.Repository) -> None:
    """Add ``/.a3s/`` to the repository's local exclude file (``info/exclude``; never committed)."""
    git_dir = Path(repo.path)
    common = git_dir / "commondir"  # a linked worktree shares info/ with the main repository
    if common.is_file():
        git_dir = (git_dir / common.read_text(encoding="utf-8").strip()).resolve()
    exclude = git_dir / "info" / "exclude"
    line = f"/{INTERNAL_DIR}/"
    existing = exclude.read_text(encoding="utf-8") if exclude.is_file() else ""
    if line in existing.splitlines():
        return
    exclude.parent.mkdir(parents=True, exist_ok=True)
    sep = "" if not existing or existing.endswith("\n") else "\n"
    with open(exclude, "a", encoding="utf-8") as fh:
        fh.write(f"{sep}# a3s-fleet internal state\n{line}\n")


def _resolve_local(view: GitView, rel: str) -> Path:
    resolve = getattr(view.workspace, "resolve", None)
    if resolve is None:
        raise Unsupported("worktrees need a local workspace")
    real = resolve(rel)
    assert isinstance(real, Path)
    return real


def worktree_create(
    view: GitView, *, name: str | None, path: str | None, new_branch: bool, base: str | None
) -> Result:
    repo = view.repo
    branch_name = _check_branch_name(name)
    wt_name = branch_name.replace("/", "-")
    rel = path if path is not None else f"{DEFAULT_WORKTREE_DIR}/{wt_name}"
    real = _resolve_local(view, rel)
    if real == view.root:
        raise InvalidArgument("a worktree cannot be created at the workspace root")
    ws = view.workspace
    if isinstance(ws, LocalWorkspace):
        # A work tree checked out inside git metadata would put branch files where git runs them
        # (hooks): refused whoever asks.
        check_not_git_metadata(ws, normalize_relative(rel), real.relative_to(view.root).as_posix())
    if os.path.lexists(real):
        raise InvalidArgument(f"worktree path already exists: {rel}")
    if wt_name in repo.list_worktrees():
        raise InvalidArgument(f"a worktree named {wt_name!r} already exists")
    created_branch = False
    if new_branch:
        if base is None and repo.head_is_unborn:
            raise InvalidArgument("cannot create a worktree branch: the repository has no commits yet")
        if repo.branches.local.get(branch_name) is not None:
            raise InvalidArgument(f"branch {branch_name!r} already exists; pass new_branch=false to use it")
        commit = resolve_commit(repo, base or "HEAD")
        branch = repo.branches.local.create(branch_name, commit)
        created_branch = True
    else:
        if base is not None:
            raise InvalidArgument("base only applies with new_branch=true")
        found = repo.branches.local.get(branch_name)
        if found is None:
            raise NotFound(f"no such branch: {branch_name}", path=branch_name)
        branch = found
    try:
        real = _make_parent_dirs(view, rel)
        wt = repo.add_worktree(wt_name, str(real), branch)
    except BaseException:
        if created_branch:
            branch.delete()  # leave no half-made branch behind
        raise
    workspace_path = relative_to_workspace(view, wt.path) or rel
    head = str(branch.peel(pygit2.Commit).id)
    out = f"Created worktree {wt_name} at {workspace_path} on branch {branch_name} ({head[:7]})"
    return out, {
        "name": wt_name,
        "path": workspace_path,
        "branch": branch_name,
        "head": head,
        "new_branch": created_branch,
        "changed_paths": [workspace_path],
    }


def _make_parent_dirs(view: GitView, rel: str) -> Path:
    """Create the worktree's missing parent directories below verified descriptors (never through a
    symlink) and return its physical path. libgit2 itself creates the last directory by path: that
    one step is not descriptor-based (the call is exclusive: no other tool of the session runs)."""
    ws = view.workspace
    if not isinstance(ws, LocalWorkspace):
        raise Unsupported("worktrees need a local workspace")
    with ws.locate(rel) as loc:
        current = Fd(loc.parent.fd, owned=False)
        try:
            for name in loc.missing:
                try:
                    os.mkdir(name, dir_fd=current.fd)
                except FileExistsError:
                    pass
                nxt = Fd(os.open(name, O_WALK_DIR, dir_fd=current.fd))
                current.close()
                current = nxt
        except OSError as exc:
            raise PathOutsideWorkspace(
                f"cannot create the directories for {rel}: {exc.strerror}", path=rel
            ) from None
        finally:
            current.close()
        return view.root / loc.rel


def _find_worktree(view: GitView, name: str | None, path: str | None) -> tuple[str, pygit2.Worktree]:
    repo = view.repo
    if name:
        wt_name = name.replace("/", "-")
        if wt_name not in repo.list_worktrees():
            raise NotFound(f"no such worktree: {name}", path=name)
        return wt_name, repo.lookup_worktree(wt_name)
    if path is None:
        raise InvalidArgument("worktree remove needs name or path")
    real = _resolve_local(view, path)
    for wt_name in repo.list_worktrees():
        wt = repo.lookup_worktree(wt_name)
        if os.path.realpath(wt.path) == str(real):
            return wt_name, wt
    raise NotFound(f"no worktree at {path}", path=path)


def _remove_tree(view: GitView, rel: str) -> None:
    """Delete the worktree directory relative to its verified parent descriptor: ``shutil.rmtree``
    with ``dir_fd`` opens every level with ``O_NOFOLLOW``, so a swapped symlink is never followed."""
    ws = view.workspace
    if not isinstance(ws, LocalWorkspace):
        raise Unsupported("worktrees need a local workspace")
    with ws.locate(rel) as loc:
        if not loc.name or loc.missing:
            return
        shutil.rmtree(loc.name, dir_fd=loc.parent.fd)


def worktree_remove(view: GitView, *, name: str | None, path: str | None, force: bool) -> Result:
    wt_name, wt = _find_worktree(view, name, path)
    rel = relative_to_workspace(view, wt.path)
    if rel is None or rel == "":
        raise PathOutsideWorkspace(
            f"worktree {wt_name} lies outside the workspace; it is not removed from here", path=wt.path
        )
    real = _resolve_local(view, rel)  # the resolver has the last word (symlinks, .a3s, …)
    dirty: list[str] = []
    if os.path.isdir(real):
        sub = open_repository(real)
        try:
            # Without the GIL (kernel/gitstatus.py): pygit2's status of a big linked work tree (or
            # one with a big submodule, whose status libgit2 runs too) stood the event loop still.
            dirty = sorted(gitstatus.entries(sub))
        finally:
            sub.free()
        if dirty and not force:
            raise VersionConflict(
                f"worktree {wt_name} has local changes ({len(dirty)} path(s), e.g. {dirty[0]}); "
                "pass force=true to remove it anyway",
                path=rel,
                expected="clean worktree",
                actual="local changes",
                paths=dirty[:MAX_CHANGED_PATHS],
            )
        _remove_tree(view, rel)
    wt.prune(True)
    out = f"Removed worktree {wt_name} at {rel}" + (" (forced)" if force and dirty else "")
    return out, {"name": wt_name, "path": rel, "removed": True, "forced": force, "changed_paths": [rel]}
