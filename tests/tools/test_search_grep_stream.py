"""The Python grep engine matches a file run by run, with the whole file's answer (SPEC K-8, Q-2).

It used to hold ~6x a file of up to 64 MiB per grep (bytes, decoded text, RE2's UTF-8 copy): 194
MiB of peak RSS for a 64 MiB ASCII file, 400 MiB once a line holds an emoji, 800 MiB with
``content``. Now it holds runs of whole lines of about ``grep_stream.BLOCK_BYTES``. The answers must
not move: matches that span run boundaries, context lines across them, the last line without a
newline, BOMs, UTF-16, invalid UTF-8 and a NUL late in the file are checked against the old
whole-file algorithm (its primitives, still in ``grep_py``) and against ripgrep.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kernel.objectstore import ObjectStoreWorkspace
from kernel.testing import make_context
from kernel.workspace import LocalWorkspace
from tools.search import TOOL, grep_local, grep_py, grep_stream
from tools.search.bm25 import split_lines
from tools.search.dialect import required_literal, translate
from tools.search.grep import MAX_CONTENT_OUTPUT_BYTES, ContentCollector, GrepQuery, context_lines
from tools.search.grep_local import UTF16_BOMS
from tools.search.grep_py import compile_python, decode_text, matching_lines
from tools.search.grep_stream import TextChunks
from tools.search.linear_regex import compile_linear

REPO_ROOT = Path(__file__).resolve().parents[2]
needs_rg = pytest.mark.skipif(shutil.which("rg") is None, reason="rg is not installed")

# --- memory: a 64 MiB file under an address-space cap ---------------------------------------------

PROBE = """
import json, resource, sys, threading
from kernel.workspace import LocalWorkspace
from tools.search import grep
from tools.search.grep_py import PythonEngine

def status(key):
    return [int(l.split()[1]) >> 10 for l in open("/proc/self/status") if l.startswith(key)][0]

root, mode, context, cap_mib = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
ws = LocalWorkspace(root)
q = grep.build_query(ws, "needle", path="", include=None, case_sensitive=True, context=context)
base = status("VmHWM:")
cap = (status("VmSize:") + cap_mib) << 20  # address space: what is mapped now plus cap_mib
resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
guard = grep.Guard(600, threading.Event(), "grep")
scan, collector = grep.run_scan(ws, q, mode, PythonEngine(), guard)
out = collector.render("") if collector else ("", False, [])
print(json.dumps({"growth_mib": status("VmHWM:") - base, "counts": scan.counts,
                  "failed": scan.failed_reads, "shown": out[2], "cut": out[1]}))
"""
BIG_LINES = 650_000


def _big_file(path: Path) -> int:
    """A 64 MiB text file (the engine's whole-file limit): ASCII lines, an emoji line every 100 (the
    old text copy was then 4 bytes a character), an invalid UTF-8 line every 1000, no final newline."""
    plain = b"ordinary text line with words, digits 0123456789 and nothing to find here...\n"
    emoji = "needle \U0001f600 and more words to make it as long as the others ..\n".encode()
    broken = b"needle \xff\xfe invalid bytes in this line, which decode to replacement chars.\n"
    block = (plain * 99 + emoji) * 9 + plain * 99 + broken
    limit = grep_local.MAX_READ_BYTES
    with open(path, "wb") as fh:
        written = 0
        while written + len(block) <= limit - 100:
            fh.write(block)
            written += len(block)
        fh.write(b"the last line: needle, and no newline")
    assert os.path.getsize(path) <= limit
    return (written // len(block)) * 10 + 1


@pytest.mark.parametrize(("mode", "context"), [("count", 0), ("content", 2)])
def test_k8_q2_python_grep_of_a_64_mib_file_holds_runs_not_the_file(
    tmp_path: Path, mode: str, context: int
) -> None:
    """Under a 96 MiB address-space cap (the old engine died with MemoryError: it needed ~200-400
    MiB for this file), and with a peak RSS growth of a few MiB, not ~6x the file."""
    root = tmp_path / "ws"
    root.mkdir()
    expected = _big_file(root / "big.txt")
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(root), mode, str(context), "96"],
        env=env,
        cwd=str(REPO_ROOT),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    probe = json.loads(done.stdout.strip().splitlines()[-1])
    assert probe["counts"] == {"big.txt": expected} and probe["failed"] == 0, probe
    if mode == "content":
        assert probe["shown"] == ["big.txt"] and probe["cut"] is True
    assert probe["growth_mib"] < 48, probe


# --- exactness: runs at every size give the whole file's answer -----------------------------------

FILES: dict[str, bytes] = {
    "lines.txt": (
        b"alpha needle beta\n\nneedle\nxa\nb y\nxa\nby\n  indented needle  \n"
        + b"long " * 80
        + b"needle in a long line\nCRLF needle\r\n\r\nafter crlf\n"
        + b"".join(b"filler %d\n" % i for i in range(40))
        + b"tail needle"
    ),
    "newline_end.txt": b"one\nneedle two\n\nthree\nneedle\n",
    "bom8.txt": b"\xef\xbb\xbfneedle on the bom line\nsecond\nneedle $\n",
    "emoji.txt": "needle \U0001f600 x\n\U0001f600\n\u00e9t\u00e9 needle\nplain\n".encode() * 5,
    "invalid.txt": b"bad \xff\xfe needle\nok line\ntruncated \xe2\x82\ncaf\xc3\n\xed\xa0\x80 surrogate\nend\xc3",
    "utf16le.txt": "needle\r\nsecond \U0001f600 line\nneedle end".encode("utf-16"),
    "utf16be.txt": b"\xfe\xff" + "a needle\n\nxa\nb\nlast".encode("utf-16-be") + b"\x00",
    "utf16odd.txt": "needle odd\n".encode("utf-16-le").join([b"\xff\xfe", b"\x00\xd8"]) + b"x",
    "nul_late.txt": b"needle before a NUL\n" * 10 + b"\x00 binary after all\nneedle\n",
    "empty.txt": b"",
    "newlines.txt": b"\n\n\n",
}
PATTERNS = [
    "needle",
    "^needle",
    "needle$",
    "^$",
    "x*",
    r"a\sb",
    "(?s)a.b",
    r"[^q]+y",
    r"e\s*$",
    "\U0001f600",
    "bad \ufffd",
    r"\w+ \w+",
    "(?-m:^)needle",
    "(?i)NEEDLE",
]
SIZES = [(5, 3), (64, 17), (grep_local.HEAD_BYTES, grep_stream.BLOCK_BYTES)]


def _old_answer(files: dict[str, bytes], pattern: str, context: int) -> tuple[str, dict[str, int]]:
    """What the whole-file engine answered: one whole-text search over each file's decoded text."""
    dialect = translate(pattern)
    linear = compile_linear(dialect.rust, True)
    query = GrepQuery(dialect=dialect, case_sensitive=True, base="", base_is_file=False, include=None)
    rx: Any = linear if linear is not None else compile_python(query)
    literal = required_literal(dialect.python, True)
    collector = ContentCollector(MAX_CONTENT_OUTPUT_BYTES, context)
    counts: dict[str, int] = {}
    for path in sorted(files):
        data = files[path]
        if literal and literal.encode() not in data and data[:2] not in UTF16_BOMS:
            continue
        text = decode_text(data)
        if text is None:
            continue
        hits = matching_lines(text.encode("utf-8", "surrogatepass") if linear is not None else text, rx)
        if hits:
            counts[path] = len(hits)
            collector.add(path, context_lines(split_lines(text), hits, context))
    total = sum(counts.values())
    return collector.render(f"{total} match(es) in {len(counts)} file(s)")[0], counts


async def _grep(ws: Any, pattern: str, mode: str, context: int, engine: str = "python") -> Any:
    args: dict[str, Any] = {"mode": "grep", "query": pattern, "output_mode": mode}
    if mode == "content":
        args["context"] = context
    ctx = make_context(ws, services={"search_engine": engine}, timeout_s=60)
    res = await TOOL.run(ctx, TOOL.validate(args))
    assert res.exit_code == 0, res.output
    return res


@pytest.mark.parametrize("sizes", SIZES, ids=lambda s: f"head{s[0]}-block{s[1]}")
@pytest.mark.parametrize("context", [0, 2])
async def test_q2_runs_at_every_block_size_answer_as_the_whole_file_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sizes: tuple[int, int], context: int
) -> None:
    """Local and object-store reads, blocks of 3 bytes up to the real sizes: every pattern gives the
    old engine's content (matches spanning a boundary, context lines across it, the last line
    without a newline) and counts."""
    monkeypatch.setattr(grep_local, "HEAD_BYTES", sizes[0])
    monkeypatch.setattr(grep_py, "HEAD_BYTES", sizes[0])
    monkeypatch.setattr(grep_stream, "BLOCK_BYTES", sizes[1])
    root = tmp_path / "ws"
    root.mkdir()
    for name, data in FILES.items():
        (root / name).write_bytes(data)
    workspaces = [LocalWorkspace(root), ObjectStoreWorkspace("bucket", FILES)]
    for pattern in PATTERNS:
        expected, counts = _old_answer(FILES, pattern, context)
        for ws in workspaces:
            content = await _grep(ws, pattern, "content", context)
            assert content.output == expected, (pattern, type(ws).__name__)
            count = await _grep(ws, pattern, "count", 0)
            assert count.metadata["counts"] == [{"path": p, "count": n} for p, n in sorted(counts.items())]


@needs_rg
@pytest.mark.parametrize("context", [0, 3])
async def test_q2_runs_of_three_bytes_answer_as_ripgrep(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, context: int
) -> None:
    """The same files (valid UTF-8 ones: ripgrep never matches invalid bytes) against ``rg``."""
    monkeypatch.setattr(grep_local, "HEAD_BYTES", 5)
    monkeypatch.setattr(grep_py, "HEAD_BYTES", 5)
    monkeypatch.setattr(grep_stream, "BLOCK_BYTES", 3)
    root = tmp_path / "ws"
    root.mkdir()
    for name, data in FILES.items():
        if name not in ("invalid.txt", "utf16odd.txt"):
            (root / name).write_bytes(data)
    ws = LocalWorkspace(root)
    for pattern in ["needle", "^needle", "needle$", r"a\sb", "(?s)a.b", r"e\s*$", "\U0001f600", r"\w+ \w+"]:
        for mode in ("content", "count"):
            ours = await _grep(ws, pattern, mode, context)
            theirs = await _grep(ws, pattern, mode, context, engine="rg")
            assert ours.output == theirs.output, (pattern, mode)


@pytest.mark.parametrize("seed", range(6))
def test_q2_runs_decode_exactly_as_the_whole_file(seed: int) -> None:
    """Random bytes (newlines, invalid UTF-8, BOMs, UTF-16) cut into random blocks: the runs joined
    are the whole file's text, each run but the last ends a line, and NUL means binary either way."""
    rnd = random.Random(seed)
    alphabet = [
        b"a",
        b"\n",
        b"\r",
        b"\xff",
        b"\xc3",
        b"\xa9",
        b"\xe2\x82\xac",
        b"\xf0\x9f",
        b"\x98\x80",
        b" ",
    ]
    for _ in range(200):
        start = rnd.choice([b"", b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff"])
        data = start + b"".join(rnd.choice(alphabet) for _ in range(rnd.randrange(0, 80)))
        if rnd.random() < 0.1:
            data += b"\x00"
        cuts = (
            sorted(rnd.sample(range(1, len(data)), min(len(data) - 1, rnd.randrange(0, 12)))) if data else []
        )
        blocks = [data[i:j] for i, j in zip([0, *cuts], [*cuts, len(data)], strict=True)]
        for linear in (True, False):
            text = decode_text(data)
            chunks = TextChunks(blocks, linear, None, whole=False)
            runs = [r.hay for r in chunks]
            if text is None:
                assert chunks.binary, data
                continue
            assert not chunks.binary, data
            empty: Any = b"" if linear else ""
            nl: Any = b"\n" if linear else "\n"
            assert empty.join(runs) == (text.encode("utf-8", "surrogatepass") if linear else text), data
            assert all(r.endswith(nl) for r in runs[:-1]), (data, runs)
