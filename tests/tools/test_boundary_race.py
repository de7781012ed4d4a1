"""No symlink race crosses the workspace boundary (issue 15 item 4; SPEC B-6).

A separate process swaps a workspace directory ``d`` with a symlink to an outside directory
(``renameat2(RENAME_EXCHANGE)``, atomically, in a tight loop) for ``RACE_SECONDS``, while threads
call ``read``, ``write``, ``edit``, ``patch``, ``ls`` and ``search`` (grep with the Python engine,
glob, bm25) on paths below ``d`` through the public session path, and the ``Workspace`` methods
directly. The outside directory mirrors the inside names and holds a canary in every file.

Asserted: no result, output or metadata ever contains the canary (0 outside reads); the outside
tree has exactly the files it had, byte-identical and with the same mtimes (0 files created
outside, 0 outside files modified). Also asserted, so the test cannot pass vacuously: the swapper
really swapped thousands of times and the tools really worked on the inside files meanwhile.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from kernel import SessionOptions
from kernel.errors import ToolError
from kernel.workspace import LocalWorkspace
from orchestrator import Agent

RACE_SECONDS = 6.0
CANARY = "OUTSIDE-CANARY-7f3a"

SWAPPER = textwrap.dedent(
    """
    import ctypes, os, sys, time
    libc = ctypes.CDLL(None, use_errno=True)
    RENAME_EXCHANGE = 2
    root, a, b, seconds = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    dfd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    fn = getattr(libc, "renameat2", None)
    if fn is None:
        def fn(d1, p1, d2, p2, flags):
            return libc.syscall(316, d1, p1, d2, p2, flags)
    pa, pb = a.encode(), b.encode()
    swaps = 0
    end = time.monotonic() + seconds
    print("ready", flush=True)
    while time.monotonic() < end:
        for _ in range(200):
            if fn(dfd, pa, dfd, pb, RENAME_EXCHANGE) != 0:
                sys.exit("renameat2 failed: errno %d" % ctypes.get_errno())
            swaps += 1
    # Leave the real directory in place.
    if os.path.islink(os.path.join(root, a)):
        fn(dfd, pa, dfd, pb, RENAME_EXCHANGE)
        swaps += 1
    print(swaps, flush=True)
    """
)


def _tree(root: Path, text: str) -> None:
    (root / "sub").mkdir(parents=True)
    (root / "f.txt").write_text(f"{text}\nneedle here\n")
    (root / "sub" / "g.txt").write_text(f"{text}\nAAA\n")
    (root / "sub" / "h.py").write_text(f"# {text}\nneedle = 1\nvalue = 0\n")


def _snapshot(d: Path) -> dict[str, tuple[bytes, int]]:
    out = {}
    for p in sorted(d.rglob("*")):
        st = p.lstat()
        out[str(p.relative_to(d))] = (p.read_bytes() if p.is_file() else b"<dir>", st.st_mtime_ns)
    return out


@pytest.fixture
def arena(tmp_path: Path) -> dict[str, Path]:
    outside = tmp_path / "outside"
    _tree(outside, CANARY)
    ws = tmp_path / "ws"
    _tree(ws / "d", "inside")
    os.symlink("../outside", ws / "l")
    return {"ws": ws, "outside": outside}


def test_b6_directory_symlink_swap_race_never_crosses_the_boundary(arena: dict[str, Path]) -> None:
    ws, outside = arena["ws"], arena["outside"]
    before = _snapshot(outside)
    leaks: list[str] = []
    ok: Counter[str] = Counter()
    calls: Counter[str] = Counter()
    stop = threading.Event()

    def check(kind: str, value: Any) -> None:
        calls[kind] += 1
        text = repr(value)
        if CANARY in text:
            leaks.append(f"{kind}: {text[:300]}")

    options = SessionOptions(artifact_store="memory", services={"search_engine": "python"})
    with Agent() as agent:
        session = agent.session(ws, options)

        def tool_loop(worker: int) -> None:
            i = 0
            plan: list[tuple[str, dict[str, Any]]] = [
                ("read", {"file_path": "d/f.txt"}),
                ("read", {"files": [{"path": "d/sub/g.txt"}, {"path": "d/sub/h.py"}]}),
                ("ls", {"path": "d/sub"}),
                ("write", {"file_path": f"d/sub/new-{worker}.txt", "content": "inside\n"}),
                ("write", {"file_path": "d/f.txt", "content": "inside\nneedle here\n"}),
                ("edit", {"file_path": "d/sub/h.py", "old_string": "value = 0", "new_string": "value = 0"}),
                (
                    "edit",
                    {"file_path": "d/sub/g.txt", "old_string": "AAA", "new_string": "AAA", "dry_run": True},
                ),
                (
                    "patch",
                    {"diff": "--- a/d/sub/h.py\n+++ b/d/sub/h.py\n@@ -2 +2 @@\n-needle = 1\n+needle = 1\n"},
                ),
                ("search", {"mode": "grep", "query": "needle|AAA|CANARY", "path": "d"}),
                ("search", {"mode": "glob", "query": "**/*", "path": "d"}),
                ("search", {"mode": "bm25", "query": "needle", "path": "d"}),
            ]
            while not stop.is_set():
                name, args = plan[i % len(plan)]
                i += 1
                res = session.tool(name, args)
                kind = f"{name}:{args.get('mode', '')}"
                check(kind, (res.output, res.metadata, res.error_kind))
                if res.exit_code == 0:
                    ok[kind] += 1

        def direct_loop() -> None:
            direct = LocalWorkspace(ws)

            def open_and_read() -> bytes:
                with direct.open_file("d/f.txt") as fh:
                    return fh.read()

            ops = [
                lambda: direct.read_bytes("d/sub/g.txt"),
                lambda: direct.list_dir("d/sub"),
                lambda: list(direct.walk_files("d")),
                lambda: direct.stat("d/sub/h.py"),
                open_and_read,
                lambda: direct.lstat("d/sub"),
            ]
            i = 0
            while not stop.is_set():
                op = ops[i % len(ops)]
                i += 1
                try:
                    check("direct", op())
                    ok["direct"] += 1
                except ToolError as exc:
                    check("direct", exc.message)

        swapper = subprocess.Popen(
            [sys.executable, "-c", SWAPPER, str(ws), "d", "l", str(RACE_SECONDS)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert swapper.stdout is not None
        assert swapper.stdout.readline().strip() == "ready"
        threads = [threading.Thread(target=tool_loop, args=(n,)) for n in range(3)]
        threads.append(threading.Thread(target=direct_loop))
        for t in threads:
            t.start()
        try:
            out, _ = swapper.communicate(timeout=RACE_SECONDS + 60)
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=60)
        assert swapper.returncode == 0, out
        swaps = int(out.strip().splitlines()[-1])

    assert not leaks, f"{len(leaks)} outside reads, e.g. {leaks[:3]}"
    assert _snapshot(outside) == before, "the outside tree changed"
    assert not (outside / "sub" / "new-0.txt").exists()
    # Not vacuous: the swapper ran hard and the tools kept working on the inside files meanwhile.
    assert swaps >= 1000, swaps
    assert sum(calls.values()) >= 200, calls
    for kind in ("read:", "write:", "ls:", "search:grep", "search:glob", "direct"):
        assert ok[kind] > 0, (kind, ok, calls)
    assert (ws / "d" / "sub" / "h.py").read_text().startswith("# inside")
