"""A sandboxed command may not create or replace the workspace's root ``.git`` (SPEC B-6, K-3).

The sandbox binds an existing ``.git`` directory or file read-only (``mounts.py``), but it can only
bind what exists. In a workspace without a repository a command could ``git init`` and set
``core.fsmonitor`` (or hooks, or a ``gitdir:`` file naming another repository): the user's next
``git status`` there — or a shell prompt that runs it — would then run the model's program on the
host. A ``.git`` *symlink* is bound at its target, so the link itself could be swapped the same way.

So: where there is no ``.git``, the sandbox binds an empty read-only placeholder there for the
command's lifetime (``mounts.py``): nothing can be created at that path while it runs, and an empty
``.git`` is no repository to the host's git either. ``observe`` the root entry before a sandboxed
command, and ``restore`` after it (every process of the sandbox is dead by then): the empty
placeholder is removed; whatever else now stands at ``.git`` that was not there before (the
placeholder lost to a concurrent call's clean-up, a replaced symlink) is moved, whole, into
``.a3s/quarantine/`` (never listed, read or written by tools, bound read-only in the sandbox; the
user can inspect it), and a replaced symlink is put back. Everything happens relative to the
workspace root's descriptor with ``O_NOFOLLOW`` semantics. What stays open: a ``.git`` *symlink*
replaced by a command exists until the command ends. Nested repositories (``sub/.git``) are ordinary
workspace content (docs/sandbox.md).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import stat as stat_mod
import time
from dataclasses import dataclass

from kernel.beneath import O_PATH_DIR
from kernel.statedir import open_state_dir

GIT_DIR = ".git"
QUARANTINE = "quarantine"


@dataclass(frozen=True)
class RootGit:
    """What stood at ``<root>/.git``: its type, identity and, for a symlink, its target."""

    mode: int
    dev: int
    ino: int
    link: str | None


def observe(root: str) -> RootGit | None:
    fd = os.open(root, O_PATH_DIR)
    try:
        return _entry(fd)
    finally:
        os.close(fd)


def restore(root: str, before: RootGit | None) -> str | None:
    """Undo a change of ``<root>/.git`` since ``before``; the quarantined entry's workspace-relative
    path when something was moved away, else None. Raises ``OSError`` when it cannot be undone."""
    fd = os.open(root, O_PATH_DIR)
    try:
        after = _entry(fd)
        if after == before:
            return None
        if before is None and after is not None and after.mode == stat_mod.S_IFDIR:
            with contextlib.suppress(OSError):
                os.rmdir(GIT_DIR, dir_fd=fd)  # the sandbox's empty placeholder (mounts.py)
                return None
        kept = _quarantine(root, fd) if after is not None else None
        if before is not None and before.link is not None:
            os.symlink(before.link, GIT_DIR, dir_fd=fd)
        return kept
    finally:
        os.close(fd)


def _entry(root_fd: int) -> RootGit | None:
    try:
        st = os.lstat(GIT_DIR, dir_fd=root_fd)
    except FileNotFoundError:
        return None
    link = os.readlink(GIT_DIR, dir_fd=root_fd) if stat_mod.S_ISLNK(st.st_mode) else None
    return RootGit(stat_mod.S_IFMT(st.st_mode), st.st_dev, st.st_ino, link)


def _quarantine(root: str, root_fd: int) -> str:
    name = f"git-{time.strftime('%Y%m%dT%H%M%S')}-{secrets.token_hex(4)}"
    try:
        with open_state_dir(root, QUARANTINE) as qdir:
            os.rename(GIT_DIR, name, src_dir_fd=root_fd, dst_dir_fd=qdir.fd)
        return f".a3s/{QUARANTINE}/{name}"
    except OSError:
        pass
    # Cannot be kept (another file system, a full disk): it must not stay where git finds it.
    st = os.lstat(GIT_DIR, dir_fd=root_fd)
    if stat_mod.S_ISDIR(st.st_mode):
        shutil.rmtree(GIT_DIR, dir_fd=root_fd)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(GIT_DIR, dir_fd=root_fd)
    return "(removed: it could not be moved into .a3s/quarantine)"
