"""The host's own state directory ``<workspace>/.a3s`` (artifacts, indexes, logs) (issue 15 item 3).

Invariants:

- ``ensure_state_dir`` creates ``.a3s`` (and ``.a3s/.gitignore`` holding ``*``, so the user's
  ``git status`` stays clean without touching the repository's own config) when a session opens on
  a writable local workspace — before any tool, hence before any sandboxed command, runs. The bash
  sandbox binds it read-only, which it can only do when it exists.
- ``.a3s`` and everything below it are opened one component at a time from the workspace root's
  descriptor with ``O_NOFOLLOW``: a symlink (or a file) where a state directory should be is
  refused with ``permission_denied`` (reason ``state_dir_not_a_directory``), never followed, so a
  planted ``.a3s/artifacts/objects/bash -> /outside`` cannot carry a host write outside.
- Writers below the state directory (the artifact store, indexes) hold the ``Fd`` this module
  returns and create, rename and unlink relative to it (``kernel.beneath``).
"""

from __future__ import annotations

import errno
import os

from kernel.beneath import INTERNAL_DIR, O_PATH_DIR, Fd, atomic_write_at, open_subdir
from kernel.errors import PermissionDenied

STATE_GITIGNORE = b"*\n"


def open_state_dir(root: str | os.PathLike[str], *parts: str, create: bool = True) -> Fd:
    """``<root>/.a3s/<parts…>`` as a directory descriptor, never through a symlink.

    ``root`` is the host's own path to the workspace (trusted); every component from ``.a3s`` down
    is opened with ``O_NOFOLLOW`` and, with ``create``, made when missing. ``FileNotFoundError``
    when ``create`` is False and a component is missing.
    """
    current = Fd(os.open(os.fspath(root), O_PATH_DIR))
    shown = INTERNAL_DIR
    try:
        for i, part in enumerate((INTERNAL_DIR, *parts)):
            if i:
                shown = f"{shown}/{part}"
            if not part or part in (".", "..") or "/" in part:
                raise ValueError(f"invalid state directory component: {part!r}")
            try:
                nxt = open_subdir(current.fd, part, create=create)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EEXIST):
                    raise PermissionDenied(
                        f"{shown} in {os.fspath(root)} is a symlink or not a directory; a3s-fleet never "
                        "follows its state directory through a symlink (remove it and retry)",
                        reason="state_dir_not_a_directory",
                        path=shown,
                    ) from None
                raise
            current.close()
            current = nxt
        return current
    except BaseException:
        current.close()
        raise


def ensure_state_dir(root: str | os.PathLike[str]) -> None:
    """Create ``<root>/.a3s`` (with its ``.gitignore``) if missing; refuse a symlinked one.

    A read-only file system or a directory we may not write is left alone (the artifact store then
    fails where it writes, as it always did); a symlink or a file named ``.a3s`` is an error.
    """
    try:
        state = open_state_dir(root)
    except PermissionDenied:
        raise
    except OSError as exc:
        if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            return
        raise
    with state:
        try:
            os.stat(".gitignore", dir_fd=state.fd, follow_symlinks=False)
        except FileNotFoundError:
            try:
                atomic_write_at(state.fd, ".gitignore", STATE_GITIGNORE)
            except OSError:
                pass  # cosmetic: only keeps the user's `git status` quiet
