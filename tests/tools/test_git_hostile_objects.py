"""A ``git:REPO@REV`` view whose object database a sandboxed command tampered with (SPEC K-8, B-1, B-6).

A model with ``bash`` can write ``.git/objects`` of a repository the host later reads as a
``git:`` workspace. libgit2 opens object files blocking, and pygit2 holds the GIL while it does: a
FIFO planted where a loose object or a pack index belongs froze the *whole host process* (the
event loop, every session, heartbeats) on the first ``ls``/``read``/``search`` — no deadline or
cancel reached it. An object that does not parse was an ``internal_error`` with a logged traceback.
Each call must instead end at once with a typed error. Every probe runs in a fresh process with a
hard timeout, so a freeze fails the test instead of hanging the suite.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.tools.git_cli import git as _git

REPO_ROOT = Path(__file__).resolve().parents[2]
CALLS: list[tuple[str, dict[str, Any]]] = [
    ("ls", {"path": "dir"}),
    ("read", {"file_path": "dir/a.txt"}),
    ("search", {"mode": "grep", "query": "hello", "path": "dir"}),
]
PROBE = """
import json, sys
from kernel.options import SessionOptions
from orchestrator import Agent
workspace, calls = sys.argv[1], json.loads(sys.argv[2])
limits = SessionOptions(tool_timeouts_ms={"ls": 5000, "read": 5000, "search": 5000})
with Agent() as agent:
    session = agent.session(workspace, limits)
    out = []
    for tool, args in calls:
        r = session.tool(tool, args)
        out.append({"exit_code": r.exit_code, "output": r.output, "error_kind": r.error_kind})
    print(json.dumps(out))
"""


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "r"
    (repo / "dir").mkdir(parents=True)
    (repo / "dir" / "a.txt").write_text("hello\n")
    (repo / "top.txt").write_text("top\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "c")
    return repo


def _loose(repo: Path, rev: str) -> Path:
    oid = _git(repo, "rev-parse", rev)
    return repo / ".git" / "objects" / oid[:2] / oid[2:]


def _run_probe(source: str, target: str, calls: list[Any], frozen: str) -> Any:
    """``source`` in a fresh process on ``target`` with ``calls``; its last stdout line as JSON. A
    hard timeout turns a frozen host process into a failure (``frozen`` says what froze it)."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    try:
        done = subprocess.run(
            [sys.executable, "-c", source, target, json.dumps(calls)],
            env=env,
            capture_output=True,
            text=True,
            timeout=90,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"the host process froze {frozen}")
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _probe(repo: Path) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = _run_probe(
        PROBE, f"git:{repo}@HEAD", CALLS, "on a tampered object database (no deadline reached it)"
    )
    return result


def _plant_fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


@pytest.mark.parametrize("where", ["blob", "tree", "symlink_to_fifo"])
def test_k8_b1_a_special_file_in_the_object_database_fails_the_call_and_never_freezes_the_host(
    tmp_path: Path, where: str
) -> None:
    """K-8/B-1: a FIFO where the blob ``dir/a.txt`` or the tree ``dir`` belongs (or a symlink to
    one) is refused before libgit2 opens it: each call is a typed ``invalid_argument``
    naming the object, and the process stays alive."""
    repo = _repo(tmp_path)
    if where == "blob":
        _plant_fifo(_loose(repo, "HEAD:dir/a.txt"))
    elif where == "tree":
        _plant_fifo(_loose(repo, "HEAD:dir"))
    else:
        os.mkfifo(tmp_path / "fifo")
        obj = _loose(repo, "HEAD:dir/a.txt")
        obj.unlink()
        obj.symlink_to(tmp_path / "fifo")
    results = _probe(repo)
    for (tool, _args), res in zip(CALLS, results, strict=True):
        assert res["exit_code"] == 1, (tool, res)
        assert res["error_kind"]["type"] == "invalid_argument", (tool, res)
        assert "not a regular file" in res["output"], (tool, res)


def test_k8_an_object_that_does_not_parse_is_a_typed_error_not_an_internal_one(tmp_path: Path) -> None:
    """K-8: a loose object overwritten with bytes that are no zlib stream fails ``ls``, ``read``
    and ``search`` as ``invalid_argument`` naming the object (was ``internal_error`` GitError with
    a traceback in the log)."""
    repo = _repo(tmp_path)
    obj = _loose(repo, "HEAD:dir/a.txt")
    obj.chmod(0o644)
    obj.write_bytes(b"not a zlib stream")
    oid = _git(repo, "rev-parse", "HEAD:dir/a.txt")
    for (tool, _args), res in zip(CALLS, _probe(repo), strict=True):
        assert res["exit_code"] == 1, (tool, res)
        assert res["error_kind"]["type"] == "invalid_argument", (tool, res)
        assert oid in res["output"], (tool, res)


GIT_PROBE = """
import json, sys
from kernel.options import SessionOptions
from orchestrator import Agent
with Agent() as agent:
    session = agent.session(sys.argv[1], SessionOptions(tool_timeouts_ms={"git": 5000}))
    out = []
    for args in json.loads(sys.argv[2]):
        r = session.tool("git", args)
        out.append({"exit_code": r.exit_code, "output": r.output, "error_kind": r.error_kind})
    print(json.dumps(out))
"""
GIT_CALLS = [{"command": "diff"}, {"command": "log"}, {"command": "status"}]


@pytest.mark.parametrize("workspace", ["local", "view"])
def test_k8_b1_the_git_tool_refuses_an_object_database_with_a_fifo_instead_of_freezing_the_host(
    tmp_path: Path, workspace: str
) -> None:
    """K-8/B-1: a FIFO planted (from the sandbox) where a committed blob's loose object belongs, then
    ``git diff`` with that file changed: libgit2 opened the FIFO and the whole host process froze
    (the 5 s tool timeout never fired). Now every ``git`` call on that repository fails
    ``invalid_argument`` naming the entry, at once, until it is removed."""
    repo = _repo(tmp_path)
    (repo / "dir" / "a.txt").write_text("changed\n")
    obj = _loose(repo, "HEAD:dir/a.txt")
    _plant_fifo(obj)
    name = f"{obj.parent.name}/{obj.name}"
    target = str(repo) if workspace == "local" else f"git:{repo}@HEAD"
    results = _run_probe(GIT_PROBE, target, GIT_CALLS, "on a FIFO in .git/objects (no deadline reached it)")
    for args, res in zip(GIT_CALLS, results, strict=True):
        assert res["exit_code"] == 1, (args, res)
        assert res["error_kind"]["type"] == "invalid_argument", (args, res)
        assert name in res["output"] and "not regular files" in res["output"], (args, res)


BASH_PROBE = """
import json, sys
from kernel.options import SessionOptions
from kernel.policy import PermissionPolicy
from orchestrator import Agent
options = SessionOptions(permission_policy=PermissionPolicy(allow=["*"]), tool_timeouts_ms={"bash": 20000})
with Agent() as agent:
    session = agent.session(sys.argv[1], options)
    out = []
    for command in json.loads(sys.argv[2]):
        r = session.tool("bash", {"command": command})
        out.append({"exit_code": r.exit_code, "output": r.output, "changed": r.metadata.get("changed_paths")})
    print(json.dumps(out))
"""


def test_k8_b2_a_bash_command_planting_a_fifo_in_git_objects_does_not_freeze_the_host(tmp_path: Path) -> None:
    """K-8/B-2: one sandboxed command replaces the HEAD tree's loose object with a FIFO. bash's
    change snapshot (libgit2 status, which reads the HEAD tree) then froze the whole host process.
    Now the object database is vetted first: the call returns (its changed paths unknown) and the
    next one runs."""
    repo = _repo(tmp_path)
    plant = (
        't=$(git rev-parse "HEAD^{tree}"); p=.git/objects/${t:0:2}/${t:2}; rm -f $p; mkfifo $p; echo planted'
    )
    first, second = _run_probe(
        BASH_PROBE, str(repo), [plant, "echo next"], "after a bash command planted a FIFO in .git/objects"
    )
    assert first["exit_code"] == 0 and "planted" in first["output"], first
    assert first["changed"] is None, first  # unknown, not a freeze
    assert second["exit_code"] == 0 and "next" in second["output"], second
