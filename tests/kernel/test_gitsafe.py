"""The git tool and bash's change detection never honour hostile repository configuration (issue 15 item 3).

Each case plants a configuration in a real repository (``git config`` is not available to the
product, so the tests write the files themselves) and then drives the *public* paths: the ``git``
tool's read and write forms and ``bash``'s ``changed_paths`` snapshot. A canary command
(``touch CANARY``) must never run; a planted ``core.worktree`` must never move the work tree;
includes and special files that would make libgit2 read elsewhere or block forever (pygit2 holds the
GIL while libgit2 waits in ``open``: the whole process would freeze) are refused with
``permission_denied`` before libgit2 opens anything. Cases that could hang run in a subprocess
with a timeout, so a regression fails instead of freezing the test run.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from kernel.errors import PermissionDenied
from kernel.gitsafe import ConfigSyntaxError, parse_config
from kernel.gittree import open_repository
from orchestrator import Agent
from tools.bash.changes import take_snapshot
from tools.git.testing import RepoBuilder

HANG_TIMEOUT_S = 60


def _repo(tmp_path: Path) -> Path:
    b = RepoBuilder(tmp_path / "repo")
    b.commit({"a.txt": "alpha\n", "src/app.py": "x = 1\n"}, "init")
    b.commit({"a.txt": "alpha 2\n"}, "second")
    return b.path


def _append_config(repo: Path, text: str) -> None:
    with open(repo / ".git" / "config", "a", encoding="utf-8") as fh:
        fh.write(textwrap.dedent(text))


def _git_calls(session: Any) -> list[Any]:
    """Every form of the git tool that touches the work tree or the repository."""
    out = [
        session.tool("git", {"command": "status"}),
        session.tool("git", {"command": "diff"}),
        session.tool("git", {"command": "diff", "target": "HEAD~1"}),
        session.tool("git", {"command": "log", "limit": 5}),
        session.tool("git", {"command": "branch", "name": "feature"}),
        session.tool("git", {"command": "checkout", "ref": "feature"}),
        session.tool("git", {"command": "checkout", "ref": "main"}),
        session.tool("git", {"command": "stash", "message": "wip", "include_untracked": True}),
        session.tool("git", {"command": "worktree", "subcommand": "create", "name": "wt1"}),
        session.tool("git", {"command": "worktree"}),
        session.tool("git", {"command": "worktree", "subcommand": "remove", "name": "wt1", "force": True}),
        session.tool("git", {"command": "remote"}),
    ]
    return out


PROGRAM_KEYS = [
    "core.fsmonitor",
    "core.sshCommand",
    "core.pager",
    "core.editor",
    "core.askPass",
    "diff.external",
    "sequence.editor",
    "gpg.program",
    "credential.helper",
]


@pytest.mark.parametrize("key", [*PROGRAM_KEYS, "hooks", "filters"])
def test_configured_programs_never_run(tmp_path: Path, key: str) -> None:
    repo = _repo(tmp_path)
    canary = tmp_path / "CANARY"
    cmd = f"touch {canary}"
    if key == "hooks":
        hooks = tmp_path / "hooks"
        hooks.mkdir()
        for name in (
            "pre-commit",
            "post-checkout",
            "reference-transaction",
            "post-index-change",
            "pre-auto-gc",
        ):
            for where in (hooks, repo / ".git" / "hooks"):
                (where / name).write_text(f"#!/bin/sh\n{cmd}\n")
                (where / name).chmod(0o755)
        _append_config(repo, f"[core]\n\thooksPath = {hooks}\n")
    elif key == "filters":
        (repo / ".gitattributes").write_text("* filter=evil diff=evil merge=evil\n")
        _append_config(
            repo,
            f"""
            [filter "evil"]
            \tclean = {cmd}
            \tsmudge = {cmd}
            \tprocess = {cmd}
            [diff "evil"]
            \tcommand = {cmd}
            \ttextconv = {cmd}
            [merge "evil"]
            \tdriver = {cmd}
            """,
        )
    else:
        section, name = key.split(".")
        _append_config(repo, f"[{section}]\n\t{name} = {cmd}\n")
    (repo / "a.txt").write_text("changed\n")
    (repo / "new.txt").write_text("untracked\n")
    with Agent() as agent:
        session = agent.session(repo)
        results = _git_calls(session)
        bash = session.tool("bash", {"command": "echo more >> a.txt"})
    for res in results:
        assert (res.error_kind or {}).get("type") != "permission_denied", res.output
    assert results[0].exit_code == 0 and "a.txt" in results[0].output
    assert bash.metadata.get("changed_paths") is not None, bash.metadata
    assert not canary.exists(), f"{key} ran a program"


def test_core_worktree_never_moves_the_work_tree(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "a.txt").write_text("OUTSIDE\n")
    (outside / "secret-name.txt").write_text("OUTSIDE\n")
    _append_config(repo, f"[core]\n\tworktree = {outside}\n\tbare = true\n")
    (repo / "src" / "app.py").write_text("x = 2\n")
    before = {p.name: p.read_bytes() for p in outside.iterdir()}
    with Agent() as agent:
        session = agent.session(repo)
        status = session.tool("git", {"command": "status"})
        diff = session.tool("git", {"command": "diff"})
        results = _git_calls(session)
        bash = session.tool("bash", {"command": "echo y > made-by-bash.txt"})
    assert status.exit_code == 0 and "src/app.py" in status.output, status.output
    assert "secret-name" not in status.output and "secret-name" not in diff.output
    assert "OUTSIDE" not in diff.output
    for res in results:
        assert "secret-name" not in res.output and "OUTSIDE" not in res.output
    assert bash.metadata.get("changed_paths") == ["made-by-bash.txt"], bash.metadata
    assert {p.name: p.read_bytes() for p in outside.iterdir()} == before, "git wrote outside"


def _run_isolated(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter with a timeout: a hang fails the test, never freezes it."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=HANG_TIMEOUT_S,
        cwd=Path(__file__).resolve().parents[2],
    )


PROBE = """
    import asyncio, json, sys
    from pathlib import Path
    from kernel.gittree import open_repository
    from orchestrator import Agent
    from tools.bash.changes import take_snapshot
    repo = Path(sys.argv[1])
    out = {}
    try:
        open_repository(repo)
        out["open"] = "opened"
    except Exception as exc:
        out["open"] = getattr(exc, "kind", type(exc).__name__) + ":" + str(getattr(exc, "data", {}).get("reason"))
    with Agent() as agent:
        res = agent.session(repo).tool("git", {"command": "status"})
        out["git"] = (res.error_kind or {}).get("type", "ok") + ":" + str((res.error_kind or {}).get("reason"))
    out["snapshot"] = asyncio.run(take_snapshot(repo)) is not None
    print(json.dumps(out))
"""


def _fifo(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    return path


@pytest.mark.parametrize(
    "case",
    [
        "include-fifo",
        "includeif-fifo",
        "include-regular-file-setting-worktree",
        "excludesfile-fifo",
        "attributesfile-fifo",
        "config-is-a-fifo",
        "config-unparseable",
        "info-exclude-fifo",
    ],
)
def test_configs_libgit2_would_follow_or_block_on_are_refused(tmp_path: Path, case: str) -> None:
    repo = _repo(tmp_path)
    fifo = tmp_path / "fifo"
    if case == "include-fifo":
        _append_config(repo, f"[include]\n\tpath = {_fifo(fifo)}\n")
    elif case == "includeif-fifo":
        _append_config(repo, f'[includeIf "gitdir:/"]\n\tpath = {_fifo(fifo)}\n')
    elif case == "include-regular-file-setting-worktree":
        (tmp_path / "evil.cfg").write_text(f"[core]\n\tworktree = {tmp_path}\n")
        _append_config(repo, f"[Include]\n\tPath = {tmp_path / 'evil.cfg'}\n")
    elif case == "excludesfile-fifo":
        _append_config(repo, f"[core]\n\texcludesFile = {_fifo(fifo)}\n")
    elif case == "attributesfile-fifo":
        _append_config(repo, f"[core]\n\tattributesFile = {_fifo(fifo)}\n")
    elif case == "config-is-a-fifo":
        os.unlink(repo / ".git" / "config")
        _fifo(repo / ".git" / "config")
    elif case == "config-unparseable":
        _append_config(repo, '[core "unterminated\n\tx = 1\n')
    elif case == "info-exclude-fifo":
        (repo / ".git" / "info" / "exclude").unlink(missing_ok=True)
        _fifo(repo / ".git" / "info" / "exclude")
    done = _run_isolated(PROBE, str(repo))
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout.strip().splitlines()[-1]
    assert '"open": "permission_denied:unsafe_git_config"' in out, out
    assert '"git": "permission_denied:unsafe_git_config"' in out, out
    assert '"snapshot": false' in out, out


def test_a_fifo_gitignore_anywhere_in_the_work_tree_is_refused_without_hanging(tmp_path: Path) -> None:
    """A sandboxed ``mkfifo sub/.gitignore`` used to freeze the host at bash's next git snapshot."""
    repo = _repo(tmp_path)
    _fifo(repo / "src" / "deep" / ".gitignore")
    done = _run_isolated(PROBE, str(repo))
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout.strip().splitlines()[-1]
    assert '"open": "opened"' in out, out  # the repository itself is fine
    assert '"git": "permission_denied:unsafe_git_worktree"' in out, out
    assert '"snapshot": false' in out, out


def test_a_symlinked_gitattributes_is_refused(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    os.symlink("/dev/zero", repo / ".gitattributes")
    with Agent() as agent:
        res = agent.session(repo).tool("git", {"command": "diff"})
    assert res.error_kind is not None and res.error_kind.get("reason") == "unsafe_git_worktree", res.output


def test_ordinary_repositories_and_settings_still_open(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    (tmp_path / "ignore-list").write_text("*.log\n")
    _append_config(
        repo,
        f"""
        [core]
        \texcludesFile = {tmp_path / "ignore-list"}
        \tautocrlf = input
        [remote "origin"]
        \turl = https://example.invalid/repo.git ; a comment
        \tfetch = +refs/heads/*:refs/remotes/origin/*
        [alias]
        \tlg = "log --oneline \\
        [include] path = not-a-section-this-is-a-continued-value"
        """,
    )
    (repo / "x.log").write_text("ignored\n")
    repo_handle = open_repository(repo)
    assert repo_handle.workdir.rstrip("/") == str(repo)
    assert "x.log" not in repo_handle.status()
    snap = asyncio.run(take_snapshot(repo))
    assert snap is not None and snap.kind == "git"


def test_config_parser_reads_what_git_reads() -> None:
    entries = parse_config(
        textwrap.dedent(
            """
            # comment
            [core] bare = false
            \tworktree = "/a b" ; trailing
            [includeIf "gitdir:~/work/"]
            \tpath = x.cfg
            [section.Legacy]
            \tflag
            [alias]
            \tx = one \\
            [include]  path = still the value
            """
        )
    )
    seen = {(e.section, e.subsection, e.key): e.value for e in entries}
    assert seen[("core", None, "bare")] == "false"
    assert seen[("core", None, "worktree")] == "/a b"
    assert seen[("includeif", "gitdir:~/work/", "path")] == "x.cfg"
    assert seen[("section", "legacy", "flag")] is None
    assert ("include", None, "path") not in seen
    assert seen[("alias", None, "x")].startswith("one")
    for bad in ("[core\nx=1\n", "x = 1\n", '[a "b]\n', "[core]\n\t1x = 2\n", '[core]\n\tx = "open\n'):
        with pytest.raises(ConfigSyntaxError):
            parse_config(bad)


def test_include_refusal_is_a_typed_error_in_process(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    _append_config(repo, f"[include]\n\tpath = {tmp_path / 'nothing-here.cfg'}\n")
    with pytest.raises(PermissionDenied) as info:
        open_repository(repo)
    assert info.value.data["reason"] == "unsafe_git_config"
    assert "include.path" in info.value.message
