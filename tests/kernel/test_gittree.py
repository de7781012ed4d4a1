"""GitTreeWorkspace and workspace names (SPEC S-2, S-3, B-6)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernel.errors import ToolError
from kernel.gittree import GitTreeWorkspace
from kernel.workspace import LocalWorkspace, Workspace
from kernel.workspace_names import open_workspace
from tools.git.testing import Gitlink, Link, RepoBuilder

SUBMODULE_COMMIT = "1234567890123456789012345678901234567890"


@pytest.fixture
def builder(tmp_path: Path) -> RepoBuilder:
    b = RepoBuilder(tmp_path / "repo")
    b.commit({"README.md": "v1\n", "src/app.py": "print(1)\n"}, "first")
    b.commit(
        {
            "README.md": "v2\n",
            "src/lib/util.py": "def f(): ...\n",
            "run.sh": "#!/bin/sh\n",
            "link_to_app": Link("src/app.py"),
            "vendor/sub": Gitlink(SUBMODULE_COMMIT),
            ".a3s/secret": "internal\n",
        },
        "second",
    )
    (b.path / "run.sh").chmod(0o755)
    b.repo.index.add("run.sh")
    b.repo.index.write()
    return b


def view(builder: RepoBuilder, rev: str = "HEAD") -> GitTreeWorkspace:
    return GitTreeWorkspace(builder.path, rev)


def test_s3_git_tree_is_read_only_and_non_local(builder: RepoBuilder) -> None:
    ws = view(builder)
    assert isinstance(ws, Workspace)
    assert ws.capabilities == frozenset({"read", "search", "git"})
    assert ws.root is None
    assert ws.name == f"git:{builder.path.resolve()}@{builder.repo.head.target}"


def test_git_tree_is_pinned_to_the_commit_a_rev_named(builder: RepoBuilder) -> None:
    old = view(builder, "HEAD~1")
    builder.commit({"README.md": "v3\n"})
    assert old.read_bytes("README.md") == b"v1\n"
    assert view(builder, "HEAD").read_bytes("README.md") == b"v3\n"
    with pytest.raises(ToolError) as missing:
        old.read_bytes("src/lib/util.py")
    assert missing.value.kind == "not_found"


def test_git_tree_stat_list_and_walk(builder: RepoBuilder) -> None:
    ws = view(builder)
    commit_ns = builder.repo.head.peel().commit_time * 1_000_000_000
    readme = ws.stat("README.md")
    assert (readme.kind, readme.size, readme.mtime_ns, readme.mode) == ("file", 3, commit_ns, 0o644)
    assert ws.stat("src").kind == "dir" and ws.stat("").kind == "dir"
    names = [(e.name, e.kind) for e in ws.list_dir("")]
    assert names == [
        ("README.md", "file"),
        ("link_to_app", "symlink"),
        ("run.sh", "file"),
        ("src", "dir"),
        ("vendor", "dir"),
    ]
    assert [e.path for e in ws.walk_files()] == [
        "README.md",
        "run.sh",
        "src/app.py",
        "src/lib/util.py",
    ]
    assert [e.path for e in ws.walk_files("src/lib")] == ["src/lib/util.py"]
    assert [e.path for e in ws.walk_files("README.md")] == ["README.md"]


def test_git_tree_keeps_the_executable_bit(builder: RepoBuilder) -> None:
    builder.commit({}, "mode")
    assert view(builder).stat("run.sh").mode == 0o755


def test_git_tree_follows_symlinks_inside_the_tree(builder: RepoBuilder) -> None:
    ws = view(builder)
    assert ws.read_bytes("link_to_app") == b"print(1)\n"
    assert ws.stat("link_to_app").path == "src/app.py"


def test_git_tree_submodules_are_dirs_never_descended(builder: RepoBuilder) -> None:
    ws = view(builder)
    assert ws.stat("vendor/sub").kind == "dir"
    assert ws.list_dir("vendor/sub") == []
    assert [e.kind for e in ws.list_dir("vendor")] == ["dir"]
    with pytest.raises(ToolError) as info:
        ws.read_bytes("vendor/sub/file.c")
    assert info.value.kind == "not_found"
    with pytest.raises(ToolError) as is_dir:
        ws.read_bytes("vendor/sub")
    assert is_dir.value.kind == "invalid_argument"


def test_git_tree_internal_dir_is_hidden_and_refused(builder: RepoBuilder) -> None:
    ws = view(builder)
    assert ".a3s" not in [e.name for e in ws.list_dir("")]
    assert all(not e.path.startswith(".a3s") for e in ws.walk_files())
    with pytest.raises(ToolError) as info:
        ws.read_bytes(".a3s/secret")
    assert info.value.kind == "path_outside_workspace"


def test_git_tree_errors_are_typed(builder: RepoBuilder, tmp_path: Path) -> None:
    ws = view(builder)
    for path, kind in [("nope.txt", "not_found"), ("src", "invalid_argument"), ("README.md/x", "not_found")]:
        with pytest.raises(ToolError) as info:
            ws.read_bytes(path)
        assert info.value.kind == kind, path
    with pytest.raises(ToolError) as not_dir:
        ws.list_dir("README.md")
    assert not_dir.value.kind == "invalid_argument"
    with pytest.raises(ToolError) as bad_rev:
        GitTreeWorkspace(builder.path, "no-such-branch")
    assert bad_rev.value.kind == "not_found"
    with pytest.raises(ToolError) as blob_rev:
        GitTreeWorkspace(builder.path, "HEAD:README.md")
    assert blob_rev.value.kind == "invalid_argument"
    (tmp_path / "plain").mkdir()
    with pytest.raises(ToolError) as not_repo:
        GitTreeWorkspace(tmp_path / "plain")
    assert not_repo.value.kind == "not_found"


def test_git_tree_normalize_returns_a_clean_relative_path(builder: RepoBuilder) -> None:
    ws = view(builder)
    assert ws.normalize("./src//lib/../app.py") == "src/app.py"
    assert ws.normalize("does/not/exist.txt") == "does/not/exist.txt"


# --- workspace names -------------------------------------------------------------------------------


def test_s2_open_workspace_by_name(builder: RepoBuilder, tmp_path: Path) -> None:
    local = open_workspace(str(builder.path))
    assert isinstance(local, LocalWorkspace) and "git" in local.capabilities
    first = str(next(iter(builder.repo.walk(builder.repo.head.target))).parent_ids[0])
    tree = open_workspace(f"git:{builder.path}@HEAD~1")
    assert isinstance(tree, GitTreeWorkspace) and tree.commit_id == first
    rel = open_workspace("git:.@main", base=builder.path)
    assert isinstance(rel, GitTreeWorkspace) and rel.commit_id == str(builder.repo.head.target)
    bare_head = open_workspace(f"git:{builder.path}")
    assert isinstance(bare_head, GitTreeWorkspace) and bare_head.commit_id == str(builder.repo.head.target)
    by_rel_dir = open_workspace("repo", base=tmp_path)
    assert isinstance(by_rel_dir, LocalWorkspace)


def test_open_workspace_handles_at_signs_in_path_and_rev(tmp_path: Path) -> None:
    b = RepoBuilder(tmp_path / "a@b" / "repo")
    b.commit({"f": "1\n"})
    b.commit({"f": "2\n"})
    ws = open_workspace(f"git:{b.path}@HEAD~1")
    assert isinstance(ws, GitTreeWorkspace) and ws.read_bytes("f") == b"1\n"
    whole = open_workspace(f"git:{b.path}")
    assert isinstance(whole, GitTreeWorkspace) and whole.read_bytes("f") == b"2\n"
    reflog = open_workspace(f"git:{b.path}@main@{{0}}")
    assert isinstance(reflog, GitTreeWorkspace) and reflog.read_bytes("f") == b"2\n"


@pytest.mark.parametrize("name", ["git:", "git:/no/such/repo@HEAD", "/no/such/dir", ""])
def test_open_workspace_rejects_bad_names(name: str) -> None:
    with pytest.raises(ToolError) as info:
        open_workspace(name)
    assert info.value.kind in ("invalid_argument", "not_found")
