"""``read`` bounds the work of one call, not only its output (SPEC B-1, B-4, K-8).

Counting lines is a pass over every byte, and a sparse or all-zero file costs no disk: one
``truncate -s 64G`` in the sandbox made ``read`` burn a core for 100 s. One call now scans at most
``MAX_SCAN_BYTES`` (batch: shared by all files); past it the result says what it could not know
(``total_lines`` None, ``metadata.scan.truncated``), keeps ``next_offset`` exact where a later call
can use it, and refuses an offset beyond reach with a typed error naming the limit and ``bash``.
Files are real (sparse files on disk; the 64 GiB one made by a sandboxed command).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from kernel.testing import make_context
from kernel.workspace import LocalWorkspace
from tests.tools.bash_sandbox_support import bash, governed, needs_bwrap
from tools import read

CAP = read.MAX_SCAN_BYTES
GIB = 1024**3


async def _read(root: Path, **args: Any) -> Any:
    ctx = make_context(LocalWorkspace(root), tool_name="read")
    try:
        return await read.TOOL.run(ctx, read.TOOL.validate(args))
    except Exception as exc:  # the kernel turns a ToolError into a result; keep the kind visible here
        return exc


def _sparse(path: Path, head: bytes, size: int, tail: bytes = b"") -> None:
    """``head``, then zeros (no disk) up to ``size``, then ``tail``."""
    with open(path, "wb") as fh:
        fh.write(head)
        fh.truncate(size)
        fh.seek(size)
        fh.write(tail)


@needs_bwrap
async def test_b1_read_of_a_64gib_sparse_file_made_in_the_sandbox_stops_at_the_scan_cap(tmp_path):
    made = await bash(governed(tmp_path), command="truncate -s 64G big && echo made")
    assert "made" in made.output and (tmp_path / "big").stat().st_size == 64 * GIB
    start = time.monotonic()
    res = await _read(tmp_path, file_path="big")
    elapsed = time.monotonic() - start
    assert elapsed < 20, elapsed  # was 100 s of one core (the whole file scanned for a newline)
    assert res.exit_code == 0
    first = res.output.splitlines()[0]
    assert first.startswith("     1\t\x00") and first.endswith("…")  # line 1 shown, cut as always
    assert "read stopped after scanning 256 MiB of this file, inside line 1" in res.output
    assert "bash" in res.output
    rng = res.metadata["range"]
    assert rng["returned_lines"] == 1 and rng["total_lines"] is None
    assert rng["next_offset"] is None and rng["eof"] is False  # nothing further is reachable
    assert res.metadata["scan"] == {"truncated": True, "scanned_bytes": CAP, "max_scan_bytes": CAP}


async def test_b1_window_before_the_cap_keeps_an_exact_next_offset(tmp_path):
    head = b"".join(b"line %d\n" % i for i in range(1, 1001))
    _sparse(tmp_path / "log", head, GIB)  # 1000 lines, then one 1 GiB line of zeros
    res = await _read(tmp_path, file_path="log", limit=10)
    assert res.output.splitlines()[:2] == ["     1\tline 1", "     2\tline 2"]
    assert "continue with offset=10. Total line count unknown" in res.output
    rng = res.metadata["range"]
    assert (rng["returned_lines"], rng["next_offset"], rng["eof"], rng["total_lines"]) == (
        10,
        10,
        False,
        None,
    )
    assert res.metadata["scan"]["truncated"] is True
    nxt = await _read(tmp_path, file_path="log", offset=rng["next_offset"], limit=2)
    assert nxt.output.splitlines()[:2] == ["    11\tline 11", "    12\tline 12"]


async def test_b1_cap_inside_the_window_returns_the_lines_before_it(tmp_path):
    head = b"".join(b"line %d\n" % i for i in range(1, 1001))
    _sparse(tmp_path / "log", head, GIB)
    res = await _read(tmp_path, file_path="log", offset=997, limit=10)
    lines = res.output.splitlines()
    assert lines[:3] == ["   998\tline 998", "   999\tline 999", "  1000\tline 1000"]
    assert lines[3].startswith("  1001\t\x00") and lines[3].endswith("…")
    assert "inside line 1001" in res.output
    rng = res.metadata["range"]
    assert (rng["returned_lines"], rng["next_offset"], rng["eof"]) == (4, None, False)


async def test_k8_offset_beyond_the_scan_cap_is_a_typed_error_naming_bash(tmp_path):
    _sparse(tmp_path / "far", b"a\n", CAP + 4096, b"\nb\nc\n")  # lines 3.. start past the cap
    res = await _read(tmp_path, file_path="far", offset=2)
    assert getattr(res, "kind", None) == "invalid_argument" or res.exit_code == 1
    message = str(getattr(res, "message", "") or res.output)
    assert "Offset 2 of far is beyond what read scans in one call (256 MiB" in message
    assert "bash" in message


async def test_b1_file_ending_exactly_at_the_cap_is_read_whole(tmp_path):
    _sparse(tmp_path / "edge", b"x", CAP - 1, b"\n")  # one line, exactly CAP bytes
    res = await _read(tmp_path, file_path="edge")
    rng = res.metadata["range"]
    assert (rng["total_lines"], rng["eof"], rng["next_offset"]) == (1, True, None)
    assert "scan" not in res.metadata


async def test_b4_batch_shares_one_scan_cap_and_defers_the_rest_to_the_continuation(tmp_path):
    (tmp_path / "small.txt").write_text("s1\ns2\n")
    for name in ("big1", "big2"):
        _sparse(tmp_path / name, f"{name} first\n".encode(), GIB)
    # limit=1: big1's window is complete before the cap; counting its lines then spends the cap.
    files = [{"path": "small.txt"}, {"path": "big1", "limit": 1}, {"path": "big2"}]
    start = time.monotonic()
    res = await _read(tmp_path, files=files)
    assert time.monotonic() - start < 20
    batch = res.metadata["batch"]
    assert "=== small.txt ===" in res.output and "=== big1 ===" in res.output
    assert "=== big2 ===" not in res.output  # the cap was spent on big1: big2 waits, no error
    assert batch["status"] == "partial" and batch["continuation"] == [{"path": "big2", "offset": 0}]
    assert res.metadata["scan"]["truncated"] is True and res.metadata["scan"]["scanned_bytes"] <= CAP
    big1 = next(f for f in res.metadata["files"] if f["path"] == "big1")
    assert big1["total_lines"] is None and big1["scan"]["truncated"] is True
    assert (
        "     1\tbig1 first\n... (more lines available; continue with offset=1. Total line count unknown"
        in (res.output)
    )
    again = await _read(tmp_path, files=batch["continuation"])
    assert "     1\tbig2 first" in again.output


async def test_b4_batch_file_cut_by_a_partly_spent_cap_is_retried_whole_next_call(tmp_path):
    (tmp_path / "small.txt").write_text("s1\n")
    _sparse(tmp_path / "zeros", b"", GIB)  # one line: the cap always falls inside it
    res = await _read(tmp_path, files=[{"path": "small.txt"}, {"path": "zeros"}])
    assert "=== zeros ===" not in res.output
    assert res.metadata["batch"]["continuation"] == [{"path": "zeros", "offset": 0}]
    again = await _read(tmp_path, files=res.metadata["batch"]["continuation"])
    assert again.output.startswith("=== zeros ===\n     1\t\x00") and "inside line 1" in again.output
    assert again.metadata["batch"]["continuation"] == []  # the rest is beyond reach: not looped on
    assert again.metadata["batch"]["continuation"] == []


async def test_b4_batch_offset_beyond_the_cap_is_an_error_segment_not_a_lost_batch(tmp_path):
    _sparse(tmp_path / "far", b"a\n", CAP + 4096, b"\nb\n")
    (tmp_path / "ok.txt").write_text("fine\n")
    res = await _read(tmp_path, files=[{"path": "far", "offset": 2}, {"path": "ok.txt"}])
    far = res.metadata["files"][0]
    assert far["success"] is False and far["error_kind"]["type"] == "invalid_argument"
    assert "beyond what read scans in one call" in far["error"]
    # The cap is spent on 'far', so ok.txt waits in the continuation and is read next call.
    assert res.metadata["batch"]["continuation"] == [{"path": "ok.txt", "offset": 0}]
    again = await _read(tmp_path, files=res.metadata["batch"]["continuation"])
    assert "     1\tfine" in again.output
