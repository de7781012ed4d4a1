"""search mode ``indexed`` (SPEC Q-8, Q-7, Q-1): the persistent tantivy index under ``.a3s/index``.

Real tantivy indexes on real files, real git repositories, real subprocesses for the
multi-process and crash cases; no timing assertions.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from kernel.testing import make_context
from kernel.workspace import LocalWorkspace
from tools.git.testing import RepoBuilder
from tools.search.indexed import store
from tools.search.indexed.build import update_index
from tools.search.tool import available_modes, build_search_tool

ROOT = Path(__file__).resolve().parents[2]
SPEC = build_search_tool(("search", "read", "local"))
assert SPEC is not None
MANUAL = {"search_index": {"auto_update": False}}  # tests drive updates themselves


def write(root: Path, rel: str, text: str | bytes) -> None:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        p.write_bytes(text)
    else:
        p.write_text(text, encoding="utf-8")


async def search(ws: Any, args: dict[str, Any], services: dict[str, Any] | None = None) -> Any:
    spec = build_search_tool(ws.capabilities, services=services or MANUAL)
    assert spec is not None
    ctx = make_context(ws, services=services or MANUAL, timeout_s=120)
    res = await spec.run(ctx, spec.validate(args))
    assert res.exit_code == 0, res.output
    return res


def paths_of(res: Any) -> list[str]:
    return [r["path"] for r in res.metadata["results"]]


# --- exposure -------------------------------------------------------------------------------------


def test_q1_indexed_is_offered_for_local_and_git_workspaces_only() -> None:
    assert "indexed" in available_modes({"search", "read", "local"})[0]
    assert "indexed" in available_modes({"search", "read", "git"})[0]  # git:REPO@REV
    modes, missing = available_modes({"search", "read"})  # e.g. an object store
    assert "indexed" not in modes and "local directory or a git" in missing["indexed"]
    modes, missing = available_modes({"search", "read", "local"}, services={"search_index": False})
    assert "indexed" not in modes and "switched off" in missing["indexed"]
    spec = build_search_tool(("search", "read"))
    assert spec is not None
    with pytest.raises(Exception, match="local directory or a git"):
        spec.validate({"mode": "indexed", "query": "x"})


# --- the 20 MiB workspace ---------------------------------------------------------------------------


async def test_q8_indexed_finds_the_needle_that_bm25s_16_mib_cap_hides(tmp_path: Path) -> None:
    """Q-8: no 16 MiB cap — bm25 truncates a 20 MiB candidate set, indexed finds the last file."""
    line = "common payload alpha beta gamma delta epsilon zeta eta theta iota kappa lambda\n"
    block = line * (500_000 // len(line))  # ~500 KB: under bm25's 512 KiB per-file cap
    for i in range(41):
        write(tmp_path, f"data/part_{i:02d}.txt", block)
    write(tmp_path, "data/zz_last.txt", block + "common zebraNeedle lives here\n")
    total = sum(p.stat().st_size for p in (tmp_path / "data").iterdir())
    assert total > 20 * 1024 * 1024
    ws = LocalWorkspace(tmp_path)

    bm = await search(ws, {"mode": "bm25", "query": "common zebra needle"})
    assert bm.metadata["scan"]["truncated"] is True
    assert "data/zz_last.txt" not in paths_of(bm)

    report = update_index(ws)
    assert report.indexed_files == 42 and report.complete
    res = await search(ws, {"mode": "indexed", "query": "common zebra needle"})
    assert paths_of(res)[0] == "data/zz_last.txt"
    first = res.metadata["results"][0]
    assert res.output.splitlines()[2].startswith(f"1. data/zz_last.txt:{first['start_line']}-")
    assert "zebraNeedle lives here" in res.output
    assert res.metadata["algorithm"] == "tantivy_bm25" and res.metadata["index"]["ready"] is True


# --- incremental updates ---------------------------------------------------------------------------


async def test_q8_an_edit_reindexes_exactly_one_file_and_a_delete_disappears(tmp_path: Path) -> None:
    for i in range(30):
        write(tmp_path, f"src/mod_{i:02d}.py", f"def handler_{i}():\n    return 'value {i}'\n")
    write(tmp_path, "src/target.py", "def oldName():\n    pass\n")
    write(tmp_path, "src/doomed.py", "def doomedFunction():\n    pass\n")
    write(tmp_path, ".gitignore", "build/\n")
    write(tmp_path, "build/out.py", "def doomedFunction(): pass  # ignored\n")
    ws = LocalWorkspace(tmp_path)
    first = update_index(ws)
    assert first.indexed_files == 32 and first.removed_files == 0  # hidden .gitignore and build/ left out
    assert update_index(ws).indexed_files == 0  # nothing changed: nothing re-indexed

    write(tmp_path, "src/target.py", "def renamedFunction():\n    pass\n")
    report = update_index(ws)
    assert (report.indexed_files, report.removed_files) == (1, 0)
    assert report.unchanged_files == 31
    res = await search(ws, {"mode": "indexed", "query": "renamed"})
    assert paths_of(res) == ["src/target.py"]
    assert (await search(ws, {"mode": "indexed", "query": "oldName"})).metadata["results"] == []

    # deleted but not yet re-indexed: the freshness check drops the hit
    (tmp_path / "src/doomed.py").unlink()
    res = await search(ws, {"mode": "indexed", "query": "doomed"})
    assert paths_of(res) == [] and res.metadata["freshness"]["stale_dropped"] == 1
    report = update_index(ws)
    assert (report.indexed_files, report.removed_files) == (0, 1)
    res = await search(ws, {"mode": "indexed", "query": "doomed"})
    assert res.metadata["scan"]["matched_chunks"] == 0  # gone from the index itself


async def test_q7_a_changed_file_is_never_shown_stale_and_is_requeued(tmp_path: Path) -> None:
    write(tmp_path, "a.py", "def computeTotal():\n    return 1\n")
    ws = LocalWorkspace(tmp_path)
    update_index(ws)
    write(tmp_path, "a.py", "def somethingElse():\n    return 2\n")
    res = await search(ws, {"mode": "indexed", "query": "compute total"})
    assert res.metadata["results"] == [] and "changed since it was indexed" in res.output
    # with auto updates on, the stale file is queued and re-indexed in the background
    from tools.search.indexed.mode import wait_idle

    auto = {"search_index": {"auto_update": True, "refresh_interval_s": 3600}}
    await search(ws, {"mode": "indexed", "query": "compute total"}, services=auto)
    assert await wait_idle(ws, 60)
    res = await search(ws, {"mode": "indexed", "query": "something else"})
    assert paths_of(res) == ["a.py"]


async def test_q8_first_query_builds_in_the_background_and_reports_readiness(tmp_path: Path) -> None:
    for i in range(20):
        write(tmp_path, f"f{i}.md", f"chapter {i} about the quickSort algorithm\n")
    ws = LocalWorkspace(tmp_path)
    services = {"search_index": {"auto_update": True, "first_query_wait_s": 60}}
    res = await search(ws, {"mode": "indexed", "query": "quick sort", "limit": 3}, services)
    index = res.metadata["index"]
    assert set(index) >= {"state", "ready", "indexed_files", "pending_files", "indexed_chunks", "location"}
    assert index["ready"] and index["indexed_files"] == 20 and index["location"] == "local"
    assert len(res.metadata["results"]) == 3
    assert (tmp_path / ".a3s" / "index" / "fts" / "meta.json").is_file()


async def test_q8_output_filters_and_bm25_rules(tmp_path: Path) -> None:
    filler = "\n".join(f"filler line {i}" for i in range(75))
    write(tmp_path, "a/one.py", "\n".join([filler + "\ntoken bucket rate limiter\n" + "x\n" * 4] * 3))
    write(tmp_path, "a/two.py", "token bucket\n")
    write(tmp_path, "b/three.txt", "rate limiter token bucket\n")
    write(tmp_path, "cjk.txt", "连接池 配置\n")
    ws = LocalWorkspace(tmp_path)
    update_index(ws)
    res = await search(ws, {"mode": "indexed", "query": "token bucket rate limiter", "context": 0})
    assert paths_of(res).count("a/one.py") == 2  # at most two chunks per file
    scores = [r["score"] for r in res.metadata["results"]]
    assert scores == sorted(scores, reverse=True)
    assert res.metadata["source_anchors"][0] == "{path}:{start_line}-{end_line}".format(
        **res.metadata["results"][0]
    )
    assert res.metadata["query_terms"] == ["token", "bucket", "rate", "limiter"]
    assert "    76 | token bucket rate limiter" in res.output  # context 0: the best line only
    assert set(paths_of(await search(ws, {"mode": "indexed", "query": "token", "path": "a"}))) == {
        "a/one.py",
        "a/two.py",
    }
    assert paths_of(await search(ws, {"mode": "indexed", "query": "token", "include": "*.txt"})) == [
        "b/three.txt"
    ]
    assert paths_of(await search(ws, {"mode": "indexed", "query": "token", "path": "a/two.py"})) == [
        "a/two.py"
    ]
    assert paths_of(await search(ws, {"mode": "indexed", "query": "连接"})) == ["cjk.txt"]
    spec = build_search_tool(ws.capabilities, services=MANUAL)
    assert spec is not None
    ctx = make_context(ws, services=MANUAL)
    for bad, why in (
        ({"query": "!!!"}, "use mode 'grep'"),
        ({"query": "x", "limit": 26}, "limit"),
        ({"query": "x", "context": 9}, "context"),
        ({"query": "x", "case_sensitive": True}, "case_sensitive"),
    ):
        with pytest.raises(Exception, match=why):
            await spec.run(ctx, spec.validate({"mode": "indexed", **bad}))


# --- safe to share ----------------------------------------------------------------------------------


def test_q8_one_writer_at_a_time(tmp_path: Path) -> None:
    write(tmp_path, "a.txt", "hello\n")
    ws = LocalWorkspace(tmp_path)
    update_index(ws)
    directory = store.locate(ws).for_writing()
    with store.write_lock(directory), pytest.raises(store.IndexBusy):
        update_index(ws)


READER = textwrap.dedent(
    """
    import json, os, sys, time
    sys.path.insert(0, {root!r})
    from pathlib import Path
    from kernel.workspace import LocalWorkspace
    from tools.search.indexed import query, store
    ws = LocalWorkspace({ws!r}, writable=False)
    directory = store.locate(ws).existing()
    query.open_reader(directory)  # this process' handle exists before the writer's commits
    print("ready", flush=True)
    queries = errors = 0
    deadline = time.monotonic() + 120
    while not os.path.exists({done!r}) and time.monotonic() < deadline:
        try:
            found = query.search(ws, directory, ["shared", "marker"], base="", base_is_file=False,
                                 accept=lambda p: True, limit=10, check=lambda: None)
            for hit, lines, best in found.hits:
                assert any("shared marker" in line for line in lines)
            queries += 1
        except Exception as exc:
            errors += 1
            print("error", repr(exc), file=sys.stderr)
    final = query.search(ws, directory, ["final"], base="", base_is_file=False,
                         accept=lambda p: True, limit=25, check=lambda: None)
    print(json.dumps({{"queries": queries, "errors": errors, "final": len(final.hits)}}), flush=True)
    """
)


def test_q8_two_processes_query_while_a_third_updates(tmp_path: Path) -> None:
    ws_dir = tmp_path / "ws"
    for i in range(40):
        write(ws_dir, f"f{i:02d}.txt", f"shared marker round start file {i}\n" * 50)
    ws = LocalWorkspace(ws_dir)
    update_index(ws)
    done = tmp_path / "done"
    script = READER.format(root=str(ROOT), ws=str(ws_dir), done=str(done))
    readers = [
        subprocess.Popen(
            [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    try:
        for r in readers:
            assert r.stdout is not None and r.stdout.readline().strip() == "ready"
        for round_no in range(6):  # this process is the writer
            word = "final" if round_no == 5 else f"r{round_no}"
            for i in range(0, 40, 2):
                write(ws_dir, f"f{i:02d}.txt", f"shared marker round {word} file {i}\n" * 50)
            assert update_index(ws).indexed_files == 20
        done.write_text("1")
        outs = [r.communicate(timeout=120) for r in readers]
    finally:
        done.write_text("1")
        for r in readers:
            if r.poll() is None:
                r.kill()
    for out, err in outs:
        data = json.loads(out.strip().splitlines()[-1])
        assert data["errors"] == 0, err
        assert data["queries"] >= 1
        assert data["final"] == 20  # the long-lived reader sees the last commit


KILLED_WRITER = textwrap.dedent(
    """
    import os, signal, sys
    sys.path.insert(0, {root!r})
    from kernel.workspace import LocalWorkspace
    from tools.search.indexed import build, store
    build.COMMIT_BYTES = 1  # commit after every file
    mode = {mode!r}
    calls = 0
    if mode == "between":  # die after a tantivy commit, before its manifest is written
        real = store.write_manifest
        def dying(directory, manifest):
            global calls
            calls += 1
            if calls == 4:
                os.kill(os.getpid(), signal.SIGKILL)
            real(directory, manifest)
        store.write_manifest = dying
    def progress(done, total, nbytes):
        if mode == "mid" and done == 5:
            print("mid-update", flush=True)
            signal.pause()  # the test SIGKILLs us here, with uncommitted documents in the writer
    build.update_index(LocalWorkspace({ws!r}), progress=progress)
    """
)


@pytest.mark.parametrize("mode", ["mid", "between"])
def test_q8_a_killed_update_leaves_a_usable_index(tmp_path: Path, mode: str) -> None:
    ws_dir = tmp_path / "ws"
    for i in range(12):
        write(ws_dir, f"f{i:02d}.txt", f"kill test unique{i} content\n" * 20)
    script = KILLED_WRITER.format(root=str(ROOT), ws=str(ws_dir), mode=mode)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        if mode == "mid":
            assert proc.stdout is not None and proc.stdout.readline().strip() == "mid-update"
            proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == -signal.SIGKILL
    ws = LocalWorkspace(ws_dir)
    directory = store.locate(ws).existing()
    assert directory is not None
    from tools.search.indexed import query

    committed = query.search(
        ws,
        directory,
        ["kill"],
        base="",
        base_is_file=False,
        accept=lambda p: True,
        limit=25,
        check=lambda: None,
    )
    assert 3 <= len({h.path for h, _, _ in committed.hits}) < 12  # the commits before the kill, no more
    if mode == "between":
        assert store.read_manifest(directory) is None  # stale: rebuilt from the index on next update
    report = update_index(ws)  # the lock died with the writer; the update resumes
    assert report.complete and report.files == 12
    assert report.indexed_files == 12 - len({h.path for h, _, _ in committed.hits})
    final = query.search(
        ws,
        directory,
        ["kill"],
        base="",
        base_is_file=False,
        accept=lambda p: True,
        limit=25,
        check=lambda: None,
    )
    assert len({h.path for h, _, _ in final.hits}) == 12
    assert len(final.hits) == 12  # no file indexed twice


# --- git trees ---------------------------------------------------------------------------------------


async def test_q8_git_workspaces_get_one_index_per_tree(tmp_path: Path) -> None:
    from kernel.gittree import GitTreeWorkspace

    b = RepoBuilder(tmp_path / "repo")
    c1 = b.commit({"lib/a.py": "def alphaHandler():\n    pass\n", "README.md": "docs\n"})
    c2 = b.commit({"lib/a.py": "def betaHandler():\n    pass\n"})
    c3 = b.commit({}, message="message only: same tree as c2")
    w1, w2, w3 = (GitTreeWorkspace(b.path, c) for c in (c1, c2, c3))
    try:
        assert update_index(w1).indexed_files == 2
        assert update_index(w2).indexed_files == 2
        d1, d2 = store.locate(w1).existing(), store.locate(w2).existing()
        assert d1 is not None and d2 is not None and d1 != d2
        assert d1.parent == (b.path / ".a3s" / "index" / "git").resolve()
        assert store.locate(w3).existing() == d2  # same tree, same index
        again = update_index(w3)
        assert again.indexed_files == 0 and again.unchanged_files == 2  # a finished tree index is final
        assert paths_of(await search(w1, {"mode": "indexed", "query": "alpha handler"})) == ["lib/a.py"]
        assert paths_of(await search(w1, {"mode": "indexed", "query": "beta"})) == []
        res = await search(w2, {"mode": "indexed", "query": "beta handler"})
        assert paths_of(res) == ["lib/a.py"] and res.metadata["index"]["tree"] == str(
            b.repo[c2].tree.id  # type: ignore[attr-defined]
        )
    finally:
        for w in (w1, w2, w3):
            w.close()


def test_q8_unwritable_index_place_falls_back_to_the_user_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("A3S_INDEX_CACHE", str(tmp_path / "cache"))
    ws_dir = tmp_path / "ws"
    write(ws_dir, "a.txt", "fallback words\n")
    (ws_dir / ".a3s").mkdir()
    (ws_dir / ".a3s" / "index").write_text("not a directory")  # the primary place cannot be made
    ws = LocalWorkspace(ws_dir)
    report = update_index(ws)
    assert report.indexed_files == 1 and report.directory.startswith(str(tmp_path / "cache" / "local"))
    assert store.locate(ws).existing() == Path(report.directory)


def test_q8_a_symlinked_a3s_never_redirects_the_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("A3S_INDEX_CACHE", str(tmp_path / "cache"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    ws_dir = tmp_path / "ws"
    write(ws_dir, "a.txt", "words\n")
    (ws_dir / ".a3s").symlink_to(elsewhere)
    report = update_index(LocalWorkspace(ws_dir))
    assert report.indexed_files == 1
    assert not any(elsewhere.iterdir())  # nothing written through the planted symlink
    assert report.directory.startswith(str(tmp_path / "cache"))


# --- the CLI -------------------------------------------------------------------------------------------


def test_q8_cli_index_build_and_status(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from orchestrator.cli import main

    write(tmp_path, "a.py", "def alpha(): pass\n")
    write(tmp_path, "b.py", "def beta(): pass\n")
    runner = CliRunner()

    def run(*args: str) -> Any:
        return runner.invoke(main, list(args), catch_exceptions=False)

    out = run("index", "status", "--workspace", str(tmp_path))
    assert out.exit_code == 0 and "no index yet" in out.stdout
    out = run("index", "build", "--workspace", str(tmp_path), "--json")
    data = json.loads(out.stdout)
    assert {k: data[k] for k in ("indexed_files", "unchanged_files", "removed_files", "chunks")} == {
        "indexed_files": 2,
        "unchanged_files": 0,
        "removed_files": 0,
        "chunks": 2,
    }
    assert isinstance(data["seconds"], float)
    write(tmp_path, "b.py", "def gamma(): pass\n")
    status = json.loads(run("index", "status", "--workspace", str(tmp_path), "--json").stdout)
    assert status["exists"] and status["files"] == 2 and status["size_bytes"] > 0
    assert status["freshness"] == {"fresh": False, "added": 0, "changed": 1, "removed": 0}
    out = run("index", "build", "--workspace", str(tmp_path))
    assert (
        out.exit_code == 0 and "indexed_files 1  unchanged_files 1  removed_files 0  chunks 2" in out.stdout
    )
    out = run("index", "status", "--workspace", str(tmp_path / "missing"))
    assert out.exit_code != 0 and len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr


def test_q8_symlinks_and_special_files_are_never_indexed(tmp_path: Path) -> None:
    """B-6: the builder reads beneath the workspace without following symlinks; a FIFO never blocks."""
    outside = tmp_path / "outside"
    write(outside, "secret.txt", "outsideSecretToken\n")
    ws_dir = tmp_path / "ws"
    write(ws_dir, "inside.txt", "insideToken\n")
    (ws_dir / "link.txt").symlink_to(outside / "secret.txt")
    (ws_dir / "linkdir").symlink_to(outside)
    os.mkfifo(ws_dir / "pipe.txt")
    ws = LocalWorkspace(ws_dir)
    report = update_index(ws)
    assert report.indexed_files == 1 and report.files == 1
    directory = store.locate(ws).existing()
    assert directory is not None
    from tools.search.indexed import query

    found = query.search(
        ws, directory, ["outsidesecrettoken"], base="", base_is_file=False, accept=lambda p: True, limit=5,
        check=lambda: None,
    )  # fmt: skip
    assert found.matched == 0
