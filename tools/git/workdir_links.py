"""Symlinks in the work tree that libgit2 would write or delete through (SPEC B-6, K-3).

libgit2 writes checked-out files by path. A symlink it knows — one that HEAD records, unchanged —
it replaces safely; one it does not know (a sandboxed command may put a symlink anywhere in the
workspace) it follows: ``evil -> /outside`` then ``checkout --force`` of a tree holding
``evil/x`` wrote ``/outside/x`` as the host user, ``stash`` reset a tracked ``dir/t.txt``
through ``dir -> /outside`` and a forced checkout overwrote the file a swapped ``a.txt`` named.

``in_the_way`` finds every such symlink before checkout or stash touch the work tree: at any path
(or leading directory of a path) that HEAD, the index or the target tree names, a symlink that is
not HEAD's own link with the same target. The walk opens each directory with ``O_NOFOLLOW``
relative to its verified parent and descends only into real directories, so its cost follows the
part of the tree present on disk. ``remove`` unlinks them (a forced checkout discards local
changes; unlinking a symlink never touches what it points to).
"""

from __future__ import annotations

import contextlib
import os
import stat as stat_mod
from collections.abc import Iterable

import pygit2
from pygit2.enums import FileMode

from kernel.beneath import O_LIST_DIR
from kernel.gittree import MAX_LINK_TARGET_BYTES

# name -> children; a path's own node is its entry in its parent's dict.
_Trie = dict[str, "_Trie"]


def in_the_way(repo: pygit2.Repository, root: str, target: pygit2.Tree | None = None) -> list[str]:
    """Workspace-relative paths of unknown symlinks libgit2 could follow, sorted."""
    head = _head_links(repo)
    trie: _Trie = {}
    sources: list[Iterable[pygit2.IndexEntry]] = [repo.index]
    for tree in (_head_tree(repo), target):
        if tree is not None:
            flat = pygit2.Index()
            flat.read_tree(tree)
            sources.append(flat)
    for source in sources:
        for entry in source:
            node = trie
            for part in entry.path.split("/"):
                node = node.setdefault(part, {})
    found: list[str] = []
    fd = os.open(root, O_LIST_DIR)
    try:
        _walk(fd, "", trie, head, found)
    finally:
        os.close(fd)
    return sorted(found)


def remove(root: str, paths: Iterable[str]) -> None:
    """Unlink each symlink (relative to its parent, opened without following anything)."""
    for rel in paths:
        parent, _, name = rel.rpartition("/")
        fd = os.open(root, O_LIST_DIR)
        try:
            for part in parent.split("/") if parent else ():
                nxt = os.open(part, O_LIST_DIR, dir_fd=fd)
                os.close(fd)
                fd = nxt
            st = os.lstat(name, dir_fd=fd)
            if stat_mod.S_ISLNK(st.st_mode):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(name, dir_fd=fd)
        finally:
            os.close(fd)


def _walk(dir_fd: int, prefix: str, trie: _Trie, head: dict[str, str], found: list[str]) -> None:
    with os.scandir(dir_fd) as it:
        present = {e.name: e for e in it if e.name in trie}
    for name, entry in present.items():
        rel = prefix + name
        if entry.is_symlink():
            if head.get(rel) != os.readlink(name, dir_fd=dir_fd):
                found.append(rel)
            continue
        children = trie[name]
        if children and entry.is_dir(follow_symlinks=False):
            try:
                sub = os.open(name, O_LIST_DIR, dir_fd=dir_fd)
            except OSError:
                found.append(rel)  # swapped while we looked: treat as in the way
                continue
            try:
                _walk(sub, rel + "/", children, head, found)
            finally:
                os.close(sub)


def _head_tree(repo: pygit2.Repository) -> pygit2.Tree | None:
    if repo.head_is_unborn:
        return None
    return repo.head.peel(pygit2.Tree)


def _head_links(repo: pygit2.Repository) -> dict[str, str]:
    """HEAD's symlinks: path -> target (what libgit2 knows and replaces safely)."""
    tree = _head_tree(repo)
    if tree is None:
        return {}
    flat = pygit2.Index()
    flat.read_tree(tree)
    links: dict[str, str] = {}
    for entry in flat:
        if entry.mode == FileMode.LINK:
            # A "link" blob longer than any path is never loaded (libgit2 inflates blobs whole); no
            # link on disk can have its target, and NUL never appears in a real one.
            too_long = repo.odb.read_header(entry.id)[1] > MAX_LINK_TARGET_BYTES
            links[entry.path] = "\x00(too long)" if too_long else os.fsdecode(repo[entry.id].data)
    return links
