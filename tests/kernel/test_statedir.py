"""The host's state directory ``.a3s`` (issue 15 item 3): created at session start, never followed
through a symlink, and the artifact store writes only below verified directory descriptors."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kernel import SessionOptions
from kernel.artifact_files import FileArtifactStore
from kernel.artifacts import artifact_uri
from kernel.errors import KernelFault, NotFound, PermissionDenied
from kernel.statedir import ensure_state_dir, open_state_dir
from orchestrator import Agent
from tools.git.testing import RepoBuilder

CANARY = b"OUTSIDE-CANARY\n"


def _outside(tmp_path: Path) -> Path:
    out = tmp_path / "outside"
    out.mkdir()
    (out / "canary.txt").write_bytes(CANARY)
    return out


def _snapshot(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def test_session_start_creates_the_state_dir_before_any_call(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    with Agent() as agent:
        agent.session(ws, SessionOptions(artifact_store="memory"))
        # No tool ran yet: the directory (and its .gitignore) is already there.
        assert (ws / ".a3s").is_dir() and not (ws / ".a3s").is_symlink()
        assert (ws / ".a3s" / ".gitignore").read_bytes() == b"*\n"


def test_state_dir_keeps_git_status_clean(tmp_path: Path) -> None:
    repo = RepoBuilder(tmp_path / "repo")
    repo.commit({"a.txt": "a\n"}, "init")
    with Agent() as agent:
        session = agent.session(repo.path)
        res = session.tool("git", {"command": "status"})
    assert res.exit_code == 0 and ".a3s" not in res.output
    import pygit2

    status = pygit2.Repository(str(repo.path)).status()
    assert not any(p.startswith(".a3s") for p in status), status


def test_read_only_and_git_tree_workspaces_get_no_state_dir(tmp_path: Path) -> None:
    ws = tmp_path / "ro"
    ws.mkdir()
    from kernel.workspace import LocalWorkspace

    with Agent() as agent:
        agent.session(LocalWorkspace(ws, writable=False))
        repo = RepoBuilder(tmp_path / "repo")
        repo.commit({"a.txt": "a\n"}, "init")
        agent.session(f"git:{repo.path}@HEAD")
    assert not (ws / ".a3s").exists()
    assert not (repo.path / ".a3s").exists()


def test_a_symlinked_state_dir_refuses_the_session(tmp_path: Path) -> None:
    outside = _outside(tmp_path)
    ws = tmp_path / "ws"
    ws.mkdir()
    os.symlink(outside, ws / ".a3s")
    before = _snapshot(outside)
    with Agent() as agent, pytest.raises(PermissionDenied) as info:
        agent.session(ws)
    assert info.value.data["reason"] == "state_dir_not_a_directory"
    assert _snapshot(outside) == before


def test_a_file_named_like_the_state_dir_is_refused(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / ".a3s").write_text("not a directory")
    with pytest.raises(PermissionDenied):
        ensure_state_dir(ws)


@pytest.mark.parametrize(
    "planted",
    [
        ".a3s/artifacts",
        ".a3s/artifacts/objects",
        ".a3s/artifacts/objects/bash",
    ],
)
def test_planted_state_symlinks_never_carry_an_artifact_outside(tmp_path: Path, planted: str) -> None:
    """Issue 15: a planted ``.a3s/artifacts/objects/bash -> /outside`` made the host write outside."""
    outside = _outside(tmp_path)
    ws = tmp_path / "ws"
    (ws / planted).parent.mkdir(parents=True)
    os.symlink(outside, ws / planted)
    before = _snapshot(outside)
    store = FileArtifactStore.for_workspace(ws)
    with pytest.raises(KernelFault, match="is a symlink or not a directory \\(never followed\\)"):
        store.put("bash", b"x" * 1000)
    assert _snapshot(outside) == before
    with pytest.raises(NotFound):
        store.get(artifact_uri("bash", CANARY))


def test_planted_manifest_and_lock_symlinks_are_not_followed(tmp_path: Path) -> None:
    outside = _outside(tmp_path)
    ws = tmp_path / "ws"
    store_dir = ws / ".a3s" / "artifacts"
    store_dir.mkdir(parents=True)
    os.symlink(outside / "canary.txt", store_dir / "artifacts.json")
    store = FileArtifactStore.for_workspace(ws)
    uri = store.put("t", b"payload")
    # The manifest symlink was replaced by a real file, never written through.
    assert not (store_dir / "artifacts.json").is_symlink()
    assert (outside / "canary.txt").read_bytes() == CANARY
    assert store.get(uri) == b"payload"
    os.unlink(store_dir / ".lock")
    os.symlink(outside / "lock-target", store_dir / ".lock")
    with pytest.raises(KernelFault):
        store.put("t", b"more")
    assert not (outside / "lock-target").exists()


def test_a_symlinked_object_is_neither_served_nor_counted(tmp_path: Path) -> None:
    outside = _outside(tmp_path)
    ws = tmp_path / "ws"
    store = FileArtifactStore.for_workspace(ws)
    store.put("t", b"real")
    uri = artifact_uri("t", CANARY)
    digest = uri.rsplit("/", 1)[1]
    os.symlink(outside / "canary.txt", ws / ".a3s" / "artifacts" / "objects" / "t" / digest)
    with pytest.raises(NotFound):
        store.get(uri)
    assert uri not in store.uris()


def test_lossy_output_artifacts_stay_inside_despite_a_planted_symlink(tmp_path: Path) -> None:
    """The projection path: a lossy result's original goes to the store, which refuses the symlink."""
    from kernel.projection import Projector, ToolResultTransformPolicyV1

    outside = _outside(tmp_path)
    ws = tmp_path / "ws"
    (ws / ".a3s" / "artifacts" / "objects").mkdir(parents=True)
    os.symlink(outside, ws / ".a3s" / "artifacts" / "objects" / "bash")
    before = _snapshot(outside)
    policy = ToolResultTransformPolicyV1(max_output_bytes=4096, head_bytes=4096, tail_bytes=0)
    projector = Projector(policy, FileArtifactStore.for_workspace(ws))
    with pytest.raises(KernelFault, match="never followed"):
        projector.project("bash", "a" * 30_000, {})
    assert _snapshot(outside) == before
    assert sorted(os.listdir(outside)) == ["canary.txt"]


def test_open_state_dir_refuses_symlinks_at_every_level(tmp_path: Path) -> None:
    outside = _outside(tmp_path)
    ws = tmp_path / "ws"
    (ws / ".a3s").mkdir(parents=True)
    os.symlink(outside, ws / ".a3s" / "index")
    with pytest.raises(PermissionDenied):
        open_state_dir(ws, "index", "tantivy")
    with open_state_dir(ws, "real", "deeper") as fd:
        assert os.fstat(fd.fd).st_ino == os.stat(ws / ".a3s" / "real" / "deeper").st_ino
    assert sorted(os.listdir(outside)) == ["canary.txt"]


def test_session_with_a_planted_object_symlink_fails_the_call_and_writes_nothing_outside(
    tmp_path: Path,
) -> None:
    """The issue's scenario end to end: a lossy bash output, ``objects/bash -> outside`` planted."""
    from kernel.projection import ToolResultTransformPolicyV1

    outside = _outside(tmp_path)
    ws = tmp_path / "ws"
    (ws / ".a3s" / "artifacts" / "objects").mkdir(parents=True)
    os.symlink(outside, ws / ".a3s" / "artifacts" / "objects" / "bash")
    before = _snapshot(outside)
    policy = ToolResultTransformPolicyV1(max_output_bytes=4096, head_bytes=4096, tail_bytes=0)
    with Agent() as agent:
        session = agent.session(ws, SessionOptions(tool_result_transform_policy=policy))
        res = session.tool("bash", {"command": "head -c 30000 /dev/zero | tr '\\0' a"})
    assert res.exit_code == 1 and "never followed" in res.output, res.output
    assert _snapshot(outside) == before
    assert sorted(os.listdir(outside)) == ["canary.txt"]
