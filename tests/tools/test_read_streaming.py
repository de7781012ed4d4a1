"""``read`` streams with bounded memory and keeps its exact semantics (issue 15 item 9; SPEC B-1, B-4).

The oracle below is the previous implementation (the whole file decoded and split); the streaming
reader must produce byte-identical output and metadata for every tricky input, and the batch
continuation must still resume exactly. Memory is measured with ``tracemalloc``: reading a window
of a 50 MB file (many lines, or one line) peaks at a few MiB, not at the file size.
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from kernel import SessionOptions
from orchestrator import Agent

MAX_LINE_BYTES = 2000
MAX_SINGLE_OUTPUT_BYTES = 98_304
BIG_BYTES = 50 * 1024 * 1024
PEAK_LIMIT = 8 * 1024 * 1024


def _oracle_lines(data: bytes) -> list[str]:
    lines = data.decode("utf-8", errors="replace").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def _oracle_render(n: int, line: str) -> str:
    if line.endswith("\r"):
        line = line[:-1]
    raw = line.encode("utf-8")
    if len(raw) > MAX_LINE_BYTES:
        line = raw[:MAX_LINE_BYTES].decode("utf-8", errors="ignore") + "…"
    return f"{n:>6}\t{line}\n"


def _oracle_single(data: bytes, offset: int, limit: int | None) -> tuple[str, dict[str, Any]] | str:
    lines = _oracle_lines(data)
    total = len(lines)
    requested = limit or 2000
    applied = min(requested, 2000)
    if offset > total:
        return f"Offset {offset} exceeds file length ({total} lines)"
    parts: list[str] = []
    size = 0
    end = offset
    for i in range(offset, min(total, offset + applied)):
        rendered = _oracle_render(i + 1, lines[i])
        if size + len(rendered.encode("utf-8")) > MAX_SINGLE_OUTPUT_BYTES and parts:
            break
        parts.append(rendered)
        size += len(rendered.encode("utf-8"))
        end = i + 1
    eof = end >= total
    if offset == total:
        parts = [f"(end of file: offset {offset} equals file length)\n"]
    elif not eof:
        parts.append(f"... (more lines available; continue with offset={end})\n")
    output = "".join(parts)
    return output, {
        "offset": offset,
        "requested_limit": requested,
        "applied_limit": applied,
        "returned_lines": end - offset,
        "next_offset": None if eof else end,
        "eof": eof,
        "total_lines": total,
        "limit_clamped": requested > 2000,
        "output_bytes": len(output.encode("utf-8")),
    }


def _inputs() -> dict[str, bytes]:
    euro = "€".encode()
    near = b"x" * 1999
    return {
        "empty": b"",
        "newline": b"\n",
        "two-newlines": b"\n\n",
        "no-final-newline": b"a\nb",
        "crlf": b"a\r\nb\r\n\r\n",
        "cr-only-end": b"x\r",
        "invalid-utf8-across-lines": b"ok\n\xe2\x82\nbad \xff\xfe tail\n\xf0\x9f\x98",
        "long-ascii": b"y" * 5000 + b"\nshort\n",
        "long-multibyte-at-cut": near + euro * 3 + b"\n" + b"z" * 1998 + euro + b"\r\n",
        "line-2000": b"a" * 2000 + b"\n",
        "line-2000-cr": b"a" * 2000 + b"\r\n",
        "line-2001": b"a" * 2001 + b"\n",
        "line-2008-cr": b"a" * 2007 + b"\r\n",
        "line-2009-cr": b"a" * 2008 + b"\r\n",
        "invalid-long": b"\xff" * 3000 + b"\n",
        "many-short": b"".join(b"line %d\n" % i for i in range(3000)),
        "wide-lines": b"".join(b"%d " % i + b"w" * 1500 + b"\n" for i in range(120)),
        "utf8-bom": b"\xef\xbb\xbfhello\n",
    }


@pytest.fixture
def session(tmp_path: Path) -> Any:
    with Agent() as agent:
        yield agent.session(tmp_path, SessionOptions(artifact_store="memory")), tmp_path


@pytest.mark.parametrize("name", list(_inputs()))
def test_b1_streamed_read_matches_the_whole_file_semantics(session: Any, name: str) -> None:
    s, root = session
    data = _inputs()[name]
    (root / "f.txt").write_bytes(data)
    total = len(_oracle_lines(data))
    offsets = sorted({0, 1, 2, total // 2, max(total - 1, 0), total, total + 1})
    for offset in offsets:
        for limit in (None, 1, 3, 2000, 5000):
            args: dict[str, Any] = {"file_path": "f.txt", "offset": offset}
            if limit is not None:
                args["limit"] = limit
            res = s.tool("read", args)
            expected = _oracle_single(data, offset, limit)
            if isinstance(expected, str):
                assert res.exit_code == 1 and expected in res.output, (name, offset, limit, res.output)
                continue
            assert res.exit_code == 0, (name, offset, limit, res.output)
            assert res.output == expected[0], (name, offset, limit)
            assert res.metadata["range"] == expected[1], (name, offset, limit)


@pytest.mark.parametrize("budget", [3000, 5000, 20_000, 98_304])
def test_b4_streamed_batch_continuation_is_exact(session: Any, budget: int) -> None:
    s, root = session
    inputs = _inputs()
    names = ["long-multibyte-at-cut", "many-short", "wide-lines", "crlf", "no-final-newline", "invalid-long"]
    for n in names:
        (root / f"{n}.txt").write_bytes(inputs[n])
    # Each file's first window (limit 2000 by default) is read exactly once across the pages.
    expected = {
        f"{n}.txt": [_oracle_render(i + 1, t) for i, t in enumerate(_oracle_lines(inputs[n]))][:2000]
        for n in names
    }
    got: dict[str, list[str]] = {p: [] for p in expected}
    files: list[dict[str, Any]] = [{"path": p} for p in expected]
    for _ in range(10_000):
        res = s.tool("read", {"files": files, "max_output_bytes": budget})
        assert res.exit_code == 0, res.output
        assert res.metadata["batch"]["output_bytes"] <= budget
        current = None
        for line in res.output.splitlines(keepends=True):
            if line.startswith("=== ") and line.endswith(" ===\n"):
                current = line[4:-5]
            elif current is not None and line[:6].strip().isdigit() and line[6:7] == "\t":
                got[current].append(line)
        cont = res.metadata["batch"]["continuation"]
        if not cont:
            break
        files = cont
    assert got == expected


def _peak(fn: Any) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_read_of_a_50mb_file_keeps_memory_bounded(session: Any) -> None:
    """Issue 15 item 9: a window of a 50 MB file is read without loading the file."""
    s, root = session
    line = b"0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKL\n"  # 52 bytes
    n_lines = BIG_BYTES // len(line)
    with open(root / "big.txt", "wb") as fh:
        block = line * 10_000
        for _ in range(n_lines // 10_000):
            fh.write(block)
    n_lines = (n_lines // 10_000) * 10_000
    with open(root / "one-line.txt", "wb") as fh:
        for _ in range(BIG_BYTES // (1 << 20)):
            fh.write(b"q" * (1 << 20))
    results: dict[str, Any] = {}

    def mid() -> None:
        results["mid"] = s.tool("read", {"file_path": "big.txt", "offset": n_lines // 2, "limit": 100})

    def last() -> None:
        results["last"] = s.tool("read", {"file_path": "big.txt", "offset": n_lines - 1})

    def single() -> None:
        results["single"] = s.tool("read", {"file_path": "one-line.txt"})

    def batch() -> None:
        results["batch"] = s.tool("read", {"files": [{"path": "big.txt"}, {"path": "one-line.txt"}]})

    for name, fn in [("mid", mid), ("last", last), ("single", single), ("batch", batch)]:
        peak = _peak(fn)
        assert peak < PEAK_LIMIT, (name, peak)
    mid_res = results["mid"]
    assert mid_res.exit_code == 0 and mid_res.metadata["range"]["total_lines"] == n_lines
    assert mid_res.metadata["range"]["returned_lines"] == 100
    assert mid_res.output.startswith(f"{n_lines // 2 + 1:>6}\t0123456789")
    assert results["last"].metadata["range"]["eof"] is True
    single_res = results["single"]
    assert single_res.metadata["range"]["total_lines"] == 1
    assert single_res.output == f"{1:>6}\t{'q' * 2000}…\n"
    assert results["batch"].metadata["batch"]["truncated"] is True
