"""The session cwd of ``bash``: checked inside the workspace, then held as a descriptor (SPEC B-6).

``ctx.session_state["bash"]["cwd"]`` is a physical workspace-relative directory. ``open_cwd``
checks it and opens it *in one step that is also the use*: ``Beneath.open_strict`` (``openat2``
with ``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS``, or an ``O_NOFOLLOW`` walk) gives an ``O_PATH``
directory descriptor, and the command is started there by ``fchdir`` (``tools._proc.spawn``'s
``cwd_fd``). A sandboxed process that swaps the directory for a symlink to outside after the check
therefore cannot move an approved host command out of the workspace: either the open refuses the
symlink (the call starts at the root, as for a vanished cwd) or the command starts in the very
directory that was checked, wherever it has been renamed to inside the workspace.
"""

from __future__ import annotations

import os
from pathlib import Path

from kernel.beneath import INTERNAL_DIR, Beneath, Fd
from kernel.errors import ToolError

O_CWD = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC  # fchdir needs search permission only


def open_cwd(root: Path, rel: str) -> tuple[Fd, str]:
    """A descriptor of the session cwd ``rel`` under the physical ``root`` and its relative path.

    Falls back to the root ('') when ``rel`` is gone, outside, internal, or not reachable without a
    symlink any more.
    """
    rel = usable_cwd(root, rel)
    beneath = Beneath(str(root))
    try:
        if rel:
            try:
                return Fd(beneath.open_strict(rel, O_CWD)), rel
            except (OSError, ToolError):
                pass  # changed since the check (a symlink swapped in, removed): start at the root
        return Fd(os.open(".", O_CWD, dir_fd=beneath.root_fd)), ""
    finally:
        beneath.close()


def usable_cwd(root: Path, rel: str) -> str:
    """``rel`` if it is still a directory inside the workspace, else '' (the root)."""
    if not rel:
        return ""
    candidate = root / rel
    if not candidate.is_dir():
        return ""
    return relative_inside(root, str(candidate)) or ""


def relative_inside(root: Path, path: str) -> str | None:
    """The workspace-relative form of ``path`` (physically resolved), or None outside / internal."""
    try:
        real = Path(os.path.realpath(path))
    except (OSError, ValueError, RecursionError):
        # A component changed kind mid-resolution (a concurrent swap), the path holds a NUL byte,
        # or it runs through a chain of symlinks deeper than realpath's recursion (the command
        # wrote its own "cwd report"): not usable.
        return None
    if real == root:
        return ""
    if root not in real.parents:
        return None
    rel = real.relative_to(root).as_posix()
    if rel == INTERNAL_DIR or rel.startswith(INTERNAL_DIR + "/"):
        return None
    return rel
