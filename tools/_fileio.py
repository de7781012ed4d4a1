"""Atomic, compare-and-swap file replacement for ``write``/``edit``/``patch`` (SPEC B-3, B-5, B-6).

Invariants:

- Every path comes from ``LocalWorkspace.resolve`` (``target``); parents are created only inside
  the workspace and the path is resolved again after ``mkdir`` so a symlink planted meanwhile
  cannot carry the write outside.
- New bytes go to a temp file *beside* the target (same filesystem), are fsynced, get the old
  file's permission bits (new files: ``NEW_FILE_MODE`` exactly, independent of the process umask,
  so results do not depend on how a worker was started), then replace the target with
  ``os.replace``; the parent directory is fsynced after. Readers see the old or the new file, never
  a mix. Hard links to the old file keep the old content (rename makes a new inode).
- Compare-and-swap: each change carries the ``FileState`` it was computed from. Right before the
  renames the current size, mtime and SHA-256 are checked again; any difference raises
  ``VersionConflict`` and nothing is renamed. (A writer that slips in between that check and the
  rename — microseconds — cannot be detected without cooperative locking.)
- Multi-file commits (``patch``) are all-or-nothing against failures in this process: every temp
  file is written and every CAS check passes before the first rename; each replaced or deleted
  file is first hard-linked (or copied) to a backup beside it, and if a later rename fails, the
  done ones are rolled back from the backups in reverse order, created files and directories are
  removed. A crash of the whole process midway can leave some files renamed and ``.a3s-bak``
  backups behind; that is the documented limit.
- ``_before_commit`` is a test seam: when set, it is called with the target paths after the temp
  files are written and before the CAS check, so a test can modify a file at exactly that point.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat as stat_mod
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kernel.context import ToolContext
from kernel.errors import (
    Cancelled,
    InvalidArgument,
    NotFound,
    PathOutsideWorkspace,
    ToolError,
    Unsupported,
    VersionConflict,
)
from kernel.workspace import LocalWorkspace, normalize_relative

NEW_FILE_MODE = 0o644
TEMP_SUFFIX = ".a3s-tmp"
BACKUP_SUFFIX = ".a3s-bak"

# Test seam (see module docstring): ``Callable[[list[Path]], None] | None``.
_before_commit: Callable[[list[Path]], None] | None = None


@dataclass(frozen=True, slots=True)
class Target:
    rel: str  # clean workspace-relative path, as shown to the model
    path: Path  # physical path inside the workspace
    workspace: LocalWorkspace


@dataclass(frozen=True, slots=True)
class FileState:
    """What a tool read: ``exists=False`` means the path was free."""

    exists: bool
    data: bytes = b""
    sha256: str | None = None
    size: int = 0
    mtime_ns: int = 0
    mode: int = 0
    uid: int = -1
    gid: int = -1


@dataclass(slots=True)
class Change:
    """Replace ``target`` with ``data`` (``None`` deletes it), if it still matches ``expected``."""

    target: Target
    expected: FileState
    data: bytes | None
    mode: int | None = None  # for new files; existing files keep their mode


@dataclass(slots=True)
class _Staged:
    change: Change
    temp: Path | None = None
    backup: Path | None = None
    done: bool = False
    created_dirs: list[Path] = field(default_factory=list)


def local_workspace(ctx: ToolContext) -> LocalWorkspace:
    ws = ctx.workspace
    if not isinstance(ws, LocalWorkspace):
        raise Unsupported(f"{ctx.tool_name} needs a local writable workspace")
    if "write" not in ws.capabilities:
        raise Unsupported(f"{ctx.tool_name}: the workspace is read-only")
    return ws


def require_session(ctx: ToolContext) -> None:
    """Writes are claimed per session (REFERENCE §4.5): no session id, no write."""
    if not ctx.session_id or not ctx.session_id.strip():
        raise InvalidArgument("writes need a non-blank session id; nothing was written")


def target(ws: LocalWorkspace, file_path: str) -> Target:
    rel = normalize_relative(file_path)
    if not rel:
        raise InvalidArgument("file_path names the workspace root, not a file")
    return Target(rel=rel, path=ws.resolve(rel), workspace=ws)


def read_state(t: Target) -> FileState:
    """The file as it is now (regular files only; directories and devices are refused)."""
    try:
        st = os.stat(t.path)
    except FileNotFoundError:
        return FileState(exists=False)
    except NotADirectoryError as exc:
        raise InvalidArgument(f"a parent of {t.rel} is not a directory") from exc
    if stat_mod.S_ISDIR(st.st_mode):
        raise InvalidArgument(f"{t.rel} is a directory")
    if not stat_mod.S_ISREG(st.st_mode):
        raise InvalidArgument(f"{t.rel} is not a regular file")
    try:
        with open(t.path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise _os_error(f"cannot read {t.rel}", exc) from exc
    return FileState(
        exists=True,
        data=data,
        sha256=hashlib.sha256(data).hexdigest(),
        size=len(data),
        mtime_ns=st.st_mtime_ns,
        mode=stat_mod.S_IMODE(st.st_mode),
        uid=st.st_uid,
        gid=st.st_gid,
    )


def require_existing(t: Target) -> FileState:
    state = read_state(t)
    if not state.exists:
        raise NotFound(f"File not found: {t.rel}", path=t.rel)
    return state


def commit(changes: list[Change], *, cancelled: Callable[[], bool] | None = None) -> None:
    """Apply every change or none (see the module docstring for the exact guarantee)."""
    paths = [c.target.path for c in changes]
    if len(set(paths)) != len(paths):
        raise InvalidArgument("the same file is changed twice in one commit")
    staged = [_Staged(c) for c in changes]
    try:
        for s in staged:
            if s.change.data is not None:
                _stage(s)
        if _before_commit is not None:
            _before_commit(paths)
        if cancelled is not None and cancelled():
            raise Cancelled("the write was cancelled before any file changed", op="write")
        for s in staged:
            _check_unchanged(s.change)
        use_backups = len(staged) > 1
        for s in staged:
            _swap(s, use_backups)
    except BaseException:
        _rollback(staged)
        raise
    for parent in {p.parent for p in paths}:
        _fsync_dir(parent)
    for s in staged:
        if s.backup is not None:
            with contextlib.suppress(OSError):
                os.unlink(s.backup)


def _stage(s: _Staged) -> None:
    change = s.change
    t = change.target
    assert change.data is not None
    s.created_dirs = _make_parents(t)
    try:
        fd, name = tempfile.mkstemp(dir=t.path.parent, prefix=f".{t.path.name}.", suffix=TEMP_SUFFIX)
    except OSError as exc:
        raise _os_error(f"cannot create a temp file beside {t.rel}", exc) from exc
    s.temp = Path(name)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(change.data)
            fh.flush()
            mode = change.expected.mode if change.expected.exists else (change.mode or NEW_FILE_MODE)
            os.fchmod(fh.fileno(), mode)
            if change.expected.exists and os.geteuid() == 0:
                with contextlib.suppress(OSError):
                    os.fchown(fh.fileno(), change.expected.uid, change.expected.gid)
            os.fsync(fh.fileno())
    except OSError as exc:
        raise _os_error(f"cannot write {t.rel}", exc) from exc


def _make_parents(t: Target) -> list[Path]:
    """Create missing parent directories (inside the workspace); return the ones created."""
    parent = t.path.parent
    missing: list[Path] = []
    probe = parent
    while not probe.exists():
        missing.append(probe)
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        raise InvalidArgument(f"a parent of {t.rel} is a file, not a directory")
    created: list[Path] = []
    try:
        for d in reversed(missing):
            os.mkdir(d)
            created.append(d)
    except FileExistsError:
        pass
    except OSError as exc:
        _remove_dirs(created)
        raise _os_error(f"cannot create the directories for {t.rel}", exc) from exc
    # Re-resolve: a symlink planted while we created directories must not carry the write away.
    if t.workspace.resolve(t.rel) != t.path:
        _remove_dirs(created)
        raise PathOutsideWorkspace(f"{t.rel} moved while its directories were created", path=t.rel)
    return created


def _check_unchanged(change: Change) -> None:
    t, exp = change.target, change.expected
    try:
        st = os.stat(t.path)
    except FileNotFoundError:
        if exp.exists:
            raise _conflict(t, exp, None) from None
        return
    if not exp.exists:
        raise _conflict(t, exp, "(created by someone else)")
    if st.st_size == exp.size and st.st_mtime_ns == exp.mtime_ns:
        # Same size and mtime can still hide a same-second rewrite: hash to be sure.
        with open(t.path, "rb") as fh:
            actual = hashlib.sha256(fh.read()).hexdigest()
        if actual == exp.sha256:
            return
        raise _conflict(t, exp, actual)
    with open(t.path, "rb") as fh:
        raise _conflict(t, exp, hashlib.sha256(fh.read()).hexdigest())


def _conflict(t: Target, exp: FileState, actual: str | None) -> VersionConflict:
    expected = exp.sha256 if exp.exists else "(absent)"
    shown = actual if actual is not None else "(deleted)"
    return VersionConflict(
        f"Concurrent modification detected on {t.rel}: it changed after it was read "
        f"(expected sha256 {expected}, found {shown}). Nothing was written. Re-read the file and retry.",
        path=t.rel,
        expected=expected,
        actual=shown,
    )


def _swap(s: _Staged, use_backups: bool) -> None:
    change, t = s.change, s.change.target
    try:
        if change.data is None:
            # Delete = move aside to a backup; it is unlinked once everything succeeded.
            s.backup = _backup_name(t.path)
            os.replace(t.path, s.backup)
        else:
            if use_backups and change.expected.exists:
                s.backup = _backup_name(t.path)
                _link_or_copy(t.path, s.backup)
            assert s.temp is not None
            os.replace(s.temp, t.path)
            s.temp = None
    except OSError as exc:
        raise _os_error(f"cannot replace {t.rel}", exc) from exc
    s.done = True


def _rollback(staged: list[_Staged]) -> None:
    for s in reversed(staged):
        t = s.change.target
        with contextlib.suppress(OSError):
            if s.done:
                if s.backup is not None:
                    os.replace(s.backup, t.path)
                    s.backup = None
                elif s.change.data is not None:
                    os.unlink(t.path)  # a created file
            elif s.backup is not None and s.change.data is not None:
                os.unlink(s.backup)  # backed up but never replaced
                s.backup = None
        if s.temp is not None:
            with contextlib.suppress(OSError):
                os.unlink(s.temp)
            s.temp = None
        _remove_dirs(s.created_dirs)


def _remove_dirs(dirs: list[Path]) -> None:
    for d in reversed(dirs):
        with contextlib.suppress(OSError):
            os.rmdir(d)


def _backup_name(path: Path) -> Path:
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=BACKUP_SUFFIX)
    os.close(fd)
    os.unlink(name)
    return Path(name)


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        with open(src, "rb") as fin, open(dst, "wb") as fout:
            fout.write(fin.read())
            fout.flush()
            os.fsync(fout.fileno())


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _os_error(what: str, exc: OSError) -> ToolError:
    """OS failures the model cannot fix by changing arguments: a plain tool error with errno."""
    return ToolError(f"{what}: {exc.strerror or exc}", errno=exc.errno)
