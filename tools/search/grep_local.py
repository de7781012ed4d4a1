"""The local fast path of the pure-Python grep engine: descriptor-based ``scandir`` walk and reads.

Used when the workspace is local (it has a ``root``); the protocol path (``ignore.walk`` +
``Workspace.read_bytes``) stays for every other workspace. Same answers as the protocol path:

- the walk applies the same ``IgnoreRules`` (loaded through the workspace, so ignore files are
  read exactly as before) and the same entry policy: symlinks, special files and ``.git``/``.a3s``
  are never entered or read; an unreadable directory below the base is skipped silently; the base
  itself is listed through ``Workspace.list_dir`` so its errors are the protocol's errors;
- a directory whose chain of ignore files (itself and every directory above it up to the root) is
  empty decides hidden-ness by name alone, without asking ``IgnoreRules`` per entry;
- every directory and file is opened beneath the workspace root's pinned descriptor with *no*
  symlink followed anywhere on the way (``Beneath.open_strict``: ``openat2`` with
  ``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS``, or one ``O_NOFOLLOW`` open per component), so a
  directory swapped for a symlink mid-scan makes that entry unreadable, never followed outside;
  files are opened ``O_NONBLOCK`` and checked with ``fstat`` (a FIFO swapped in never blocks);
- a file is read block by block (``local_blocks``); one whose first block holds a NUL byte (and
  has no UTF-16 BOM) is binary: the rest of it is never read.
"""

from __future__ import annotations

import os
import stat as stat_mod
from collections.abc import Callable, Generator

from kernel.beneath import O_LIST_DIR, O_READ, Beneath, Fd
from kernel.errors import ToolError
from kernel.workspace import MAX_READ_BYTES, Workspace, check_read_size
from tools.search.ignore import NEVER_SEARCHED, IgnoreRules

HEAD_BYTES = 64 * 1024  # first read; ripgrep's binary-detection buffer is the same size
UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")


def is_local(ws: Workspace) -> bool:
    """A local workspace with a pinned root (``LocalWorkspace``): the descriptor fast path applies."""
    return (
        ws.root is not None
        and "local" in ws.capabilities
        and isinstance(getattr(ws, "beneath", None), Beneath)
    )


def beneath_of(ws: Workspace) -> Beneath:
    found = getattr(ws, "beneath", None)
    assert isinstance(found, Beneath)
    return found


def walk_local(ws: Workspace, base: str, rules: IgnoreRules, should_stop: Callable[[], bool]) -> list[str]:
    """Workspace-relative paths of every visible regular file under directory ``base`` (walk order)."""
    beneath = beneath_of(ws)
    first = ws.list_dir(base)
    names = {e.name for e in first}
    own = rules.rules_for(base, names)
    # Directories above the base are consulted too (IgnoreRules.decide walks up to the root).
    active = bool(own.kinds) or _ancestors_have_rules(rules, base)
    out: list[str] = []
    pending: list[tuple[str, bool]] = []
    for e in first:
        if e.kind == "dir":
            if not _skipped(rules, active, e.path, e.name, True):
                pending.append((e.path, active))
        elif e.kind == "file" and not _skipped(rules, active, e.path, e.name, False):
            out.append(e.path)
    while pending:
        if should_stop():
            return out
        directory, parent_active = pending.pop()
        try:
            with Fd(beneath.open_strict(directory, O_LIST_DIR)) as fd, os.scandir(fd.fd) as it:
                listing = _kinds(it)
        except (OSError, ToolError):
            continue  # as the protocol walk: an unreadable directory below the base is skipped
        own = rules.rules_for(directory, {name for name, _ in listing})
        active = parent_active or bool(own.kinds)
        for name, kind in listing:
            if kind == "other":
                continue
            path = f"{directory}/{name}"
            if _skipped(rules, active, path, name, kind == "dir"):
                continue
            if kind == "dir":
                pending.append((path, active))
            else:
                out.append(path)
    return out


def _kinds(it: os._ScandirIterator[str]) -> list[tuple[str, str]]:
    """(name, 'dir' | 'file' | 'other') of every entry, without following symlinks.

    Every name is kept (a ``.git`` file or a symlinked ``.gitignore`` matters to ``IgnoreRules``);
    an entry that vanished while being typed is dropped.
    """
    out: list[tuple[str, str]] = []
    for de in it:
        try:
            if de.is_dir(follow_symlinks=False):
                kind = "dir"
            elif de.is_file(follow_symlinks=False):
                kind = "file"
            else:
                kind = "other"  # symlink, FIFO, socket, device: never searched
        except OSError:
            continue
        out.append((de.name, kind))
    return out


def _ancestors_have_rules(rules: IgnoreRules, base: str) -> bool:
    d = base
    while d:
        d = d.rsplit("/", 1)[0] if "/" in d else ""
        if rules.rules_for(d).kinds:
            return True
    return False


def _skipped(rules: IgnoreRules, active: bool, path: str, name: str, is_dir: bool) -> bool:
    if active:
        return rules.skipped(path, is_dir)
    # No ignore file applies anywhere on this chain: IgnoreRules.skipped reduces to this.
    return name in NEVER_SEARCHED or name.startswith(".")


def local_blocks(beneath: Beneath, path: str, block_bytes: int) -> Generator[bytes]:
    """The bytes of ``path`` block by block: first ``HEAD_BYTES`` (a caller that finds it binary —
    NUL, no UTF-16 BOM — stops there, and the rest is never read), then ``block_bytes`` at a time.

    Raises OSError for a file that cannot be read (including one that is no longer a regular file,
    or one reached only through a symlink), and ``invalid_argument`` (``too_large``) for a text
    file over ``MAX_READ_BYTES`` before its second block: the Python engine's limit (K-8).
    """
    fd = beneath.open_strict(path, O_READ)
    try:
        st = os.fstat(fd)
        if not stat_mod.S_ISREG(st.st_mode):
            raise IsADirectoryError(f"{path} is not a regular file")
        head = os.read(fd, HEAD_BYTES)
        yield head
        if len(head) < HEAD_BYTES:
            return
        # A text file over the limit is a failed read (K-8), before it is read on; one that grows
        # while it is read (a sandboxed command appending) is cut off at the limit too.
        check_read_size(path, st.st_size)
        total = len(head)
        while total <= MAX_READ_BYTES:
            block = os.read(fd, min(block_bytes, MAX_READ_BYTES + 1 - total))
            if not block:
                break
            total += len(block)
            yield block
        check_read_size(path, total)
    finally:
        os.close(fd)
