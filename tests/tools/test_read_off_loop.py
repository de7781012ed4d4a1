"""``read`` on a ``git:`` view does its blocking work off the event loop (SPEC B-1, K-6).

cb77be7 made a git blob of 1-64 MiB be inflated once and checked against its id inside
``GitTreeWorkspace.open_file``, and ``read`` called ``open_file`` on the event loop's thread: a
64 MiB blob (a few KiB in the object database: zeros from a sparse file) held the loop ~0.2 s per
read, and every other call and session on that loop stalled meanwhile (four concurrent reads:
~0.3 s without a tick). Opening and scanning a non-local workspace's file now runs in a worker
thread, which stops with the call.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import pytest

from kernel.gittree import SMALL_BLOB_BYTES, GitTreeWorkspace
from kernel.testing import make_context
from kernel.workspace import MAX_READ_BYTES, LocalWorkspace
from tests.tools.git_cli import git as _git
from tests.tools.loop_ticker import while_ticking
from tools import read

HEAD = b"".join(b"line %d\n" % i for i in range(1, 101))
MAX_GAP_S = 0.1


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``big.bin``: 100 short lines, then zeros up to ``MAX_READ_BYTES`` (sparse: no disk), committed
    as a loose object (so ``open_file`` checks its id in one streaming pass). The work tree keeps it
    for the directory comparison."""
    root = tmp_path_factory.mktemp("offloop") / "r"
    root.mkdir()
    _git(root, "init", "-q")
    with open(root / "big.bin", "wb") as fh:
        fh.write(HEAD)
        fh.truncate(MAX_READ_BYTES)
    assert SMALL_BLOB_BYTES < MAX_READ_BYTES
    _git(root, "add", "big.bin")
    _git(root, "commit", "-qm", "big")
    return root


async def _read_while_ticking(
    ws: object, args: dict[str, object], copies: int = 4
) -> tuple[list[Any], float]:
    """The results of ``copies`` concurrent reads (as sessions sharing a loop make them) and the
    longest gap a 10 ms ticker on the same loop saw meanwhile."""
    return await while_ticking(
        lambda: asyncio.gather(
            *(read.run(make_context(ws, tool_name="read"), read.Params(**args)) for _ in range(copies))  # type: ignore[arg-type]
        )
    )


@pytest.mark.parametrize(
    "args",
    [
        {"file_path": "big.bin", "offset": 98, "limit": 4},
        {"files": [{"path": "big.bin", "limit": 3}, {"path": "nope.txt"}]},
    ],
    ids=["single", "batch"],
)
async def test_b1_k6_a_git_view_read_of_a_64_mib_blob_keeps_the_loop_serving(
    repo: Path, args: dict[str, object]
) -> None:
    ws = GitTreeWorkspace(repo, "HEAD")
    try:
        started = time.monotonic()
        results, gap = await _read_while_ticking(ws, args)
        took = time.monotonic() - started
        opened = time.monotonic()
        ws.open_file("big.bin").close()  # the blocking part: inflate + id check of 64 MiB
        open_s = time.monotonic() - opened
    finally:
        ws.close()
    # The reads take well over the gap allowed: on the loop they would stall it that long.
    assert took > MAX_GAP_S and open_s * len(results) > MAX_GAP_S, (took, open_s)
    assert gap < MAX_GAP_S, f"the event loop stalled {gap * 1000:.0f} ms during {took * 1000:.0f} ms of reads"
    # Same answers as the directory holding the same file.
    local, _ = await _read_while_ticking(LocalWorkspace(repo), args, copies=1)
    for res in results:
        assert (res.exit_code, res.output, res.metadata) == (
            local[0].exit_code,
            local[0].output,
            local[0].metadata,
        )
        assert "\tline " in res.output


async def test_k6_a_cancelled_git_view_read_returns_at_once_and_its_worker_stops(repo: Path) -> None:
    """The awaiting task is cancelled (a deadline, a closed session) while the worker reads: the
    call ends within a tick, and the worker stops at its next chunk and closes the blob."""
    fds = len(os.listdir("/proc/self/fd"))
    ws = GitTreeWorkspace(repo, "HEAD")
    try:
        ctx = make_context(ws, tool_name="read")
        call = asyncio.create_task(read.run(ctx, read.Params(file_path="big.bin", offset=5000)))
        await asyncio.sleep(0.03)
        assert not call.done()
        started = time.monotonic()
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        assert time.monotonic() - started < MAX_GAP_S
        for _ in range(100):  # the abandoned worker ends on its own and closes the blob's file
            if len(os.listdir("/proc/self/fd")) <= fds + 1:  # + the repository's own handles
                break
            await asyncio.sleep(0.05)
    finally:
        ws.close()
    assert len(os.listdir("/proc/self/fd")) <= fds
