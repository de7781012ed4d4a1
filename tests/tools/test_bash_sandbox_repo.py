"""``.git`` and ``.a3s`` are not model territory inside the sandbox (issue 15 item 3; SPEC B-6, K-3).

The repository (a directory, or a ``.git`` file naming a git directory elsewhere) is bound
read-only; ``.a3s`` is created before the first sandboxed command and bound read-only; a
``.a3s`` that is a symlink refuses the call.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import subprocess
from pathlib import Path

import pygit2
import pytest

from kernel.errors import PermissionDenied, Timeout
from kernel.origin import Origin
from kernel.testing import make_context
from kernel.workspace import LocalWorkspace
from tests.tools.bash_sandbox_support import bash, exists, governed, host, needs_bwrap, stdout

pytestmark = needs_bwrap

_TAMPER = (
    "git config core.fsmonitor 'touch {pwn}' 2>/dev/null && echo CONFIG-WRITTEN; "
    "echo '[core]' >> {gitdir}/config 2>/dev/null && echo APPENDED; "
    "mkdir -p {gitdir}/hooks && echo 'touch {pwn}' > {gitdir}/hooks/pre-commit 2>/dev/null && echo HOOK; "
    "rm -rf .git 2>/dev/null; mv .git .git-moved 2>/dev/null && echo MOVED; "
    "git status --porcelain >/dev/null 2>&1 && echo STATUS-OK; echo done"
)


def _commit(repo: pygit2.Repository, path: Path) -> None:
    (path / "a.txt").write_text("a\n")
    repo.index.add("a.txt")
    repo.index.write()
    tree = repo.index.write_tree()
    sig = pygit2.Signature("t", "t@example.com")
    repo.create_commit("HEAD", sig, sig, "init", tree, [])


def _snapshot(directory: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


async def test_b6_git_directory_is_read_only_in_the_sandbox(tmp_path):
    repo = pygit2.init_repository(str(tmp_path))
    _commit(repo, tmp_path)
    before = _snapshot(tmp_path / ".git")
    pwn = tmp_path / "pwned"
    result = await bash(governed(tmp_path), command=_TAMPER.format(pwn=pwn, gitdir=".git"))
    out = stdout(result)
    assert "STATUS-OK" in out and "done" in out
    for marker in ("CONFIG-WRITTEN", "APPENDED", "HOOK", "MOVED"):
        assert marker not in out
    assert (tmp_path / ".git").is_dir() and _snapshot(tmp_path / ".git") == before
    assert "fsmonitor" not in (tmp_path / ".git" / "config").read_text() and not pwn.exists()
    # Unsandboxed, the same command rewrites the config: the read-only bind is what stops it.
    control = await bash(
        host(tmp_path), command=f"git config core.fsmonitor 'touch {pwn}' && echo CONFIG-WRITTEN"
    )
    assert "CONFIG-WRITTEN" in control.output


async def test_b6_git_file_and_the_directories_it_names_are_read_only(tmp_path):
    main = tmp_path / "main"
    main.mkdir()
    repo = pygit2.init_repository(str(main))
    _commit(repo, main)
    ws = tmp_path / "wt"
    repo.add_worktree("wt", str(ws))
    assert (ws / ".git").is_file()
    gitdir = (ws / ".git").read_text().split(":", 1)[1].strip()
    before_main, before_file = _snapshot(main / ".git"), (ws / ".git").read_bytes()
    pwn = tmp_path / "pwned"
    attack = (
        _TAMPER.format(pwn=pwn, gitdir=gitdir)
        + f"; echo 'gitdir: {tmp_path}' > .git 2>/dev/null && echo REPOINTED"
    )
    attack += f"; echo '[core]' >> {main}/.git/config 2>/dev/null && echo COMMON-APPENDED"
    result = await bash(governed(ws), command=attack)
    out = stdout(result)
    assert "STATUS-OK" in out, result.output
    for marker in ("CONFIG-WRITTEN", "APPENDED", "HOOK", "MOVED", "REPOINTED"):
        assert marker not in out
    assert (ws / ".git").read_bytes() == before_file and _snapshot(main / ".git") == before_main
    assert not pwn.exists()


async def test_b6_state_dir_is_created_before_the_first_sandboxed_command(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    ws = tmp_path / "ws"
    ws.mkdir()
    assert not (ws / ".a3s").exists()
    attack = (
        f"mkdir -p .a3s/artifacts/objects 2>/dev/null; ln -s {outside} .a3s/artifacts/objects/bash 2>/dev/null; "
        "rmdir .a3s 2>/dev/null; mv .a3s .a3s-old 2>/dev/null; ln -s / .a3s 2>/dev/null; ls -ld .a3s"
    )
    result = await bash(governed(ws), command=attack)
    assert result.exit_code == 0
    state = ws / ".a3s"
    assert state.is_dir() and not state.is_symlink()
    assert [p.name for p in state.iterdir()] == [".gitignore"]  # kernel.statedir's, nothing planted
    assert not (ws / ".a3s-old").exists() and list(outside.iterdir()) == []


async def test_b6_symlinked_state_dir_refuses_the_sandboxed_call(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / ".a3s").symlink_to(outside)
    marker = f"ran-{secrets.token_hex(4)}"
    with pytest.raises(PermissionDenied) as caught:
        await bash(governed(ws), command=f"touch {marker}")
    assert caught.value.to_kind()["reason"] == "state_dir_not_a_directory"
    assert not (ws / marker).exists() and list(outside.iterdir()) == []
    (ws / ".a3s").unlink()
    (ws / ".a3s").write_text("a file")
    with pytest.raises(PermissionDenied, match="not a directory"):
        await bash(governed(ws), command=f"touch {marker}")
    assert not (ws / marker).exists()


async def test_b6_workspace_without_git_still_runs_and_keeps_state_dir_read_only(tmp_path):
    result = await bash(governed(tmp_path), command="echo hi > f && touch .a3s/x 2>/dev/null || echo denied")
    assert stdout(result) == "denied\n" and (tmp_path / "f").read_text() == "hi\n"
    shutil.rmtree(tmp_path / ".a3s")
    assert not (tmp_path / ".a3s" / "x").exists()


def _user_git_status(ws: Path) -> subprocess.CompletedProcess[str]:
    """What the user's own `git status` does in the workspace afterwards (the host's real git,
    stopped from discovering a repository above the workspace)."""
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(ws.parent)}
    return subprocess.run(
        ["git", "status", "--porcelain"], cwd=ws, env=env, capture_output=True, text=True, timeout=30
    )


async def test_b6_sandbox_cannot_plant_a_repository_in_a_workspace_without_one(tmp_path):
    """`git init` + `core.fsmonitor` inside the sandbox of a non-repository workspace ran a command
    on the host at the user's next `git status` (found by the issue-15 attack run)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    pwn = tmp_path / "pwned"
    attack = (
        f"git init -q . 2>/dev/null && git config core.fsmonitor 'touch {pwn}; false' && echo PLANTED; "
        "rmdir .git 2>/dev/null && echo REMOVED; mv .git g 2>/dev/null && echo MOVED; echo done"
    )
    result = await bash(governed(ws), command=attack)
    assert stdout(result) == "done\n" and result.error_kind is None
    assert not exists(ws / ".git") and not exists(ws / "g")
    status = _user_git_status(ws)
    assert status.returncode != 0 and "not a git repository" in status.stderr
    assert not pwn.exists()


async def test_b6_sandbox_cannot_plant_a_gitdir_file_pointing_elsewhere(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    pygit2.init_repository(str(other))
    ws = tmp_path / "ws"
    ws.mkdir()
    result = await bash(
        governed(ws), command=f"echo 'gitdir: {other}/.git' > .git 2>/dev/null && echo PLANTED"
    )
    assert "PLANTED" not in result.output
    assert not exists(ws / ".git")


async def test_b6_sandbox_cannot_replace_a_symlinked_git_directory(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    repo = pygit2.init_repository(str(real))
    _commit(repo, real)
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / ".git").symlink_to(real / ".git")
    pwn = tmp_path / "pwned"
    attack = f"rm .git && git init -q . && git config core.fsmonitor 'touch {pwn}; false' && echo REPLACED"
    result = await bash(governed(ws), command=attack)
    assert "REPLACED" in result.output and result.error_kind["reason"] == "protected_path"
    assert (ws / ".git").is_symlink() and os.readlink(ws / ".git") == str(real / ".git")
    kept = result.metadata["quarantined_git"]  # the user can still see what the command made
    assert kept.startswith(".a3s/quarantine/") and str(pwn) in (ws / kept / "config").read_text()
    _user_git_status(ws)
    assert not pwn.exists()


async def test_b6_sandbox_without_git_changes_passes_untouched(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    result = await bash(governed(ws), command="mkdir -p sub && git init -q sub && echo ok")
    assert result.exit_code == 0 and result.error_kind is None and "quarantined_git" not in result.metadata
    assert (ws / "sub" / ".git").is_dir()  # nested repositories stay ordinary content (docs/sandbox.md)


async def test_b6_no_repository_appears_while_the_sandboxed_command_runs(tmp_path):
    """A long command that plants a repository leaves a window in which the user's git (a shell
    prompt, an editor's git integration polling the folder) would honour it: none may exist even
    then. The sandbox sees an empty read-only `.git` (an empty `.git` is no repository to git)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    pwn = tmp_path / "pwned"
    attack = (
        f"git init -q . 2>/dev/null && echo INITED; git config core.fsmonitor 'touch {pwn}; false' 2>/dev/null "
        "&& echo CONFIGURED; echo > started; sleep 3; echo done"
    )
    call = asyncio.create_task(bash(governed(ws), command=attack))
    for _ in range(200):
        if (ws / "started").exists():
            break
        await asyncio.sleep(0.05)
    assert (ws / "started").exists()
    during = await asyncio.to_thread(_user_git_status, ws)
    result = await call
    assert "not a git repository" in during.stderr and not pwn.exists()
    assert stdout(result).splitlines() == ["done"] and result.error_kind is None
    assert not exists(ws / ".git")  # the placeholder is gone with the command


async def _wait_for(path: Path, what: str) -> None:
    for _ in range(400):
        if await asyncio.to_thread(os.path.exists, path):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{what} never happened")


async def test_b6_k3_placeholder_outlives_the_command_that_made_it_while_another_runs(tmp_path):
    """Two sandboxed commands in one workspace without a repository (a subagent beside its parent):
    the first made the `.git` placeholder and, ending first, removed it — which detached the second
    command's read-only bind of it. The second then `git init`ed a real repository with
    `core.fsmonitor` that the host's git honoured until the second command ended. Now the last
    command out removes the placeholder."""
    ws = tmp_path / "ws"
    ws.mkdir()
    pwn = tmp_path / "pwned"
    first = asyncio.create_task(bash(governed(ws), command="echo > first-started; sleep 1"))
    await _wait_for(ws / "first-started", "the first command's start")
    attack = (
        "echo > second-started; while [ ! -e first-ended ]; do sleep 0.02; done; "
        f"git init -q . 2>/dev/null && echo INITED; git config core.fsmonitor 'touch {pwn}; false' "
        "2>/dev/null && echo CONFIGURED; echo > tried; sleep 2; echo done"
    )
    second = asyncio.create_task(bash(governed(ws), command=attack))
    await _wait_for(ws / "second-started", "the second command's start")
    assert (await first).error_kind is None
    (ws / "first-ended").write_text("")
    await _wait_for(ws / "tried", "the second command's attempt")
    during = await asyncio.to_thread(_user_git_status, ws)
    result = await second
    assert "not a git repository" in during.stderr and not pwn.exists()
    assert stdout(result).splitlines() == ["done"] and result.error_kind is None
    assert "quarantined_git" not in result.metadata
    assert not exists(ws / ".git")  # the last command out removed it
    # Another command's placeholder is no repository to the change snapshot either.
    assert "tried" in result.metadata["changed_paths"]


async def test_b6_placeholder_left_behind_is_removed_by_the_next_command(tmp_path):
    """A host killed mid-command leaves the placeholder (sticky, so recognisably ours); the next
    sandboxed command removes it. A user's own empty `.git` is left alone."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / ".git").mkdir()
    os.chmod(ws / ".git", 0o1700)
    result = await bash(governed(ws), command="echo hi")
    assert result.error_kind is None and not exists(ws / ".git")
    (ws / ".git").mkdir(mode=0o755)
    result = await bash(governed(ws), command="echo hi")
    assert result.error_kind is None and (ws / ".git").is_dir()


async def test_k8_b6_workspace_lock_held_elsewhere_is_a_bounded_timeout(tmp_path, monkeypatch):
    """Whoever holds the workspace's lock exclusively (only a command removing the placeholder
    does, for microseconds) delays a sandboxed call a bounded while, never blocks the event loop."""
    import fcntl

    from tools.bash import tool as bash_tool

    monkeypatch.setattr(bash_tool, "ROOT_GIT_LOCK_WAIT_S", 0.3)
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / ".a3s").mkdir()
    fd = os.open(ws / ".a3s", os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with pytest.raises(Timeout, match="nothing ran"):  # the kernel turns it into error_kind timeout
            await bash(governed(ws), command="echo > ran")
    finally:
        os.close(fd)
    assert not exists(ws / "ran") and not exists(ws / ".git")


async def test_b6_k3_removed_git_link_leaves_its_git_directory_protected_meanwhile(tmp_path):
    """`.git` is a symlink to a git directory inside the workspace. One sandboxed command removes
    the link and keeps running: a second command started meanwhile found no `.git`, so it did not
    bind the git directory read-only and wrote `core.fsmonitor` into its config, and model-side
    `write` saw no link either; the first command's clean-up then put the link back — onto the
    planted config. Now the link goes back before the second command starts, and `write` checks
    the link recorded while commands run."""
    from tools.write import TOOL as WRITE

    ws = tmp_path / "ws"
    ws.mkdir()
    store = ws / "store"  # a git directory not named .git (`.git -> store`)
    pygit2.init_repository(str(store), bare=True)
    (ws / ".git").symlink_to("store")
    config = store / "config"
    original = config.read_bytes()
    pwn = tmp_path / "pwned"
    first = asyncio.create_task(bash(governed(ws), command="rm .git && echo > removed; sleep 2"))
    await _wait_for(ws / "removed", "the link's removal")
    plant = f"printf '[core]\\n\\tfsmonitor = touch {pwn}\\n' >> store/config 2>/dev/null && echo PLANTED; echo done"
    second = await bash(governed(ws), command=plant)
    wctx = make_context(LocalWorkspace(ws), tool_name="write", origin=Origin.AGENT)
    with pytest.raises(PermissionDenied):
        await WRITE.run(wctx, WRITE.validate({"file_path": "store/config", "content": "[core]\n"}))
    result = await first
    assert stdout(second) == "done\n" and config.read_bytes() == original
    assert os.readlink(ws / ".git") == "store" and result.error_kind is None
    assert not (ws / ".a3s" / "git-link").exists()  # forgotten once no command runs


def _repository_named_by_dot_git(ws: Path, layout: str) -> None:
    """A work tree at ``ws`` whose git directory is ``ws/a/gd``, named by a ``gitdir:`` file (as
    ``git init --separate-git-dir`` makes) or by a ``.git`` symlink."""
    (ws / "a").mkdir(parents=True)
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(ws.parent)}
    git = ["git", "-c", "init.defaultBranch=main"]
    if layout == "file":
        subprocess.run(
            [*git, "init", "-q", f"--separate-git-dir={ws / 'a' / 'gd'}", str(ws)], check=True, env=env
        )
    else:
        subprocess.run([*git, "init", "-q", str(ws)], check=True, env=env)
        (ws / ".git").rename(ws / "a" / "gd")
        (ws / ".git").symlink_to("a/gd")
    (ws / "f.txt").write_text("f\n")
    assert _user_git_status(ws).returncode == 0


_MOVE_AND_PLANT = (
    "mv a b && mkdir -p a/gd/objects a/gd/refs/heads && echo 'ref: refs/heads/main' > a/gd/HEAD && "
    "printf '[core]\\n\\trepositoryformatversion = 0\\n\\tfsmonitor = \"touch {pwn}; false\"\\n' > a/gd/config && "
    "echo PLANTED"
)


@pytest.mark.parametrize("layout", ["file", "link"])
async def test_b6_k3_moving_the_named_git_directory_away_plants_no_repository(tmp_path, layout):
    """B-6, K-3: only the git directory a ``.git`` file or symlink names is a read-only mount, not
    its parent. ``mv a b`` (for ``gitdir: a/gd``) and a repository of the command's own at ``a/gd``
    with ``core.fsmonitor``: the host's next ``git status`` ran it. Now ``.git`` itself is
    quarantined when a directory it names is no longer the same: no repository is found there."""
    ws = tmp_path / "ws"
    _repository_named_by_dot_git(ws, layout)
    pwn = tmp_path / "pwned"
    result = await bash(governed(ws), command=_MOVE_AND_PLANT.format(pwn=pwn))
    assert "PLANTED" in result.output
    assert result.error_kind is not None and result.error_kind["reason"] == "protected_path"
    kept = result.metadata["quarantined_git"]
    assert kept.startswith(".a3s/quarantine/") and exists(ws / kept) and not exists(ws / ".git")
    status = _user_git_status(ws)
    assert status.returncode != 0 and "not a git repository" in status.stderr
    assert not pwn.exists()
    again = await bash(governed(ws), command="echo ok")
    assert again.output == "ok\n" and again.error_kind is None


async def test_b6_a_fifo_commondir_does_not_block_preparing_the_sandbox(tmp_path):
    """B-6: ``commondir`` was opened blocking on the event loop (``prepare`` runs there): a FIFO in
    its place (a git directory the command made at the named path) froze the host process."""
    import threading

    from tools.bash import mounts

    ws = tmp_path / "ws"
    (ws / "gd").mkdir(parents=True)
    (ws / ".git").write_text("gitdir: gd\n")
    os.mkfifo(ws / "gd" / "commondir")
    found: list[list[str]] = []
    root_fd = os.open(ws, os.O_PATH | os.O_DIRECTORY)
    try:
        worker = threading.Thread(target=lambda: found.append(mounts.named_git_dirs(str(ws), root_fd)))
        worker.start()
        worker.join(10)
        blocked = worker.is_alive()
        if blocked:  # let the stuck open go, so the test fails instead of hanging
            os.close(os.open(ws / "gd" / "commondir", os.O_WRONLY | os.O_NONBLOCK))
            worker.join(10)
    finally:
        os.close(root_fd)
    assert not blocked and found == [[str(ws / "gd")]]
