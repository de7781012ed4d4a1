"""``GitTreeWorkspace``: a read-only, non-local view of one commit of a git repository (SPEC S-2, S-3, B-6).

The view is pinned to a commit id when it is opened (a moving ref such as ``HEAD`` is resolved
once), so every read in a session sees the same tree. Its capabilities are ``read``, ``search`` and
``git`` — never ``write``, ``exec`` or ``local`` — so the session hides ``write``/``edit``/
``patch``/``bash``/``download``; ``root`` is None.

Invariants (the same resolver contract as ``LocalWorkspace``):

- paths go through ``normalize_relative`` first (absolute paths, NUL, ``..`` past the root,
  look-alike escapes and ``.a3s/`` refused with ``path_outside_workspace``);
- symlinks stored in the tree are followed component by component, relative to the directory that
  holds them; ``..`` after a symlink is applied to the *physical* location; a target that is
  absolute or climbs above the tree root, or a loop, is refused with ``path_outside_workspace``;
- submodules (gitlinks) show up as directories and are never descended into;
- every entry's mtime is the commit time.

Blobs are never inflated whole behind the caller's back (libgit2 loads a blob entirely on lookup,
``blob.size`` included): sizes come from the object header (``Odb.read_header``), ``open_file``
streams (``kernel.gitblob``), and ``read_bytes`` refuses blobs over ``MAX_READ_BYTES`` before
loading them (``invalid_argument``, reason ``too_large``).

pygit2 objects are not shared across threads without a lock: all repository access here happens
under ``self._lock``; generators copy one directory's entries under the lock and yield outside it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import pygit2

from kernel import gitsafe
from kernel.beneath import names_directory, not_a_directory
from kernel.errors import InvalidArgument, NotFound, PathOutsideWorkspace, Unsupported
from kernel.gitblob import CorruptObject, check_loose_file, open_blob, open_verified_blob
from kernel.workspace import (
    INTERNAL_DIR,
    MAX_READ_BYTES,
    MAX_SYMLINK_FOLLOWS,
    Entry,
    EntryKind,
    MemoryFile,
    check_read_size,
    normalize_relative,
    page_of_names,
)

GIT_CAPABILITIES = frozenset({"read", "search", "git"})

# git tree entry modes (octal, as stored in tree objects)
MODE_TREE = 0o040000
MODE_BLOB = 0o100644
MODE_BLOB_EXEC = 0o100755
MODE_LINK = 0o120000
MODE_COMMIT = 0o160000  # a submodule (gitlink)

DIR_PERMISSIONS = 0o755
LINK_PERMISSIONS = 0o777
MAX_LINK_TARGET_BYTES = 4096  # PATH_MAX: a longer "symlink" blob is never loaded to be followed
SMALL_BLOB_BYTES = 1024 * 1024  # open_file loads blobs up to this through libgit2 (checked, fast)
# The object formats libgit2 (1.9, under pygit2 1.21) reads: a sha256 repository
# (`git init --object-format=sha256`) fails to open there ("unknown object format").
SUPPORTED_OBJECT_FORMATS = frozenset({"sha1"})


@dataclass(frozen=True, slots=True)
class _Node:
    """A resolved location in the tree: ``kind`` is file/dir/symlink/submodule/missing."""

    path: str
    kind: str
    oid: pygit2.Oid | None
    filemode: int


def _child(parent: _Node, name: str, entry: pygit2.Object) -> _Node:
    """The node of tree entry ``name`` of directory ``parent``."""
    mode = int(entry.filemode)
    kind = {MODE_TREE: "dir", MODE_LINK: "symlink", MODE_COMMIT: "submodule"}.get(mode, "file")
    return _Node(f"{parent.path}/{name}" if parent.path else name, kind, entry.id, mode)


def open_repository(path: str | os.PathLike[str]) -> pygit2.Repository:
    """Open the repository at exactly ``path`` (a work tree, a linked worktree or a git dir).

    No upward search: a directory inside someone else's repository is not silently widened to it.
    The repository's own configuration is vetted first (``kernel.gitsafe``: includes and special
    files refused, ``permission_denied``), and a repository found through ``<path>/.git`` gets
    ``path`` as its explicit work directory, so a planted ``core.worktree`` moves nothing. A
    repository in an object format libgit2 cannot read (sha256) is ``unsupported``, not "not a
    repository".
    """
    where = os.fspath(path)
    try:
        layout = gitsafe.layout_for(Path(where))
    except OSError as exc:
        raise NotFound(f"not a git repository: {where}", path=where) from exc
    if layout is None:
        raise NotFound(f"not a git repository: {where}", path=where)
    _check_object_format(where, gitsafe.check_repository(layout))
    try:
        repo = pygit2.Repository(where, pygit2.enums.RepositoryOpenFlag.NO_SEARCH)
    except (pygit2.GitError, KeyError, OSError) as exc:
        if "object format" in str(exc):  # a format set where the config check does not look
            raise _unsupported_format(where, "non-sha1") from exc
        raise NotFound(f"not a git repository: {where}", path=where) from exc
    if layout.work_tree is not None:
        repo.workdir = os.fspath(layout.work_tree)
    return repo


def _check_object_format(where: str, config: list[gitsafe.ConfigEntry]) -> None:
    """Refuse a repository libgit2 cannot read (``extensions.objectFormat``), before it opens it:
    libgit2 fails with a message that read as "not a git repository" (``not_found``)."""
    for e in config:
        if (e.section, e.key) == ("extensions", "objectformat") and e.subsection is None:
            fmt = (e.value or "").strip().lower()
            if fmt not in SUPPORTED_OBJECT_FORMATS:
                raise _unsupported_format(where, repr(fmt))


def _unsupported_format(where: str, fmt: str) -> Unsupported:
    return Unsupported(
        f"{where} is a git repository in the {fmt} object format, which is not supported: "
        "libgit2/pygit2 here read sha1 repositories only",
        reason="unsupported_object_format",
    )


def resolve_commit(repo: pygit2.Repository, rev: str) -> pygit2.Commit:
    """``rev`` (anything ``revparse_single`` accepts) peeled to a commit, with typed errors."""
    if not rev or "\x00" in rev:
        raise InvalidArgument(f"invalid revision: {rev!r}")
    try:
        obj = repo.revparse_single(rev)
    except KeyError as exc:
        raise NotFound(f"unknown revision: {rev}", path=rev) from exc
    except (ValueError, pygit2.GitError) as exc:
        raise InvalidArgument(f"invalid revision {rev!r}: {exc}") from exc
    try:
        commit = obj.peel(pygit2.Commit)
    except (ValueError, pygit2.GitError, KeyError) as exc:
        raise InvalidArgument(f"revision {rev!r} does not name a commit") from exc
    assert isinstance(commit, pygit2.Commit)
    return commit


class GitTreeWorkspace:
    """One commit of a repository, read through the Workspace protocol. Never writes."""

    def __init__(self, repo_path: str | os.PathLike[str], rev: str = "HEAD") -> None:
        repo = open_repository(repo_path)
        commit = resolve_commit(repo, rev)
        self._repo = repo
        self._odb = repo.odb
        self._objects = gitsafe.layout_of_git_dir(Path(repo.path)).common_dir / "objects"
        self._commit_id = commit.id
        self._tree_id = commit.tree_id  # not commit.tree: no object is loaded before the guard
        self._mtime_ns = int(commit.commit_time) * 1_000_000_000
        base = repo.workdir or repo.path
        self._repo_path = str(Path(base).resolve())
        self._rev = rev
        self._lock = threading.RLock()

    # --- identity -------------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return f"git:{self._repo_path}@{self._commit_id}"

    @property
    def capabilities(self) -> frozenset[str]:
        return GIT_CAPABILITIES

    @property
    def root(self) -> Path | None:
        return None

    @property
    def repo_path(self) -> str:
        """The repository's work tree (or git dir when bare); tools open their own handle on it."""
        return self._repo_path

    @property
    def commit_id(self) -> str:
        return str(self._commit_id)

    @property
    def requested_rev(self) -> str:
        return self._rev

    def close(self) -> None:
        with self._lock:
            self._repo.free()

    # --- resolution -----------------------------------------------------------------------------

    def _object(self, oid: pygit2.Oid) -> pygit2.Object:
        """``repo[oid]``, refused first when libgit2 would block on its file, with typed errors."""
        check_loose_file(self._objects, str(oid))
        try:
            return self._repo[oid]
        except pygit2.GitError as exc:  # e.g. "object hash mismatch": the object was rewritten
            raise CorruptObject(f"git cannot read object {oid}: {exc}") from None

    def _tree(self, oid: pygit2.Oid) -> pygit2.Tree:
        obj = self._object(oid)
        assert isinstance(obj, pygit2.Tree)
        return obj

    def _resolve(self, path: str, *, follow_last: bool = True) -> _Node:
        """Walk ``path`` through the tree, following symlinks physically (see module docstring)."""
        normalize_relative(path)  # validation; the walk uses raw components ('..' is physical)
        pending = [p for p in path.split("/") if p not in ("", ".")]
        stack: list[str] = []
        trees: list[pygit2.Oid] = [self._tree_id]
        # Components below a missing one: lexical until a '..' climbs back to a real tree, where
        # the physical walk resumes (so 'nothere/../link' still follows 'link' and checks it).
        missing: list[str] = []
        follows = 0
        with self._lock:
            while pending:
                part = pending.pop(0)
                if part in ("", "."):
                    continue
                if part == "..":
                    if missing:
                        missing.pop()
                        continue
                    if not stack:
                        raise PathOutsideWorkspace(f"path escapes the workspace: {path}", path=path)
                    stack.pop()
                    trees.pop()
                    continue
                if missing:
                    missing.append(part)
                    continue
                tree = self._tree(trees[-1])
                entry = tree[part] if part in tree else None
                if entry is None:
                    missing.append(part)
                    continue
                mode = int(entry.filemode)
                if mode == MODE_LINK and (pending or follow_last or names_directory(path)):
                    follows += 1
                    if follows > MAX_SYMLINK_FOLLOWS:
                        raise PathOutsideWorkspace(f"symlink loop while resolving {path}", path=path)
                    target = self._link_target(entry.id)
                    where = "/".join([*stack, part])
                    if not target or target.startswith("/") or "\x00" in target:
                        raise PathOutsideWorkspace(f"symlink {where} points outside the workspace", path=path)
                    pending = [p for p in target.split("/") if p not in ("", ".")] + pending
                    continue
                if mode == MODE_TREE:
                    stack.append(part)
                    trees.append(entry.id)
                    continue
                # A blob, a symlink kept as itself, or a submodule: nothing can lie below it.
                if any(p not in ("", ".") for p in pending):
                    what = "a submodule" if mode == MODE_COMMIT else "not a directory"
                    raise NotFound(f"{'/'.join([*stack, part])} is {what} on the way to {path}", path=path)
                if mode != MODE_COMMIT and names_directory(path):
                    raise not_a_directory(path)  # 'file/' is ENOTDIR, never the file (kernel.beneath)
                stack.append(part)
                kind = "submodule" if mode == MODE_COMMIT else ("symlink" if mode == MODE_LINK else "file")
                return self._checked(path, _Node("/".join(stack), kind, entry.id, mode))
        if missing:
            return self._checked(path, _Node("/".join([*stack, *missing]), "missing", None, 0))
        return self._checked(path, _Node("/".join(stack), "dir", trees[-1], MODE_TREE))

    def _checked(self, path: str, node: _Node) -> _Node:
        if node.path.split("/", 1)[0] == INTERNAL_DIR:
            raise PathOutsideWorkspace(f"{INTERNAL_DIR}/ is internal to a3s-fleet: {path}", path=path)
        return node

    def _size(self, oid: pygit2.Oid) -> int:
        """A blob's size from its header alone (``repo[oid].size`` inflates the whole blob)."""
        check_loose_file(self._objects, str(oid))
        with self._lock:
            try:
                return int(self._odb.read_header(oid)[1])
            except pygit2.GitError as exc:  # an object that does not parse (tampered or truncated)
                raise CorruptObject(f"git cannot read object {oid}: {exc}") from None

    def _link_target(self, oid: pygit2.Oid) -> str:
        if self._size(oid) > MAX_LINK_TARGET_BYTES:
            raise PathOutsideWorkspace(f"a symlink target is over {MAX_LINK_TARGET_BYTES} bytes")
        with self._lock:
            blob = self._object(oid)
        assert isinstance(blob, pygit2.Blob)
        return bytes(blob.data).decode("utf-8", "surrogateescape")

    def _entry(self, node: _Node) -> Entry:
        kind: EntryKind
        size = 0
        if node.kind == "file":
            kind = "file"
            assert node.oid is not None
            size = self._size(node.oid)
            mode = 0o755 if node.filemode == MODE_BLOB_EXEC else 0o644
        elif node.kind == "symlink":
            kind = "symlink"
            assert node.oid is not None
            size = self._size(node.oid)
            mode = LINK_PERMISSIONS
        else:  # dirs and submodules
            kind = "dir"
            mode = DIR_PERMISSIONS
        return Entry(path=node.path, kind=kind, size=size, mtime_ns=self._mtime_ns, mode=mode)

    # --- Workspace protocol ---------------------------------------------------------------------

    def normalize(self, path: str) -> str:
        rel = normalize_relative(path)
        node = self._resolve(path)
        # '..' applies after any symlink before it: then only the resolved location is exact.
        return node.path if ".." in path.split("/") else rel

    def stat(self, path: str) -> Entry:
        node = self._resolve(path)
        if node.kind == "missing":
            raise NotFound(f"no such file or directory: {path or '.'}", path=path)
        return self._entry(node)

    def _blob_of(self, path: str) -> tuple[pygit2.Oid, int]:
        node = self._resolve(path)
        if node.kind == "missing":
            raise NotFound(f"File not found: {path}", path=path)
        if node.kind in ("dir", "submodule"):
            raise InvalidArgument(f"{path} is a directory")
        assert node.oid is not None
        return node.oid, self._size(node.oid)

    def read_bytes(self, path: str) -> bytes:
        oid, size = self._blob_of(path)
        check_read_size(path, size)  # before libgit2 inflates it
        with self._lock:
            try:
                blob = self._object(oid)
            except CorruptObject as exc:
                raise CorruptObject(f"{path}: {exc.message}") from None
            assert isinstance(blob, pygit2.Blob)
            return bytes(blob.data)

    def open_file(self, path: str) -> BinaryIO:
        """The blob at ``path`` as a stream (``size`` attribute: its length).

        Up to ``SMALL_BLOB_BYTES`` libgit2 loads it, checking it against its id; up to
        ``MAX_READ_BYTES`` it is checked in one streaming pass and then streamed
        (``gitblob.open_verified_blob``; loaded through libgit2 when it is not stored whole); a
        bigger one is streamed (``kernel.gitblob``; its id is checked when it is read to the end),
        never inflated whole. A big blob stored as a delta (or in an alternate object store) cannot
        be streamed and is refused. Blocking (the check pass: ~0.1-0.2 s at 64 MiB): callers on an
        event loop call it from a worker thread (``tools/read.py``).
        """
        oid, size = self._blob_of(path)
        if size <= SMALL_BLOB_BYTES:
            return MemoryFile(self.read_bytes(path))
        if size <= MAX_READ_BYTES:
            # Not loaded whole (libgit2 held a 63 MiB blob ~3 times over per read, and a batch of
            # reads did so side by side): checked in one streaming pass, then streamed.
            try:
                verified = open_verified_blob(self._objects, oid.raw, str(oid), size)
            except CorruptObject as exc:
                raise CorruptObject(f"{path}: {exc.message}") from None
            return verified if verified is not None else MemoryFile(self.read_bytes(path))
        stream = open_blob(self._objects, oid.raw, str(oid), size)
        if stream is not None:
            return stream
        raise InvalidArgument(
            f"{path} is {size} bytes and stored as a git delta (or in an alternate object store), "
            f"which cannot be streamed; blobs stored that way are read up to {MAX_READ_BYTES} bytes",
            reason="too_large",
            size=size,
            max_bytes=MAX_READ_BYTES,
        )

    def list_dir(self, path: str) -> list[Entry]:
        node = self._resolve(path)
        if node.kind == "missing":
            raise NotFound(f"Directory not found: {path or '.'}", path=path)
        if node.kind == "submodule":
            return []  # a gitlink is listed as a directory but never descended into
        if node.kind != "dir":
            raise InvalidArgument(f"{path} is not a directory")
        return [self._entry(n) for n in self._children(node)]

    def list_page(
        self, path: str, after: str, limit: int, check: Callable[[], None] = lambda: None
    ) -> tuple[list[Entry], bool]:
        """As ``LocalWorkspace.list_page``: the first ``limit`` entries after ``after`` and whether
        more follow. A tree may hold hundreds of thousands of entries (one commit of a sandboxed
        command's files): only the page's entries are built and sized (an object header each)."""
        node = self._resolve(path)
        if node.kind == "missing":
            raise NotFound(f"Directory not found: {path or '.'}", path=path)
        if node.kind == "submodule":
            return [], False
        if node.kind != "dir":
            raise InvalidArgument(f"{path} is not a directory")
        assert node.oid is not None
        with self._lock:
            tree = self._tree(node.oid)
            names, more = page_of_names(
                (str(e.name) for e in tree), after, limit, check, hide_internal=not node.path
            )
            wanted = set(names)  # a second pass, not tree[name]: names as str(entry.name) gave them
            found = {name: entry for entry in tree if (name := str(entry.name)) in wanted}
            picked = [(name, found[name]) for name in names]
        return [self._entry(_child(node, name, entry)) for name, entry in picked], more

    def _children(self, node: _Node) -> list[_Node]:
        assert node.oid is not None
        out: list[_Node] = []
        with self._lock:
            for entry in self._tree(node.oid):
                name = str(entry.name)
                if not node.path and name == INTERNAL_DIR:
                    continue
                out.append(_child(node, name, entry))
        out.sort(key=lambda n: n.path.rsplit("/", 1)[-1])
        return out

    def walk_files(self, path: str = "") -> Iterator[Entry]:
        node = self._resolve(path)
        if node.kind == "missing":
            raise NotFound(f"Directory not found: {path or '.'}", path=path)
        if node.kind == "file":
            yield self._entry(node)
            return
        if node.kind != "dir":
            return
        # Same order as os.walk top-down: a directory's files (sorted), then its subdirectories.
        todo = [node]
        while todo:
            current = todo.pop()
            children = self._children(current)
            for child in children:
                if child.kind == "file":
                    yield self._entry(child)
            todo.extend(reversed([c for c in children if c.kind == "dir"]))


def is_git_tree(workspace: object) -> bool:
    return isinstance(workspace, GitTreeWorkspace)


__all__ = [
    "GIT_CAPABILITIES",
    "GitTreeWorkspace",
    "is_git_tree",
    "open_repository",
    "resolve_commit",
]
