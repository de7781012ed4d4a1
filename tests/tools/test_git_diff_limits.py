"""The git tool's diff never builds a huge file's patch in memory (SPEC B-1, B-3, K-6, K-8).

libgit2 builds each file's whole patch before a page keeps ``max_bytes`` of it, at about its bytes
plus ~110 bytes per line: a sandboxed ``yes a | head -c 400M > big.txt`` then ``git diff`` took the
host process to 18.7 GiB (and past 22 GiB, killed, for the plain working-tree diff). A file whose
side is over the per-file byte or line limit is now listed with its sizes and a note, without a
patch; the others keep theirs. The memory probes run in a fresh interpreter with an address-space
ceiling, so a regression fails the test instead of the machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from kernel.errors import ToolError
from kernel.gittree import GitTreeWorkspace
from kernel.testing import make_context
from kernel.workspace import LocalWorkspace
from tools.git import TOOL
from tools.git.diff_limits import MAX_DIFF_FILE_BYTES, MAX_DIFF_FILE_LINES
from tools.git.testing import RepoBuilder

MIB = 1 << 20
BIG_MIB = 64  # far over any per-file limit, far under libgit2's 512 MiB "binary by size" threshold
PROBE_TIMEOUT_S = 120
# The probe's address space may grow this much past its warmed-up size: the old code needed GiBs.
PROBE_HEADROOM_BYTES = 1536 * MIB
# Peak RSS growth allowed for one diff call over 64 MiB files: the old code grew by ~3 GiB.
MAX_GROWTH_MIB = 24


def _write_lines(path: Path, mib: int) -> None:
    """``yes a | head -c {mib}M``: the cheapest file for a model to make, the dearest to diff."""
    chunk = b"a\n" * (MIB // 2)
    with open(path, "wb") as fh:
        for _ in range(mib):
            fh.write(chunk)


PROBE = """
    import json, resource, sys
    from orchestrator import Agent

    def hwm_mib():
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM"):
                    return int(line.split()[1]) // 1024

    def vm_bytes():
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmSize"):
                    return int(line.split()[1]) * 1024

    workspace, calls = sys.argv[1], json.loads(sys.argv[2])
    out = []
    with Agent() as agent:
        session = agent.session(workspace)
        session.tool("git", {"command": "log", "limit": 1})  # load pygit2, start the loop thread
        ceiling = vm_bytes() + int(sys.argv[3])
        resource.setrlimit(resource.RLIMIT_AS, (ceiling, ceiling))
        for args in calls:
            with open("/proc/self/clear_refs", "w") as fh:
                fh.write("5")  # reset VmHWM to the current RSS: each call is measured alone
            before = hwm_mib()
            res = session.tool("git", args)
            out.append({
                "growth_mib": hwm_mib() - before,
                "error": res.error_kind,
                "output": res.output[:4000],
                "metadata": {k: v for k, v in res.metadata.items() if not k.startswith("a3s_")},
            })
    print(json.dumps(out))
"""


def _probe(workspace: str, calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    env = dict(os.environ, MALLOC_ARENA_MAX="2")  # fewer reserved arenas: a tighter, steadier ceiling
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent(PROBE),
            workspace,
            json.dumps(calls),
            str(PROBE_HEADROOM_BYTES),
        ],
        capture_output=True,
        text=True,
        timeout=PROBE_TIMEOUT_S,
        cwd=Path(__file__).resolve().parents[2],
        env=env,
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-3000:])
    results: list[dict[str, Any]] = json.loads(done.stdout.strip().splitlines()[-1])
    return results


@pytest.fixture(scope="module")
def big_repo(tmp_path_factory: pytest.TempPathFactory) -> RepoBuilder:
    """HEAD~1 → HEAD grows ``big.txt`` to 64 MiB; the work tree then rewrites it (5 bytes more),
    adds an untracked 64 MiB ``huge.txt`` and edits ``small.txt``."""
    b = RepoBuilder(tmp_path_factory.mktemp("bigdiff") / "repo")
    b.commit({"small.txt": "one\n", "big.txt": "tiny\n"}, "init")
    _write_lines(b.path / "big.txt", BIG_MIB)  # staged by hand: never held in this process
    index = b.repo.index
    index.add("big.txt")
    index.write()
    b.commit({"small.txt": "two\n"}, "big")
    _write_lines(b.path / "big.txt", BIG_MIB)
    with open(b.path / "big.txt", "ab") as fh:
        fh.write(b"tail\n")
    _write_lines(b.path / "huge.txt", BIG_MIB)
    b.write({"small.txt": "three\n"})
    return b


@pytest.fixture(scope="module")
def probed(big_repo: RepoBuilder) -> dict[str, dict[str, Any]]:
    work = _probe(
        str(big_repo.path),
        [
            {"command": "diff"},
            {"command": "diff", "path": "small.txt"},
            {"command": "diff", "target": "HEAD~1"},
        ],
    )
    view = _probe(f"git:{big_repo.path}@HEAD", [{"command": "diff", "target": "HEAD~1"}])
    return {"workdir": work[0], "filtered": work[1], "workdir_vs_old": work[2], "commits": view[0]}


def _entry(result: dict[str, Any], path: str) -> dict[str, Any]:
    return next(f for f in result["metadata"]["files"] if f["path"] == path)


@pytest.mark.parametrize("case", ["workdir", "filtered", "workdir_vs_old", "commits"])
def test_b3_git_diff_peak_memory_stays_far_below_a_huge_files_size(
    probed: dict[str, dict[str, Any]], case: str
) -> None:
    result = probed[case]
    assert result["error"] is None, result["error"]
    assert result["growth_mib"] < MAX_GROWTH_MIB, (case, result["growth_mib"])


def test_b3_git_diff_names_a_huge_working_tree_file_as_omitted_with_its_sizes(
    probed: dict[str, dict[str, Any]],
) -> None:
    result = probed["workdir"]
    meta, out = result["metadata"], result["output"]
    big, huge, small = _entry(result, "big.txt"), _entry(result, "huge.txt"), _entry(result, "small.txt")
    assert big["diff_omitted"] is True and big["status"] == "M"
    assert big["before_bytes"] == BIG_MIB * MIB and big["after_bytes"] == BIG_MIB * MIB + 5
    assert big["additions"] is None and big["deletions"] is None
    assert huge["diff_omitted"] is True and huge["status"] == "?"
    assert huge["before_bytes"] == 0 and huge["after_bytes"] == BIG_MIB * MIB
    # The small file in the same diff keeps its patch and its counts.
    assert small["diff_omitted"] is False and small["additions"] == 1 and small["deletions"] == 1
    assert "-two\n+three\n" in out
    assert meta["diff_omitted"] is True and meta["files_omitted"] == 2 and meta["files_changed"] == 3
    assert meta["insertions"] == 1 and meta["deletions"] == 1  # counted over the patched files only
    # The note says what happened, with both sizes, and where to look instead.
    assert "diff --git a/big.txt b/big.txt\n(diff omitted: " in out
    assert "64.0 MiB" in out and f"{BIG_MIB * MIB + 5} bytes" in out
    assert f"`git diff --numstat {meta['old']} -- big.txt`" in out
    assert "diff --git a/huge.txt b/huge.txt\n(diff omitted: " in out and "untracked" in out


def test_b3_git_diff_between_commits_sizes_blobs_from_their_headers(
    probed: dict[str, dict[str, Any]],
) -> None:
    result = probed["commits"]
    big, small = _entry(result, "big.txt"), _entry(result, "small.txt")
    assert big["diff_omitted"] is True and big["before_bytes"] == 5 and big["after_bytes"] == BIG_MIB * MIB
    assert small["diff_omitted"] is False and small["before_bytes"] == 4
    assert "+two" in result["output"]
    assert "git diff --numstat" not in result["output"]  # a git: view offers no bash to run it in
    assert "(diff omitted: " in result["output"]


def test_b1_git_diff_path_filter_never_builds_the_other_files_patch(
    probed: dict[str, dict[str, Any]],
) -> None:
    result = probed["filtered"]
    assert result["metadata"]["files_changed"] == 1 and result["metadata"]["diff_omitted"] is False
    assert "+three" in result["output"] and "big.txt" not in result["output"]


# --- the line limit, in this process: a few MiB of very short lines ------------------------------------


@pytest.fixture
def builder(tmp_path: Path) -> RepoBuilder:
    b = RepoBuilder(tmp_path / "repo")
    b.commit({"a.txt": "alpha\n"}, "initial")
    return b


async def _git(workspace: LocalWorkspace | GitTreeWorkspace, timeout_s: float = 60.0, **args: Any) -> Any:
    ctx = make_context(workspace, tool_name="git", timeout_s=timeout_s)
    return await TOOL.run(ctx, TOOL.validate(args))


async def test_b3_git_diff_omits_a_file_of_too_many_short_lines_and_keeps_long_lined_ones(
    builder: RepoBuilder,
) -> None:
    short = b"a\n" * (3 * MIB // 2)  # 3 MiB, 1.5 million lines: ~160 MiB to build its patch
    long_lines = "".join(f"    value_{i} = compute(value_{i - 1}, {i})  # step\n" for i in range(40_000))
    builder.commit({"b_short.txt": "s\n", "z_long.txt": "l\n"}, "both")
    builder.write({"b_short.txt": short, "z_long.txt": long_lines, "a.txt": "alpha2\n"})
    result = await _git(LocalWorkspace(builder.path), command="diff", max_bytes=102_400)
    files = {f["path"]: f for f in result.metadata["files"]}
    assert files["b_short.txt"]["diff_omitted"] is True and files["b_short.txt"]["after_bytes"] == len(short)
    note = result.output.split("diff --git a/b_short.txt b/b_short.txt\n", 1)[1].split("\n", 1)[0]
    assert note.startswith("(diff omitted: the new side has more than ") and "line limit" in note
    assert files["z_long.txt"]["diff_omitted"] is False and files["z_long.txt"]["additions"] == 40_000
    assert files["a.txt"]["diff_omitted"] is False and "+alpha2" in result.output


async def test_b1_git_diff_paging_stays_exact_across_an_omitted_file(builder: RepoBuilder) -> None:
    builder.write({"a.txt": "".join(f"a{i}\n" for i in range(300))})
    _write_lines(builder.path / "b_big.txt", 9)
    builder.write({"c.txt": "".join(f"c{i}\n" for i in range(300))})
    ws = LocalWorkspace(builder.path)
    whole = await _git(ws, command="diff", max_bytes=102_400)
    assert whole.metadata["has_more"] is False and whole.metadata["files_omitted"] == 1
    pieces, offset = [], 0
    while True:
        page = await _git(ws, command="diff", byte_offset=offset, max_bytes=512)
        if not page.metadata["has_more"]:
            pieces.append(page.output)
            break
        pieces.append(page.output.rsplit("\n... (more diff available", 1)[0] + "\n")
        offset = page.metadata["next_byte_offset"]
    assert "".join(pieces) == whole.output


# --- deadline -----------------------------------------------------------------------------------------


async def test_k6_git_diff_of_many_medium_files_stops_at_the_deadline(builder: RepoBuilder) -> None:
    # 63 files (the old loop looked at the deadline once per 64 patches), each under every limit
    # (2 MiB, 99,000 lines) and costing tens of milliseconds to patch: seconds of work for 0.5 s.
    body = b"".join(b"line %014d\n" % i for i in range(99_000))
    for i in range(63):
        (builder.path / f"m{i:02}.txt").write_bytes(body)
    started = time.monotonic()
    with pytest.raises(ToolError) as info:
        await _git(LocalWorkspace(builder.path), timeout_s=0.5, command="diff")
    assert info.value.kind == "timeout" and info.value.data["op"] == "git"
    assert time.monotonic() - started < 1.5


def test_b3_git_description_states_the_per_file_diff_limits() -> None:
    # tool.py does not import pygit2 (nor diff_limits) before the first call: its text is checked here.
    assert f"{MAX_DIFF_FILE_BYTES // MIB} MiB or {MAX_DIFF_FILE_LINES:,} lines" in TOOL.description
