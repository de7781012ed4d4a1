"""A ``.git`` link record left by a killed host never brings back a link the user removed (SPEC B-6, K-3).

While sandboxed commands run, ``.a3s/git-link`` records the root ``.git`` symlink's target so a
link one command removes goes back before the next starts (``tools/bash/rootgit.py``). A host
killed mid-command never forgot the record: after the user removed ``.git`` (to stop the agent
seeing the repository, or to point it elsewhere), the next sandboxed command in that workspace put
the old link back from the stale record. Real processes (the host is a child killed with SIGKILL),
real symlinks, bwrap for the end-to-end case.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pygit2
import pytest

from tests.tools.bash_sandbox_support import bash, exists, governed, needs_bwrap
from tools.bash import rootgit

_HOST = """
import sys, time
from tools.bash import rootgit
rootgit.enter(sys.argv[1])  # a command starts: the link recorded, the workspace's lock held
print("entered", flush=True)
time.sleep(600)
"""


def _workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    pygit2.init_repository(str(ws / "store"), bare=True)
    (ws / ".git").symlink_to("store")
    return ws


def _start_host(ws: Path) -> subprocess.Popen[str]:
    """A host process inside a sandboxed command (``rootgit.enter`` done, ``leave`` not yet)."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    host = subprocess.Popen(
        [sys.executable, "-c", _HOST, str(ws)], stdout=subprocess.PIPE, text=True, env=env
    )
    assert host.stdout is not None and host.stdout.readline() == "entered\n"
    return host


def _kill(host: subprocess.Popen[str]) -> None:
    host.send_signal(signal.SIGKILL)  # no clean-up runs: the record stays, the lock goes with it
    host.wait(timeout=10)
    assert host.stdout is not None
    host.stdout.close()


def test_b6_k3_stale_link_record_of_a_killed_host_does_not_restore_a_removed_link(tmp_path: Path) -> None:
    ws = _workspace(tmp_path)
    _kill(_start_host(ws))
    assert (ws / ".a3s" / rootgit.LINK_RECORD).exists()  # left behind
    (ws / ".git").unlink()  # the user removes the link
    guard = rootgit.enter(str(ws))
    try:
        assert not os.path.islink(ws / ".git"), "the removed link came back from a stale record"
        assert rootgit.recorded_link(str(ws)) is None
    finally:
        rootgit.leave(guard)
    assert not exists(ws / ".git") and not exists(ws / ".a3s" / rootgit.LINK_RECORD)


def test_b6_k3_link_record_of_a_running_command_still_restores_a_link_it_removed(tmp_path: Path) -> None:
    """The record's purpose is kept: while a command runs (its host alive, holding the lock), a link
    that command removed goes back before the next command starts."""
    ws = _workspace(tmp_path)
    host = _start_host(ws)
    try:
        (ws / ".git").unlink()  # what the running command did
        guard = rootgit.enter(str(ws))
        try:
            assert os.readlink(ws / ".git") == "store"
        finally:
            rootgit.leave(guard)
    finally:
        _kill(host)


@pytest.mark.parametrize("change", ["moved away, another made in its place", "removed"])
def test_b6_k3_link_record_does_not_restore_a_link_to_a_changed_git_directory(
    tmp_path: Path, change: str
) -> None:
    """A running command's record names the git directory it saw; when that directory was moved
    away (another one made at its path) or removed meanwhile, the link is not put back."""
    ws = _workspace(tmp_path)
    host = _start_host(ws)
    try:
        (ws / ".git").unlink()
        if change == "removed":
            shutil.rmtree(ws / "store")
        else:
            (ws / "store").rename(ws / "store.old")
            pygit2.init_repository(str(ws / "store"), bare=True)
        guard = rootgit.enter(str(ws))
        try:
            assert not os.path.islink(ws / ".git"), f"the link was restored onto a directory {change}"
        finally:
            rootgit.leave(guard)
    finally:
        _kill(host)


@needs_bwrap
async def test_b6_k3_next_session_after_a_killed_host_leaves_the_removed_git_link_removed(
    tmp_path: Path,
) -> None:
    ws = _workspace(tmp_path)
    _kill(_start_host(ws))
    (ws / ".git").unlink()
    result = await bash(governed(ws), command="echo hi")
    assert result.error_kind is None, result
    assert not exists(ws / ".git"), "the next sandboxed command resurrected the removed .git link"
    assert not exists(ws / ".a3s" / rootgit.LINK_RECORD)


@pytest.fixture(autouse=True)
def _no_orphans():
    before = set(os.listdir("/proc"))
    yield
    # Every host process the test started was killed and reaped.
    for pid in set(os.listdir("/proc")) - before:
        if pid.isdigit():
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            assert b"rootgit.enter" not in cmdline, f"host process {pid} left running"
