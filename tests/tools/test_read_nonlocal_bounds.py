"""Reads on ``git:`` and object-store workspaces are bounded like a directory's (SPEC B-1, B-4, B-6, K-8).

libgit2 inflates a blob whole on lookup, so ``read`` (and ``ls``, ``search``, ``git diff``) on a
``git:REPO@REV`` view pulled the whole object into the host process: a blob of 300 MiB of zeros —
a few hundred KiB in the object database, one ``git add`` in a sandboxed command — took about 600
MiB (libgit2's copy plus Python's). The same bytes in a directory are streamed with a 256 MiB scan
cap. These tests hold every workspace kind to the directory's answers, byte for byte, and measure
the host's peak RSS in a subprocess (the blobs are made from sparse files: no big writes to disk).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kernel.errors import InvalidArgument
from kernel.gittree import GitTreeWorkspace
from kernel.objectstore import ObjectStoreWorkspace
from kernel.workspace import MAX_READ_BYTES, LocalWorkspace
from orchestrator import Agent
from tests.tools.git_cli import GIT_ENV
from tests.tools.git_cli import git as _git
from tools import read

MIB = 1024 * 1024
BIG = 300 * MIB  # over the 256 MiB scan cap, so the cap's answers are compared too
HEAD = b"".join(b"line %d\n" % i for i in range(1, 1001))
REPO_ROOT = Path(__file__).resolve().parents[2]
SMALL = {
    "small.txt": b"hello\nworld\n",
    "crlf.txt": b"one\r\ntwo\r\nthree",
    "long.txt": b"x" * 5000 + b"\n\xc3\xa9" * 3000 + b"\n",
    "latin.txt": b"caf\xe9\n" * 10,
    "many.txt": b"".join(b"row %d\n" % i for i in range(4000)),
    "dir/nested.txt": b"nested\n",
}


def _sparse(path: Path) -> None:
    """``HEAD`` then zeros up to ``BIG`` bytes: one 300 MiB line after 1000 short ones; no disk."""
    with open(path, "wb") as fh:
        fh.write(HEAD)
        fh.truncate(BIG)


def _make_repo(root: Path, *, packed: bool) -> Path:
    """Commit 1: the small files; commit 2 adds ``big.bin`` — a loose object, or (``packed``) a
    whole pack entry, as git's bulk check-in stores files over ``core.bigFileThreshold``."""
    repo = root / ("packed" if packed else "loose")
    repo.mkdir()
    _git(repo, "init", "-q")
    for name, data in SMALL.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_bytes(data)
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "small")
    _sparse(repo / "big.bin")
    _git(repo, *(["-c", "core.bigFileThreshold=1m"] if packed else []), "add", "big.bin")
    _git(repo, "commit", "-qm", "big")
    (repo / "big.bin").unlink()  # the work tree is not what is read; keep the disk free
    return repo


@pytest.fixture(scope="module")
def repos(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("gitread")
    loose = _make_repo(root, packed=False)
    packed = _make_repo(root, packed=True)
    shared = root / "shared"  # objects only through objects/info/alternates: not streamable here
    subprocess.run(
        ["git", "clone", "-q", "--shared", str(loose), str(shared)],
        env=GIT_ENV,
        check=True,
        capture_output=True,
    )
    local = root / "dir"
    local.mkdir()
    for name, data in SMALL.items():
        (local / name).parent.mkdir(parents=True, exist_ok=True)
        (local / name).write_bytes(data)
    _sparse(local / "big.bin")
    return {"loose": loose, "packed": packed, "shared": shared, "dir": local}


# The calls compared across workspace kinds: the scan cap's three cases, batches, paging.
BIG_CALLS: list[dict[str, Any]] = [
    {"file_path": "big.bin"},  # the cap falls inside the window (the 300 MiB line)
    {"file_path": "big.bin", "limit": 10},  # the window is collected before the cap
    {"file_path": "big.bin", "offset": 5000},  # the offset lies past the cap
    {"files": [{"path": "big.bin", "limit": 5}, {"path": "small.txt"}]},
    {"files": [{"path": "small.txt"}, {"path": "big.bin", "offset": 995}]},
]
SMALL_CALLS: list[dict[str, Any]] = [
    *({"file_path": name} for name in SMALL),
    {"file_path": "many.txt", "offset": 1990, "limit": 20},
    {"file_path": "many.txt", "offset": 4000},
    {"file_path": "many.txt", "offset": 4001},
    {"file_path": "crlf.txt", "limit": 5000},
    {"file_path": "nope.txt"},
    {"file_path": "dir"},
    {"file_path": "../outside"},
    {"files": [{"path": n} for n in SMALL], "max_output_bytes": 4096},
    {"files": [{"path": "nope.txt"}, {"path": "many.txt", "offset": 3990}]},
]
KEYS = ("range", "scan", "batch", "source_anchors")


def _view(res: Any) -> dict[str, Any]:
    """What must be identical across workspace kinds (evidence digests aside, they follow output)."""
    return {
        "exit_code": res.exit_code,
        "output": res.output,
        "error_kind": res.error_kind,
        **{k: res.metadata.get(k) for k in KEYS},
    }


# Runs in a fresh process: the calls, then this process's peak RSS growth (MiB) across them.
PROBE = """
import json, resource, sys
from orchestrator import Agent
def mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
workspace, calls = sys.argv[1], json.loads(sys.argv[2])
with Agent() as agent:
    session = agent.session(workspace)
    session.tool("ls", {})  # warm up the session before the baseline
    base = mib()
    out = []
    for tool, args in calls:
        r = session.tool(tool, args)
        meta = {k: r.metadata.get(k) for k in ("range", "scan", "batch", "source_anchors", "search")}
        out.append({"exit_code": r.exit_code, "output": r.output, "error_kind": r.error_kind, **meta})
    print(json.dumps({"base_mib": base, "growth_mib": mib() - base, "results": out}))
"""


def _probe(workspace: str, calls: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, workspace, json.dumps(calls)],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("kind", ["loose", "packed"])
def test_b1_b4_k8_read_of_a_big_blob_streams_with_the_directory_scan_cap(
    repos: dict[str, Path], agent: Agent, kind: str
) -> None:
    calls = [("read", args) for args in BIG_CALLS]
    probe = _probe(f"git:{repos[kind]}@HEAD", calls)
    # Peak RSS of the host across all five reads of a 300 MiB blob (was ~600 MiB: libgit2's copy
    # of the inflated blob plus Python's): far below the blob, i.e. streamed.
    assert probe["growth_mib"] < 64, probe["growth_mib"]
    local = agent.session(str(repos["dir"]))
    for (tool, args), got in zip(calls, probe["results"], strict=True):
        want = json.loads(json.dumps(_view(local.tool(tool, args))))
        got = {k: got[k] for k in want}
        assert got == want, args
    first = probe["results"][0]
    assert first["scan"] == {
        "truncated": True,
        "scanned_bytes": read.MAX_SCAN_BYTES,
        "max_scan_bytes": read.MAX_SCAN_BYTES,
    }
    assert probe["results"][2]["error_kind"]["type"] == "invalid_argument"


def test_b1_ls_glob_grep_and_git_diff_never_inflate_a_big_blob(repos: dict[str, Path]) -> None:
    calls = [
        ("ls", {}),
        ("search", {"mode": "glob", "query": "**/*.bin"}),
        ("search", {"mode": "grep", "query": "line 999$"}),
        ("search", {"mode": "bm25", "query": "hello world"}),
        ("git", {"command": "diff", "target": "HEAD~1"}),
    ]
    probe = _probe(f"git:{repos['loose']}@HEAD", calls)
    assert probe["growth_mib"] < 64, probe["growth_mib"]
    ls, glob, grep, bm25, diff = probe["results"]
    assert ls["exit_code"] == 0 and "big.bin  (300.0MiB)" in ls["output"]
    assert glob["exit_code"] == 0 and "big.bin" in glob["output"]
    assert grep["exit_code"] == 0, grep["output"]
    assert bm25["exit_code"] == 0 and "small.txt" in bm25["output"]
    assert diff["exit_code"] == 0 and "(diff omitted: " in diff["output"], diff["output"]
    assert "new 300.0 MiB (314572800 bytes)" in diff["output"], diff["output"]


def test_q8_indexed_search_of_a_git_tree_reads_only_a_big_blobs_head(repos: dict[str, Path]) -> None:
    """The index builder reads at most its per-file cap (+1 byte) of a file: streamed from the blob."""
    probe = _probe(f"git:{repos['packed']}@HEAD", [("search", {"mode": "indexed", "query": "hello"})])
    # tantivy's writer arena is part of the growth (~30 MiB here); the blob is 300 MiB.
    assert probe["growth_mib"] < 128, probe["growth_mib"]
    (res,) = probe["results"]
    assert res["exit_code"] == 0 and "small.txt:1-2" in res["output"], res["output"]


@pytest.mark.parametrize("kind", ["git", "objectstore"])
def test_b1_b4_b6_small_files_read_exactly_as_from_a_directory(
    repos: dict[str, Path], agent: Agent, kind: str
) -> None:
    if kind == "git":
        other = agent.session(f"git:{repos['loose']}@HEAD~1")
    else:
        other = agent.session(ObjectStoreWorkspace("bucket", SMALL))
    local = agent.session(str(repos["dir"]))
    for args in SMALL_CALLS:
        if kind == "objectstore" and args.get("file_path") == "dir":
            continue  # a prefix is not an object: the store answers not_found, as a bucket does
        assert _view(other.tool("read", args)) == _view(local.tool("read", args)), args


def test_k8_a_big_blob_that_cannot_be_streamed_is_refused_naming_the_limit(
    repos: dict[str, Path], agent: Agent
) -> None:
    """A clone with ``--shared`` keeps its objects in another repository (alternates): such a blob
    (like a delta) cannot be streamed, so a big one is refused before it is loaded."""
    session = agent.session(f"git:{repos['shared']}@HEAD")
    res = session.tool("read", {"file_path": "big.bin", "limit": 1})
    assert res.exit_code == 1 and res.error_kind is not None
    assert res.error_kind["type"] == "invalid_argument" and res.error_kind["reason"] == "too_large"
    assert str(MAX_READ_BYTES) in res.output
    small = session.tool("read", {"file_path": "small.txt"})  # small ones still read
    assert small.exit_code == 0 and "hello" in small.output


def test_k8_read_bytes_refuses_over_the_limit_on_every_workspace_kind(repos: dict[str, Path]) -> None:
    big_object = ObjectStoreWorkspace("bucket", {"big.bin": bytes(MAX_READ_BYTES + 1)})
    for ws in (
        GitTreeWorkspace(repos["loose"], "HEAD"),
        LocalWorkspace(repos["dir"], writable=False),
        big_object,
    ):
        with pytest.raises(InvalidArgument) as info:
            ws.read_bytes("big.bin")
        assert info.value.data["reason"] == "too_large" and info.value.data["max_bytes"] == MAX_READ_BYTES
        assert str(MAX_READ_BYTES) in info.value.message


async def test_b1_cancel_stops_a_git_blob_scan(repos: dict[str, Path]) -> None:
    from kernel.errors import Cancelled
    from kernel.testing import make_context

    ctx = make_context(GitTreeWorkspace(repos["packed"], "HEAD"), tool_name="read")
    ctx.cancelled.set()
    with pytest.raises(Cancelled):
        await read.TOOL.run(ctx, read.TOOL.validate({"file_path": "big.bin", "offset": 2000}))


def test_b1_b3_git_diff_lists_a_big_work_tree_file_without_loading_it(tmp_path: Path) -> None:
    """libgit2 loads a work-tree file whole to diff it; over the limit it is named, not diffed."""
    repo = tmp_path / "wd"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "a.txt").write_text("hi\n")
    _git(repo, "add", "a.txt")
    _git(repo, "commit", "-qm", "a")
    _sparse(repo / "big.txt")  # untracked, 300 MiB, no disk
    probe = _probe(str(repo), [("git", {"command": "diff"})])
    assert probe["growth_mib"] < 64, probe["growth_mib"]  # was ~300 MiB
    (diff,) = probe["results"]
    assert diff["exit_code"] == 0
    assert "(diff omitted: the new side is 300.0 MiB, over the 8.0 MiB per-file limit" in diff["output"]
    assert f"new 300.0 MiB ({BIG} bytes)" in diff["output"]


def test_k8_b6_a_rewritten_object_is_refused_not_read(tmp_path: Path, agent: Agent) -> None:
    """A sandboxed command can rewrite a loose object in ``.git/objects``: a ``git:`` view pinned to a
    commit must not show the forged bytes. libgit2 checks the id of what it loads (blobs up to the
    read limit) and the stream checks it at the end (``tests/kernel/test_gitblob.py``); the call is a
    typed ``invalid_argument`` naming the file, not an internal error."""
    import hashlib
    import zlib

    repo = tmp_path / "r"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "a.txt").write_bytes(b"the committed text\n")
    _git(repo, "add", "a.txt")
    _git(repo, "commit", "-qm", "a")
    hex_id = hashlib.sha1(b"blob 19\x00the committed text\n").hexdigest()
    obj = repo / ".git" / "objects" / hex_id[:2] / hex_id[2:]
    obj.chmod(0o644)
    obj.write_bytes(zlib.compress(b"blob 19\x00the forged content\n"))
    res = agent.session(f"git:{repo}@HEAD").tool("read", {"file_path": "a.txt"})
    assert res.exit_code == 1 and res.error_kind is not None
    assert res.error_kind["type"] == "invalid_argument", res.error_kind
    assert "a.txt" in res.output and "forged" not in res.output
