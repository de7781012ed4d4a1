"""The ``git`` tool on real pygit2 repositories (REFERENCE §4.8; SPEC S-2, S-3, B-1, B-6, K-5, K-8)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pygit2
import pytest

from kernel.errors import ToolError
from kernel.gittree import GitTreeWorkspace
from kernel.result import ToolResult
from kernel.testing import make_context
from kernel.workspace import LocalWorkspace, Workspace
from tools.git import TOOL, read_ops
from tools.git.testing import RepoBuilder


@pytest.fixture
def builder(tmp_path: Path) -> RepoBuilder:
    b = RepoBuilder(tmp_path / "repo")
    b.commit({"a.txt": "alpha\n", "d/b.txt": "beta\n"}, "initial")
    return b


@pytest.fixture
def ws(builder: RepoBuilder) -> LocalWorkspace:
    return LocalWorkspace(builder.path)


async def git(workspace: Workspace, **args: Any) -> ToolResult:
    ctx = make_context(workspace, tool_name="git")
    result = await TOOL.run(ctx, TOOL.validate(args))
    assert isinstance(result, ToolResult)
    return result


async def git_error(workspace: Workspace, **args: Any) -> ToolError:
    with pytest.raises(ToolError) as info:
        await git(workspace, **args)
    return info.value


# --- declaration -----------------------------------------------------------------------------------


def test_s2_git_requires_the_git_capability_and_matches_on_command() -> None:
    assert TOOL.requires == frozenset({"git"})
    assert TOOL.subject(TOOL.validate({"command": "log"})) == "log"
    assert TOOL.path_fields == ("path",)


@pytest.mark.parametrize(
    ("args", "read_only", "paginated", "output"),
    [
        ({"command": "status"}, True, False, "text"),
        ({"command": "log"}, True, True, "text"),
        ({"command": "diff"}, True, True, "diff"),
        ({"command": "remote"}, True, True, "text"),
        ({"command": "branch"}, True, True, "text"),
        ({"command": "stash"}, True, True, "text"),
        ({"command": "worktree"}, True, True, "text"),
        ({"command": "branch", "name": "x"}, False, False, "text"),
        ({"command": "stash", "message": "m"}, False, False, "text"),
        ({"command": "stash", "include_untracked": True}, False, False, "text"),
        ({"command": "checkout", "ref": "main"}, False, False, "text"),
        ({"command": "worktree", "subcommand": "create", "name": "x"}, False, False, "text"),
        ({"command": "worktree", "subcommand": "remove", "name": "x"}, False, False, "text"),
    ],
)
def test_k5_git_capabilities_follow_the_form(
    args: dict[str, Any], read_only: bool, paginated: bool, output: str
) -> None:
    caps = TOOL.capabilities(TOOL.validate(args))
    assert caps.read_only is read_only
    assert caps.paginated is paginated
    assert caps.output_kind == output
    if read_only:
        assert caps.max_parallelism == 8 and caps.idempotent and caps.cancel_safe
    else:
        assert caps == caps.conservative()


@pytest.mark.parametrize(
    "args",
    [
        {"command": "log", "limit": 0},
        {"command": "log", "limit": 201},
        {"command": "diff", "max_bytes": 255},
        {"command": "diff", "max_bytes": 102401},
        {"command": "diff", "byte_offset": -1},
        {"command": "push"},
        {"command": "status", "bogus": 1},
    ],
)
def test_k4_git_rejects_out_of_range_parameters(args: dict[str, Any]) -> None:
    with pytest.raises(ToolError) as info:
        TOOL.validate(args)
    assert info.value.kind == "invalid_argument"


@pytest.mark.parametrize(
    "args",
    [
        {"command": "status", "subcommand": "list"},
        {"command": "log", "byte_offset": 3},
        {"command": "status", "limit": 5},
        {"command": "branch", "max_count": 5},
        {"command": "log", "limit": 5, "max_count": 6},
        {"command": "log", "cursor": "abc"},
        {"command": "status", "path": "a.txt"},
    ],
)
async def test_k4_git_rejects_arguments_that_do_not_fit_the_form(
    ws: LocalWorkspace, args: dict[str, Any]
) -> None:
    err = await git_error(ws, **args)
    assert err.kind == "invalid_argument"


# --- status ----------------------------------------------------------------------------------------


async def test_git_status_reports_branch_and_dirty_count(builder: RepoBuilder, ws: LocalWorkspace) -> None:
    clean = await git(ws, command="status")
    assert (
        clean.metadata.items()
        >= {"branch": "main", "is_worktree": False, "dirty_count": 0, "is_dirty": False}.items()
    )
    builder.write({"a.txt": "changed\n", "new.txt": "n\n", ".a3s/state.json": "{}"})
    dirty = await git(ws, command="status")
    assert dirty.metadata["dirty_count"] == 2 and dirty.metadata["is_dirty"] is True
    assert " M a.txt" in dirty.output and "?? new.txt" in dirty.output
    assert ".a3s" not in dirty.output  # a3s-fleet's own directory is never reported


async def test_git_status_on_detached_head(builder: RepoBuilder, ws: LocalWorkspace) -> None:
    first = builder.repo.head.target
    builder.commit({"a.txt": "two\n"})
    await git(ws, command="checkout", ref=str(first))
    result = await git(ws, command="status")
    assert result.metadata["branch"] is None and result.metadata["detached"] is True
    assert result.output.startswith("HEAD detached at")


# --- log -------------------------------------------------------------------------------------------


async def test_b1_git_log_cursor_round_trip_has_no_duplicates_or_gaps(
    builder: RepoBuilder, ws: LocalWorkspace
) -> None:
    ids = builder.history(23)
    expected = [str(c.id) for c in builder.repo.walk(builder.repo.head.target)]
    assert len(expected) == 24
    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        args: dict[str, Any] = {"command": "log", "limit": 5}
        if cursor is not None:
            args["cursor"] = cursor
        page = await git(ws, **args)
        pages += 1
        offset = int(cursor or 0)
        assert page.output.startswith(f"Commit log ({page.metadata['count']} entries from offset {offset})")
        seen.extend(c["id"] for c in page.metadata["commits"])
        cursor = page.metadata["page"]["next_cursor"]
        if cursor is None:
            assert "continue with cursor" not in page.output
            break
        assert f"continue with cursor={cursor}" in page.output
    assert pages == 5
    assert seen == expected
    assert seen[0] == ids[-1]


async def test_git_log_default_limit_and_deprecated_max_count(
    builder: RepoBuilder, ws: LocalWorkspace
) -> None:
    builder.history(14)
    assert (await git(ws, command="log")).metadata["count"] == 10
    alias = await git(ws, command="log", max_count=3)
    assert alias.metadata["count"] == 3 and alias.metadata["page"]["next_cursor"] == "3"


async def test_git_log_orders_same_second_commits_topologically(
    builder: RepoBuilder, ws: LocalWorkspace
) -> None:
    ids = [builder.commit({"t.txt": f"{i}\n"}, f"same {i}", same_time=True) for i in range(6)]
    result = await git(ws, command="log", limit=6)
    assert [c["id"] for c in result.metadata["commits"]] == list(reversed(ids))


async def test_b1_git_log_cursor_past_history_is_an_error(builder: RepoBuilder, ws: LocalWorkspace) -> None:
    builder.history(2)
    err = await git_error(ws, command="log", cursor="3")
    assert err.kind == "invalid_argument" and "past the end" in err.message
    capped = await git_error(ws, command="log", cursor=5000)
    assert capped.kind == "invalid_argument" and "5000" in capped.message


async def test_git_log_scan_cap_stops_the_walk(
    builder: RepoBuilder, ws: LocalWorkspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    builder.history(12)
    monkeypatch.setattr(read_ops, "LOG_SCAN_CAP", 8)
    page = await git(ws, command="log", limit=5, cursor="5")
    assert page.metadata["count"] == 3
    assert page.metadata["page"]["has_more"] is False and page.metadata["page"]["scan_truncated"] is True
    assert "log scan capped at 8" in page.output


async def test_git_log_can_start_at_a_ref(builder: RepoBuilder, ws: LocalWorkspace) -> None:
    ids = builder.history(4)
    result = await git(ws, command="log", ref="HEAD~2")
    assert result.metadata["commits"][0]["id"] == ids[1]


async def test_git_log_on_an_empty_repository(tmp_path: Path) -> None:
    RepoBuilder(tmp_path / "empty")
    result = await git(LocalWorkspace(tmp_path / "empty"), command="log")
    assert result.metadata["count"] == 0


# --- diff ------------------------------------------------------------------------------------------


async def test_git_diff_includes_untracked_files_and_skips_internal(
    builder: RepoBuilder, ws: LocalWorkspace
) -> None:
    builder.write({"a.txt": "alpha2\n", "fresh.txt": "brand new\n", ".a3s/idx": "internal\n"})
    result = await git(ws, command="diff")
    assert "+alpha2" in result.output and "+brand new" in result.output
    assert ".a3s" not in result.output
    assert result.metadata["files_changed"] == 2 and result.metadata["has_more"] is False


async def test_git_diff_against_a_target_and_with_a_path_filter(
    builder: RepoBuilder, ws: LocalWorkspace
) -> None:
    builder.commit({"a.txt": "second\n", "d/b.txt": "beta2\n"})
    full = await git(ws, command="diff", target="HEAD~1")
    assert full.metadata["files_changed"] == 2
    only_d = await git(ws, command="diff", target="HEAD~1", path="d")
    assert (
        only_d.metadata["files_changed"] == 1 and "d/b.txt" in only_d.output and "a.txt" not in only_d.output
    )
    outside = await git_error(ws, command="diff", path="../elsewhere")
    assert outside.kind == "path_outside_workspace"


async def test_b1_git_diff_byte_offset_continuation_is_exact(
    builder: RepoBuilder, ws: LocalWorkspace
) -> None:
    body = "".join(f"line {i} ünïcödé {'x' * (i % 17)}\n" for i in range(400))
    builder.write({"big.txt": body, "a.txt": "".join(f"a{i}\n" for i in range(100))})
    whole = await git(ws, command="diff", max_bytes=102_400)
    total = whole.metadata["total_bytes"]
    assert 256 < total <= 102_400 and whole.metadata["has_more"] is False
    pieces: list[str] = []
    offset = 0
    while True:
        page = await git(ws, command="diff", byte_offset=offset, max_bytes=1000)
        meta = page.metadata
        assert meta["byte_offset"] == offset and meta["returned_bytes"] <= 1000
        if meta["has_more"]:
            assert f"continue with byte_offset={meta['next_byte_offset']}" in page.output
            text = page.output.rsplit("\n... (more diff available", 1)[0] + "\n"
            assert meta["next_byte_offset"] == offset + meta["returned_bytes"]
            offset = meta["next_byte_offset"]
            pieces.append(text)
        else:
            pieces.append(page.output)
            break
    assert "".join(pieces) == whole.output
    assert len(pieces) > 10
    end = await git(ws, command="diff", byte_offset=total)
    assert "end of diff" in end.output
    past = await git_error(ws, command="diff", byte_offset=total + 1)
    assert past.kind == "invalid_argument"


# --- branch / checkout -----------------------------------------------------------------------------


async def test_git_branch_create_and_list_with_pagination(builder: RepoBuilder, ws: LocalWorkspace) -> None:
    for name in ("b1", "b2", "b3"):
        created = await git(ws, command="branch", name=name)
        assert created.metadata["created"] is True
    base = await git(ws, command="branch", subcommand="create", name="from-base", base="HEAD")
    assert base.metadata["target"] == str(builder.repo.head.target)
    first = await git(ws, command="branch", limit=3)
    assert [b["name"] for b in first.metadata["branches"]] == ["b1", "b2", "b3"]
    assert "continue with cursor=3" in first.output
    rest = await git(ws, command="branch", limit=3, cursor=first.metadata["page"]["next_cursor"])
    assert [b["name"] for b in rest.metadata["branches"]] == ["from-base", "main"]
    assert rest.metadata["branches"][1]["current"] is True
    dup = await git_error(ws, command="branch", name="b1")
    assert dup.kind == "invalid_argument"
    bad = await git_error(ws, command="branch", name="bad..name")
    assert bad.kind == "invalid_argument"
    missing_base = await git_error(ws, command="branch", name="nb", base="no-such-ref")
    assert missing_base.kind == "not_found"


async def test_git_checkout_refuses_to_overwrite_local_changes_unless_forced(
    builder: RepoBuilder, ws: LocalWorkspace
) -> None:
    await git(ws, command="branch", name="other")
    builder.commit({"a.txt": "main version\n"})
    await git(ws, command="checkout", ref="other")
    assert (builder.path / "a.txt").read_text() == "alpha\n"
    builder.write({"a.txt": "precious local edit\n"})
    err = await git_error(ws, command="checkout", ref="main")
    assert err.kind == "version_conflict" and err.data["path"] == "a.txt"
    assert (builder.path / "a.txt").read_text() == "precious local edit\n"
    assert builder.repo.head.shorthand == "other"
    forced = await git(ws, command="checkout", ref="main", force=True)
    assert forced.metadata["forced"] is True and forced.metadata["branch"] == "main"
    assert (builder.path / "a.txt").read_text() == "main version\n"


async def test_git_checkout_carries_non_conflicting_changes_and_detaches(
    builder: RepoBuilder, ws: LocalWorkspace
) -> None:
    first = str(builder.repo.head.target)
    builder.commit({"a.txt": "v2\n"})
    builder.write({"d/b.txt": "local but unrelated\n"})
    result = await git(ws, command="checkout", ref=first)
    assert result.metadata["detached"] is True and result.metadata["changed_paths"] == ["a.txt"]
    assert (builder.path / "d/b.txt").read_text() == "local but unrelated\n"
    missing = await git_error(ws, command="checkout", ref="nope")
    assert missing.kind == "not_found"


# --- stash -----------------------------------------------------------------------------------------


async def test_git_stash_saves_untracked_files_and_lists_them(
    builder: RepoBuilder, ws: LocalWorkspace
) -> None:
    builder.write({"a.txt": "edited\n", "untracked.txt": "u\n", ".a3s/keep": "mine\n"})
    saved = await git(ws, command="stash", message="wip work", include_untracked=True)
    assert saved.metadata["stashed"] is True and "wip work" in saved.output
    assert not (builder.path / "untracked.txt").exists()
    assert (builder.path / "a.txt").read_text() == "alpha\n"
    assert (builder.path / ".a3s/keep").read_text() == "mine\n"  # internal files are never stashed
    listed = await git(ws, command="stash")
    assert listed.metadata["count"] == 1 and "stash@{0}: On main: wip work" in listed.output
    stash_commit = builder.repo[listed.metadata["stashes"][0]["id"]]
    untracked_tree = builder.repo[stash_commit.parent_ids[2]].tree
    assert "untracked.txt" in untracked_tree and ".a3s" not in untracked_tree
    nothing = await git(ws, command="stash", message="again")
    assert nothing.metadata["stashed"] is False


async def test_git_stash_without_untracked_leaves_them(builder: RepoBuilder, ws: LocalWorkspace) -> None:
    builder.write({"a.txt": "edited\n", "untracked.txt": "u\n"})
    await git(ws, command="stash", subcommand="create")
    assert (builder.path / "untracked.txt").exists()
    assert (builder.path / "a.txt").read_text() == "alpha\n"


# --- remote ----------------------------------------------------------------------------------------


async def test_git_remote_lists_and_filters(builder: RepoBuilder, ws: LocalWorkspace) -> None:
    builder.repo.remotes.create("origin", "https://example.invalid/repo.git")
    builder.repo.remotes.create("backup", "/srv/backup.git")
    listed = await git(ws, command="remote")
    assert [r["name"] for r in listed.metadata["remotes"]] == ["backup", "origin"]
    one = await git(ws, command="remote", remote_name="origin")
    assert one.metadata["remotes"] == [
        {"name": "origin", "url": "https://example.invalid/repo.git", "push_url": None}
    ]
    err = await git_error(ws, command="remote", remote_name="nope")
    assert err.kind == "not_found"


# --- worktree --------------------------------------------------------------------------------------


async def test_git_worktree_create_list_and_remove(builder: RepoBuilder, ws: LocalWorkspace) -> None:
    created = await git(ws, command="worktree", subcommand="create", name="feature/x", path="wt/fx")
    assert created.metadata["path"] == "wt/fx" and created.metadata["new_branch"] is True
    wt_dir = builder.path / "wt/fx"
    assert (wt_dir / "a.txt").read_text() == "alpha\n" and (wt_dir / ".git").is_file()
    assert builder.repo.branches.local.get("feature/x") is not None
    listed = await git(ws, command="worktree")
    assert [w["workspace_path"] for w in listed.metadata["worktrees"]] == ["", "wt/fx"]
    inner = await git(LocalWorkspace(wt_dir), command="status")
    assert inner.metadata["is_worktree"] is True and inner.metadata["branch"] == "feature/x"
    (wt_dir / "a.txt").write_text("dirty\n")
    refused = await git_error(ws, command="worktree", subcommand="remove", name="feature/x")
    assert refused.kind == "version_conflict" and wt_dir.exists()
    removed = await git(ws, command="worktree", subcommand="remove", path="wt/fx", force=True)
    assert removed.metadata["removed"] is True
    assert not wt_dir.exists() and builder.repo.list_worktrees() == []


async def test_git_worktree_on_an_existing_branch_and_default_path(
    builder: RepoBuilder, ws: LocalWorkspace
) -> None:
    await git(ws, command="branch", name="exists")
    created = await git(ws, command="worktree", subcommand="create", name="exists", new_branch=False)
    assert created.metadata["path"] == ".worktrees/exists"
    again = await git_error(
        ws, command="worktree", subcommand="create", name="exists2", path=".worktrees/exists"
    )
    assert again.kind == "invalid_argument"
    assert builder.repo.branches.local.get("exists2") is None  # refused before any branch was made


@pytest.mark.parametrize("path", ["../outside", "/tmp/abs", "wt/../../x", ".a3s/wt", "link_out/wt"])
async def test_b6_git_worktree_paths_go_through_the_resolver(
    builder: RepoBuilder, ws: LocalWorkspace, tmp_path: Path, path: str
) -> None:
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", builder.path / "link_out")
    err = await git_error(ws, command="worktree", subcommand="create", name="w", path=path)
    assert err.kind == "path_outside_workspace"
    assert builder.repo.list_worktrees() == [] and builder.repo.branches.local.get("w") is None
    assert list((tmp_path / "elsewhere").iterdir()) == []


async def test_b6_git_refuses_to_remove_a_worktree_outside_the_workspace(
    builder: RepoBuilder, ws: LocalWorkspace, tmp_path: Path
) -> None:
    branch = builder.repo.branches.local.create("ext", builder.repo.head.peel(pygit2.Commit))
    builder.repo.add_worktree("ext", str(tmp_path / "external-wt"), branch)
    err = await git_error(ws, command="worktree", subcommand="remove", name="ext")
    assert err.kind == "path_outside_workspace"
    assert (tmp_path / "external-wt" / "a.txt").exists()


# --- read-only commit view (S-3) -------------------------------------------------------------------


async def test_s3_git_on_a_tree_view_serves_reads_for_that_commit(builder: RepoBuilder) -> None:
    ids = builder.history(5)
    view = GitTreeWorkspace(builder.path, "HEAD~2")
    status = await git(view, command="status")
    assert (
        status.metadata.items()
        >= {"branch": None, "is_dirty": False, "dirty_count": 0, "head": ids[2]}.items()
    )
    log = await git(view, command="log", limit=2)
    assert [c["id"] for c in log.metadata["commits"]] == [ids[2], ids[1]]
    diff = await git(view, command="diff", target=ids[0])
    assert "-commit 0" in diff.output and "+commit 2" in diff.output
    empty = await git(view, command="diff")
    assert empty.metadata["total_bytes"] == 0 and "target" in empty.output
    branches = await git(view, command="branch")
    assert branches.metadata["branches"][0]["name"] == "main"


@pytest.mark.parametrize(
    "args",
    [
        {"command": "checkout", "ref": "main"},
        {"command": "branch", "name": "x"},
        {"command": "stash", "message": "m"},
        {"command": "worktree", "subcommand": "create", "name": "w"},
        {"command": "worktree", "subcommand": "remove", "name": "w"},
    ],
)
async def test_s3_git_mutations_on_a_tree_view_are_unsupported(
    builder: RepoBuilder, args: dict[str, Any]
) -> None:
    head = builder.repo.head.target
    err = await git_error(GitTreeWorkspace(builder.path, "HEAD"), **args)
    assert err.kind == "unsupported"
    assert builder.repo.head.target == head and builder.repo.branches.local.get("x") is None


async def test_git_needs_a_repository(tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    err = await git_error(LocalWorkspace(tmp_path / "plain"), command="status")
    assert err.kind == "unsupported"


async def test_k6_git_stops_when_the_call_is_cancelled(builder: RepoBuilder, ws: LocalWorkspace) -> None:
    ctx = make_context(ws, tool_name="git")
    ctx.cancelled.set()
    with pytest.raises(ToolError) as info:
        await TOOL.run(ctx, TOOL.validate({"command": "log"}))
    assert info.value.kind == "cancelled" and info.value.data["op"] == "git"
