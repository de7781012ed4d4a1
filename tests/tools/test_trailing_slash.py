"""A path ending in '/' names a directory: ``file/`` is ENOTDIR, never the file (SPEC B-6, K-8).

POSIX ``open("file/")`` fails with ``ENOTDIR``; every path-taking tool used to drop the slash and
act on the file (``read``, ``write`` — creating ``new.txt`` from ``new.txt/`` — ``edit``,
``patch``, ``search``), in local, git-tree and object-store workspaces alike. The workspace resolver now answers ``not_found`` ("Not a directory") for
an existing non-directory spelled as a directory, the same kind as ``file/..`` or ``file/x``, and
every tool inherits it; nothing is read or written. Real files, a real git repository.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kernel.errors import NotFound
from kernel.gittree import GitTreeWorkspace
from kernel.objectstore import ObjectStoreWorkspace
from orchestrator import Agent
from tools.git.testing import Link, RepoBuilder

NOT_A_DIRECTORY = "Not a directory: "


@pytest.fixture()
def ws(tmp_path: Path) -> Path:
    (tmp_path / "f.txt").write_text("hello\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "x.py").write_text("hello\n")
    os.symlink("f.txt", tmp_path / "to-file")
    os.symlink("sub", tmp_path / "to-dir")
    return tmp_path


def _not_a_directory(result) -> bool:
    return (
        result.exit_code == 1
        and result.error_kind is not None
        and result.error_kind["type"] == "not_found"
        and NOT_A_DIRECTORY in result.output
    )


@pytest.mark.parametrize("path", ["f.txt/", "f.txt/.", "sub/x.py/", "to-file/", "f.txt//"])
def test_b6_read_of_a_file_spelled_as_a_directory_is_not_a_directory(
    agent: Agent, ws: Path, path: str
) -> None:
    s = agent.session(ws)
    assert _not_a_directory(s.tool("read", {"file_path": path}))
    batch = s.tool("read", {"files": [{"path": path}, {"path": "sub/x.py"}]})
    failed, ok = batch.metadata["files"]
    assert failed["success"] is False and failed["error_kind"]["type"] == "not_found"
    assert ok["success"] is True  # one bad member does not drop the others


def test_b6_directory_spellings_still_lead_to_directories(agent: Agent, ws: Path) -> None:
    s = agent.session(ws)
    assert s.tool("ls", {"path": "sub/"}).exit_code == 0
    assert s.tool("ls", {"path": "to-dir/"}).exit_code == 0
    assert "x.py" in s.tool("search", {"mode": "grep", "query": "hello", "path": "to-dir/"}).output
    assert s.tool("read", {"file_path": "sub/"}).error_kind["type"] == "invalid_argument"  # "is a directory"
    assert s.tool("read", {"file_path": "nope/"}).error_kind["type"] == "not_found"


def test_k8_write_edit_patch_refuse_a_trailing_slash_and_change_nothing(agent: Agent, ws: Path) -> None:
    s = agent.session(ws)
    assert _not_a_directory(s.tool("write", {"file_path": "f.txt/", "content": "x"}))
    assert _not_a_directory(
        s.tool("edit", {"file_path": "f.txt/", "old_string": "hello", "new_string": "bye"})
    )
    diff = "--- a/f.txt/\n+++ b/f.txt/\n@@ -1 +1 @@\n-hello\n+bye\n"
    assert _not_a_directory(s.tool("patch", {"diff": diff}))
    created = s.tool("write", {"file_path": "new.txt/", "content": "x"})
    assert created.error_kind["type"] == "invalid_argument" and "names a directory" in created.output
    assert (ws / "f.txt").read_text() == "hello\n"
    assert not (ws / "new.txt").exists() and not (ws / "new.txt").is_symlink()


@pytest.mark.parametrize("mode", ["grep", "glob", "bm25"])
def test_b6_search_path_spelled_as_a_directory_must_be_one(agent: Agent, ws: Path, mode: str) -> None:
    res = agent.session(ws).tool("search", {"mode": mode, "query": "hello", "path": "f.txt/"})
    assert _not_a_directory(res)


def test_b6_git_tree_workspace_agrees(tmp_path: Path) -> None:
    b = RepoBuilder(tmp_path / "repo")
    b.commit({"f.txt": "hello\n", "sub/x.py": "hello\n", "to-file": Link("f.txt")}, "c")
    tree = GitTreeWorkspace(b.path, "HEAD")
    for path in ("f.txt/", "f.txt/.", "sub/x.py/", "to-file/"):
        for entry_point in (tree.read_bytes, tree.stat, tree.normalize):
            with pytest.raises(NotFound, match=NOT_A_DIRECTORY):
                entry_point(path)
    assert tree.read_bytes("f.txt") == b"hello\n" and tree.stat("sub/").kind == "dir"


def test_b6_object_store_workspace_agrees() -> None:
    store = ObjectStoreWorkspace("bucket", {"f.txt": b"hello\n", "sub/x.py": b"hello\n"})
    for path in ("f.txt/", "sub/x.py/."):
        for entry_point in (store.read_bytes, store.stat):
            with pytest.raises(NotFound, match=NOT_A_DIRECTORY):
                entry_point(path)
    assert store.read_bytes("f.txt") == b"hello\n" and store.stat("sub/").kind == "dir"
