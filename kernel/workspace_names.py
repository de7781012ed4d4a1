"""Workspace names: one string names a workspace (SPEC S-2, S-3).

- a directory path (``/src/app``, ``.``) → ``LocalWorkspace``;
- ``git:REPO_PATH@REV`` → ``GitTreeWorkspace``, a read-only view of the commit ``REV`` resolves to
  (``git:/src/repo@HEAD~1``, ``git:.@main``, ``git:../lib@v1.2``). ``@REV`` may be left out (HEAD).

Both ``REPO_PATH`` and ``REV`` may contain ``@`` (``HEAD@{1}``, ``/srv/a@b/repo``): the split is the
first ``@`` whose left side opens as a repository. Relative paths are taken from ``base``
(default: the process working directory, read at this edge only).
"""

from __future__ import annotations

import os
from pathlib import Path

from kernel.errors import InvalidArgument, NotFound
from kernel.workspace import LocalWorkspace, Workspace

# kernel.gittree (pygit2) is imported only for git:REPO@REV names: opening a directory stays light.

GIT_PREFIX = "git:"
DEFAULT_REV = "HEAD"


def parse_git_name(name: str, *, base: str | os.PathLike[str] | None = None) -> tuple[Path, str]:
    """Split ``git:REPO_PATH@REV`` into (absolute repo path, rev); see the module docstring."""
    if not name.startswith(GIT_PREFIX):
        raise InvalidArgument(f"not a git workspace name: {name!r}")
    spec = name[len(GIT_PREFIX) :]
    if not spec:
        raise InvalidArgument("git workspace name needs a repository path: git:REPO_PATH@REV")
    from kernel.gittree import open_repository

    here = Path(base) if base is not None else Path.cwd()
    candidates = [i for i, ch in enumerate(spec) if ch == "@"]
    for i in candidates:
        repo_part, rev = spec[:i], spec[i + 1 :]
        if not repo_part or not rev:
            continue
        path = (here / repo_part).resolve()
        try:
            open_repository(path).free()
        except NotFound:
            continue
        return path, rev
    whole = (here / spec.rstrip("@")).resolve()
    if "@" not in spec.rstrip("@"):
        return whole, DEFAULT_REV  # GitTreeWorkspace reports a missing repository itself
    try:
        open_repository(whole).free()
        return whole, DEFAULT_REV
    except NotFound:
        pass
    raise NotFound(f"no git repository found in workspace name {name!r}", path=name)


def open_workspace(name: str, *, base: str | os.PathLike[str] | None = None) -> Workspace:
    """The workspace a name designates (LocalWorkspace or GitTreeWorkspace)."""
    if not isinstance(name, str) or not name:
        raise InvalidArgument("workspace name must be a non-empty string")
    if "\x00" in name:
        raise InvalidArgument("workspace name contains a NUL byte")
    if name.startswith(GIT_PREFIX):
        from kernel.gittree import GitTreeWorkspace

        repo_path, rev = parse_git_name(name, base=base)
        return GitTreeWorkspace(repo_path, rev)
    here = Path(base) if base is not None else Path.cwd()
    return LocalWorkspace(here / name)
