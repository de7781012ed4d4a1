"""``ls`` on a ``git:`` view pages a huge tree off the event loop (SPEC B-1, K-6).

A sandboxed command can commit a directory of hundreds of thousands of files. ``ls`` on a ``git:``
view used to call ``list_dir`` on the event loop's thread: every entry built and sized (an object
header each) to return a page of 200 — 16 s for 300,000 entries here, with every other call and
session on that loop stalled meanwhile. The page is now taken in a worker thread that keeps only
the entries it returns and sizes only those, and the call's deadline and cancel stop it.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pygit2
import pytest

from kernel.errors import Timeout
from kernel.gittree import GitTreeWorkspace
from kernel.testing import make_context
from tests.tools.loop_ticker import while_ticking
from tools import ls

ENTRIES = 60_000
MAX_GAP_S = 0.1


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One commit whose root holds ``ENTRIES`` files (one blob shared; names in reverse creation
    order do not matter: git sorts a tree) plus a ``sub/`` directory and a ``.a3s`` entry."""
    root = tmp_path_factory.mktemp("lsgit") / "r"
    repo = pygit2.init_repository(str(root))
    blob = repo.create_blob(b"x\n")
    sub = repo.TreeBuilder()
    sub.insert("inner.txt", blob, pygit2.GIT_FILEMODE_BLOB)
    top = repo.TreeBuilder()
    for i in range(ENTRIES):
        top.insert(f"f{i:06d}.txt", blob, pygit2.GIT_FILEMODE_BLOB)
    top.insert("sub", sub.write(), pygit2.GIT_FILEMODE_TREE)
    top.insert(".a3s", blob, pygit2.GIT_FILEMODE_BLOB)
    sig = pygit2.Signature("t", "t@example.com", 0, 0)
    repo.create_commit("HEAD", sig, sig, "many files", top.write(), [])
    return root


async def _ls_while_ticking(ws: GitTreeWorkspace, params: ls.Params, copies: int = 3) -> tuple[list, float]:
    return await while_ticking(
        lambda: asyncio.gather(
            *(ls.run(make_context(ws, tool_name="ls"), params) for _ in range(copies))  # type: ignore[arg-type]
        )
    )


async def test_b1_k6_ls_of_a_huge_git_tree_pages_it_off_the_event_loop(repo: Path) -> None:
    """B-1/K-6: three concurrent ``ls`` of a 60,000-entry tree: each answers the exact first page,
    then the next page by cursor, while a ticker on the same loop never waits 100 ms (on main
    the loop stalled for the whole listing, seconds)."""
    ws = GitTreeWorkspace(repo, "HEAD")
    try:
        results, gap = await _ls_while_ticking(ws, ls.Params(path="", limit=5))
        assert gap < MAX_GAP_S, f"the event loop stalled {gap * 1000:.0f} ms"
        for res in results:
            assert res.exit_code == 0, res.output
            names = [e["name"] for e in res.metadata["entries"]]
            assert names == [f"f{i:06d}.txt" for i in range(5)]  # sorted; .a3s never listed
            assert res.metadata["entries"][0] == {"name": "f000000.txt", "kind": "file", "size": 2}
        cursor = results[0].metadata["page"]["next_cursor"]
        tail = await ls.run(
            make_context(ws, tool_name="ls"),  # type: ignore[arg-type]
            ls.Params(path="", limit=3, cursor=ls.encode_cursor(f"f{ENTRIES - 2:06d}.txt")),
        )
        assert cursor and [e["name"] for e in tail.metadata["entries"]] == [f"f{ENTRIES - 1:06d}.txt", "sub"]
        assert tail.metadata["entries"][1]["kind"] == "dir" and tail.metadata["page"]["next_cursor"] is None
        inner = await ls.run(make_context(ws, tool_name="ls"), ls.Params(path="sub"))  # type: ignore[arg-type]
        assert [e["name"] for e in inner.metadata["entries"]] == ["inner.txt"]
    finally:
        ws.close()


def test_b1_k6_a_git_tree_page_stops_at_the_deadline(repo: Path) -> None:
    """K-6: the page's scan asks its ``check`` as it goes: a deadline that has passed stops it
    with ``timeout`` instead of listing on."""
    ws = GitTreeWorkspace(repo, "HEAD")
    calls = 0

    def check() -> None:
        nonlocal calls
        calls += 1
        raise Timeout("ls timed out while listing the directory", op="ls")

    try:
        started = time.monotonic()
        with pytest.raises(Timeout):
            ws.list_page("", "", 10, check)
        assert calls == 1 and time.monotonic() - started < 5
    finally:
        ws.close()
