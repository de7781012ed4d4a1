"""A sandboxed command may not create or replace the workspace's root ``.git`` (SPEC B-6, K-3).

The sandbox binds an existing ``.git`` directory or file read-only (``mounts.py``), but it can only
bind what exists. In a workspace without a repository a command could ``git init`` and set
``core.fsmonitor`` (or hooks, or a ``gitdir:`` file naming another repository): the user's next
``git status`` there — or a shell prompt that runs it — would then run the model's program on the
host. A ``.git`` *symlink* is bound at its target, so the link itself could be swapped the same way.

So ``enter`` (before a sandboxed command) makes, where there is no ``.git``, an empty **placeholder**
directory there, which the sandbox binds read-only: nothing can be created at that path while the
command runs, and an empty ``.git`` is no repository to the host's git either. ``leave`` (after
it; every process of the sandbox is dead by then) removes the placeholder, and moves whatever else
now stands at ``.git`` that was not there before (a replaced symlink) into ``.a3s/quarantine/``
(never listed, read or written by tools, bound read-only in the sandbox; the user can inspect it),
putting a replaced symlink back. Everything happens relative to the workspace root's descriptor
with ``O_NOFOLLOW`` semantics.

**One placeholder, shared by concurrent commands.** Removing the directory a bind mount sits on
detaches that mount in every other mount namespace: when the command that made the placeholder
ended first and removed it, a second sandboxed command still running in the same workspace (a
subagent, another session, another worker process) lost its read-only ``.git`` and could ``git
init`` a real repository with ``core.fsmonitor`` that the host's git honoured until that command
ended. Now every sandboxed command holds a shared ``flock`` on the workspace's ``.a3s`` directory
from ``enter`` to ``leave`` (an advisory lock: host-side only, across processes), and the placeholder
is removed only by a command that then gets the lock *exclusively* — the last one out. A placeholder
is recognised by its mode (``PLACEHOLDER_MODE``: sticky, which git never gives a ``.git``), so a
later command also removes one left behind (a host process killed mid-command). A sandboxed process
may take the same lock (``.a3s`` is visible, read-only): never exclusively while its own command
holds it shared; holding it shared only keeps the empty placeholder a little longer.

**A removed ``.git`` link.** A ``.git`` symlink is not itself a mount: a command can remove it for
its lifetime. A second command started meanwhile then saw no ``.git``, so its target (a git
directory inside the workspace) was not bound read-only there, and model-side ``write`` did not
know it either: ``core.fsmonitor`` written into it survived the first command's clean-up, which put
the link back. So while commands run, ``enter`` records the link's target in ``.a3s/git-link``
(host-only: ``.a3s`` is read-only inside) and puts a missing link back from it before its command
starts; ``_fileio`` protects the recorded target too; the last command out forgets the record.

**A stale record.** A host killed mid-command never forgets it: after the user removed ``.git``,
the next command put the old link back from it. So a record is only believed while some command
is in flight — the record holds no lock of its own, but every running command holds the shared
one: when ``enter`` can take the lock exclusively, nobody is, and the record is dropped (a killed
process's ``flock`` goes with it). And the record names the git directory it saw (device and
inode): a link is put back only onto that same directory, not onto one moved or made at its path
since (one made after the old was deleted may reuse its inode number: not told apart).
A link removed (by anyone) while a command runs is still put back, by the next ``enter`` and by
that command's ``leave``: who removed it cannot be told apart.

**A moved git directory.** Only the git directory a ``.git`` file or symlink names is a read-only
mount, not its parent: a command could rename the parent (``mv a b`` for ``gitdir: a/gd``) and make
a repository of its own at the named path, with ``core.fsmonitor`` — the host's next ``git status``
ran it. So ``enter`` notes the identity of every git directory inside the workspace that ``.git``
names (and its ``commondir``), and ``leave`` quarantines ``.git`` itself when one of them is no
longer the same directory (or a removed link is not put back): the host's git then finds no
repository there, and the user restores ``.git`` after looking.

What stays open: a ``.git`` *symlink* replaced by a command exists until the command ends (a host
``git`` meanwhile honours the replacement). Nested repositories (``sub/.git``) are ordinary
workspace content (docs/sandbox.md).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import shutil
import stat as stat_mod
import time
from collections.abc import Iterator
from dataclasses import dataclass

from kernel.beneath import O_PATH_DIR, atomic_write_at, read_regular_at
from kernel.errors import PermissionDenied
from kernel.statedir import ensure_state_dir, open_state_dir
from tools.bash.mounts import named_git_dirs

GIT_DIR = ".git"
QUARANTINE = "quarantine"
# Sticky and owner-only: git never creates a .git directory with the sticky bit, so this marks
# the placeholder as ours (a user's own empty .git is left alone).
PLACEHOLDER_MODE = 0o1700
# While commands run, ``.a3s/git-link`` holds the root .git symlink's target (``enter``).
LINK_RECORD = "git-link"
MAX_LINK_BYTES = 4096
_LOCK_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True)
class RootGit:
    """What stood at ``<root>/.git``: its type, identity and, for a symlink, its target."""

    mode: int
    dev: int
    ino: int
    link: str | None
    placeholder: bool = False


@dataclass(frozen=True)
class Record:
    """``.a3s/git-link``: the root ``.git`` symlink's target and the directory's identity it named."""

    link: str
    identity: tuple[int, int] | None


@dataclass
class Guard:
    """One sandboxed command's hold on ``<root>/.git``: what stood there before, and the shared lock."""

    root: str
    before: RootGit | None
    lock_fd: int
    # The git directories inside the workspace that ``.git`` names, with their identity then.
    named: tuple[tuple[str, tuple[int, int] | None], ...] = ()


def is_placeholder(st: os.stat_result) -> bool:
    """Is this ``lstat`` of ``.git`` the sandbox's placeholder (not a repository)?"""
    return stat_mod.S_ISDIR(st.st_mode) and stat_mod.S_IMODE(st.st_mode) == PLACEHOLDER_MODE


def enter(root: str) -> Guard:
    """Take the workspace's shared lock, make the placeholder where ``.git`` is missing, and note
    what stands there. ``BlockingIOError`` when the lock is held exclusively (a ``leave`` removing
    the placeholder: microseconds; retry); ``PermissionDenied`` for a symlinked ``.a3s``."""
    ensure_state_dir(root)
    with open_state_dir(root, create=False) as state:
        lock_fd = os.open(".", _LOCK_FLAGS, dir_fd=state.fd)
    try:
        _drop_stale_record(lock_fd)
        fcntl.flock(lock_fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        fd = os.open(root, O_PATH_DIR)
        try:
            current = _entry(fd)
            if current is not None and current.link is not None:
                _record_link(lock_fd, Record(current.link, _target_identity(fd, current.link)))
            elif current is None:
                record = _recorded(lock_fd)
                if record is not None and _still_names_its_directory(fd, record):
                    # a running command removed the link: it goes back before this one starts
                    with contextlib.suppress(FileExistsError):
                        os.symlink(record.link, GIT_DIR, dir_fd=fd)
                else:
                    _make_placeholder(fd)
            before = _entry(fd)
            named = _named_identities(root, fd)
        finally:
            os.close(fd)
    except BaseException:
        os.close(lock_fd)
        raise
    return Guard(root, before, lock_fd, named)


def leave(guard: Guard) -> str | None:
    """``_leave``, then — when no other command is in flight — forget the recorded ``.git`` link."""
    kept = _leave(guard)
    with _exclusive(guard.root) as alone:
        if alone:
            _forget_link(guard.root)
    return kept


def _leave(guard: Guard) -> str | None:
    """Release the command's hold and undo a change of ``<root>/.git``: the quarantined entry's
    workspace-relative path when something was moved away, else None. Raises ``OSError`` when a
    planted entry cannot be undone."""
    os.close(guard.lock_fd)  # our share first: the exclusive attempt below must not meet it
    before = guard.before
    fd = os.open(guard.root, O_PATH_DIR)
    try:
        after = _entry(fd)
        if after is not None and after.placeholder and (before is None or before.placeholder):
            with _exclusive(guard.root) as alone:
                if not alone:
                    return None  # another sandboxed command is bound to it: the last one out removes it
                try:
                    os.rmdir(GIT_DIR, dir_fd=fd)
                    return None
                except FileNotFoundError:
                    return None  # removed by a command that ended at the same moment
                except OSError:
                    pass  # written into from the host meanwhile: not ours to delete, quarantined below
                return _quarantine(guard.root, fd)
        if any(_identity(path) != identity for path, identity in guard.named):
            # The git directory `.git` names was moved away or replaced: its parent can be renamed
            # (only the directory itself is a read-only mount), and the path then led the host's git
            # to a repository the command made (`core.fsmonitor`). `.git` is not left naming it.
            if after is None:
                return "(nowhere: the command removed it; it is not put back)"
            return _quarantine(guard.root, fd)
        if after == before:
            return None
        kept = _quarantine(guard.root, fd) if after is not None else None
        if before is not None and before.link is not None:
            os.symlink(before.link, GIT_DIR, dir_fd=fd)
        return kept
    finally:
        os.close(fd)


@contextlib.contextmanager
def _exclusive(root: str) -> Iterator[bool]:
    """The workspace's lock held exclusively (True) — no command is between ``enter`` and
    ``leave`` — or False at once when someone holds it. Held until the block ends, so no ``enter``
    can adopt the placeholder while it is removed."""
    try:
        with open_state_dir(root, create=False) as state:
            lock_fd = os.open(".", _LOCK_FLAGS, dir_fd=state.fd)
    except (OSError, ValueError, PermissionDenied):
        yield False
        return
    try:
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(lock_fd)  # releases the lock


def recorded_link(root: str) -> str | None:
    """The root ``.git`` symlink's target as recorded while sandboxed commands run (a command may
    have removed the link itself meanwhile), or None."""
    try:
        with open_state_dir(root, create=False) as state:
            record = _recorded(state.fd)
    except (OSError, ValueError, PermissionDenied):
        return None
    return record.link if record is not None else None


def _recorded(state_fd: int) -> Record | None:
    """The record: the target, then NUL and ``dev:ino`` of the directory it named (absent in a
    record written before identities were kept: such a record never puts a link back)."""
    try:
        data = read_regular_at(state_fd, LINK_RECORD, MAX_LINK_BYTES)
    except (OSError, ValueError):
        return None
    if not data:
        return None
    link, _, ident = data.partition(b"\0")
    identity = None
    dev, _, ino = ident.partition(b":")
    if dev.isdigit() and ino.isdigit():
        identity = (int(dev), int(ino))
    return Record(os.fsdecode(link), identity)


def _record_link(state_fd: int, record: Record) -> None:
    if _recorded(state_fd) != record:
        data = os.fsencode(record.link)
        if record.identity is not None:
            data += b"\0%d:%d" % record.identity
        with contextlib.suppress(OSError):
            atomic_write_at(state_fd, LINK_RECORD, data, mode=0o600)


def _drop_stale_record(state_fd: int) -> None:
    """Forget a record no command in flight can own: its host was killed before ``leave``. The
    probe is a second open of ``.a3s`` (its own lock), taken exclusively only for the unlink."""
    if _recorded(state_fd) is None:
        return
    probe = os.open(".", _LOCK_FLAGS, dir_fd=state_fd)
    try:
        try:
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return  # a command runs: the record is its own
        with contextlib.suppress(FileNotFoundError):
            os.unlink(LINK_RECORD, dir_fd=state_fd)
    finally:
        os.close(probe)  # releases the probe's lock


def _target_identity(root_fd: int, link: str) -> tuple[int, int] | None:
    """Device and inode of what ``link`` (relative to the root, as the link resolves) names now."""
    try:
        st = os.stat(link, dir_fd=root_fd)
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino


def _still_names_its_directory(root_fd: int, record: Record) -> bool:
    return record.identity is not None and _target_identity(root_fd, record.link) == record.identity


def _forget_link(root: str) -> None:
    with (
        contextlib.suppress(OSError, ValueError, PermissionDenied),
        open_state_dir(root, create=False) as state,
    ):
        os.unlink(LINK_RECORD, dir_fd=state.fd)


def _named_identities(root: str, root_fd: int) -> tuple[tuple[str, tuple[int, int] | None], ...]:
    """The git directories inside the workspace that ``.git`` names (``mounts.named_git_dirs``)
    with device and inode, or None where nothing is there; outside ones the sandbox cannot touch."""
    try:
        paths = named_git_dirs(root, root_fd)
    except (OSError, ValueError, RecursionError):  # realpath through a 1,500-link chain
        return ()
    inside = root.rstrip("/") + "/"
    return tuple((path, _identity(path)) for path in paths if path.startswith(inside))


def _identity(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino


def _make_placeholder(root_fd: int) -> None:
    try:
        os.mkdir(GIT_DIR, PLACEHOLDER_MODE, dir_fd=root_fd)
    except OSError:
        return  # one exists (a repository, or another command's placeholder), or a read-only workspace
    try:
        fd = os.open(GIT_DIR, _LOCK_FLAGS, dir_fd=root_fd)
    except OSError:
        return
    try:
        os.fchmod(fd, PLACEHOLDER_MODE)  # the sticky bit, whatever the umask or file system did
    except OSError:
        pass
    finally:
        os.close(fd)


def _entry(root_fd: int) -> RootGit | None:
    try:
        st = os.lstat(GIT_DIR, dir_fd=root_fd)
    except FileNotFoundError:
        return None
    if stat_mod.S_ISLNK(st.st_mode):
        # A link is what it names: one recreated with the same target (``enter``) is the same link.
        return RootGit(stat_mod.S_IFLNK, 0, 0, os.readlink(GIT_DIR, dir_fd=root_fd))
    return RootGit(stat_mod.S_IFMT(st.st_mode), st.st_dev, st.st_ino, None, is_placeholder(st))


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
