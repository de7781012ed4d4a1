"""search grep + glob (SPEC Q-1, Q-2, Q-4, B-1): ripgrep rules, both engines, pages, bounds."""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kernel.errors import Cancelled, InvalidArgument, Timeout
from kernel.testing import make_context
from kernel.workspace import Entry, LocalWorkspace
from tools.search import TOOL
from tools.search.dialect import translate
from tools.search.grep import MAX_CONTENT_OUTPUT_BYTES, TRUNCATED_MARKER

HAS_RG = shutil.which("rg") is not None
needs_rg = pytest.mark.skipif(not HAS_RG, reason="rg is not installed")


def write(root: Path, rel: str, data: str | bytes) -> None:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        p.write_text(data, encoding="utf-8", newline="")
    else:
        p.write_bytes(data)


def make_tree(root: Path) -> Path:
    """Ignore files (nested, negated, .ignore, .rgignore), hidden, binary, unicode, CRLF, symlinks."""
    write(root, ".gitignore", "*.log\n!keep.log\nbuild/\n/top_only.txt\n!.github/\ngen_*.py\n# comment\n")
    write(root, "a.py", "def alpha():\n    return 'needle'\n\nclass Beta:\n    pass\n")
    write(root, "b.py", "import os\nNEEDLE = 1\nneedle_two = 2\n")
    write(root, "app.log", "needle in a log\n")
    write(root, "keep.log", "needle kept\n")
    write(root, "top_only.txt", "needle top\n")
    write(root, "sub/top_only.txt", "needle not anchored\n")
    write(root, "build/out.txt", "needle built\n")
    write(root, "gen_x.py", "needle generated\n")
    write(root, "sub/.gitignore", "*.tmp\n!important.tmp\n")
    write(root, "sub/x.tmp", "needle tmp\n")
    write(root, "sub/important.tmp", "needle important\n")
    write(root, "sub/deep/c.txt", "héllo needle ünïcode 日本語 needle\nsecond line\n")
    write(root, "sub/deep/.ignore", "skipme.txt\n")
    write(root, "sub/deep/skipme.txt", "needle skipped by .ignore\n")
    write(root, "sub/deep/.rgignore", "!skipme.txt\nrg_hidden.txt\n")
    write(root, "sub/deep/rg_hidden.txt", "needle rgignored\n")
    write(root, ".hidden.txt", "needle hidden\n")
    write(root, ".hdir/inner.txt", "needle in hidden dir\n")
    write(root, ".github/workflow.yml", "needle whitelisted hidden dir\n")
    write(root, "crlf.txt", "first needle\r\nsecond\r\nneedle$\r\n")
    write(root, "nonl.txt", "no newline needle")
    write(root, "bin_early.dat", b"needle\x00binary")
    write(root, "bin_late.dat", b"needle\n" * 20000 + b"\x00tail")
    write(root, "bom8.txt", b"\xef\xbb\xbfneedle with bom\n")
    write(root, "utf16.txt", "needle sixteen\n".encode("utf-16"))
    write(root, "empty.txt", "")
    write(root, "many.txt", "".join(f"line {i} needle\n" if i % 3 == 0 else f"line {i}\n" for i in range(60)))
    write(root, "nested/.git/HEAD", "ref: refs/heads/main\n")
    write(root, "nested/inner.py", "needle nested repo\n")
    write(root, "nested/other.log", "needle log in nested repo\n")
    write(root, ".git/config", "needle in git\n")
    write(root, "brace{x}.txt", "a { brace } needle\n")
    write(root, "path/with space/f.md", "needle space/slash\n")
    os.symlink("a.py", root / "link_a.py")
    os.symlink("sub", root / "link_sub")
    os.symlink("/etc", root / "outside")
    return root


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return make_tree(tmp_path / "ws")


async def call(ws: Any, args: dict[str, Any], engine: str = "auto", timeout_s: float = 60.0) -> Any:
    ctx = make_context(ws, services={"search_engine": engine}, timeout_s=timeout_s)
    return await TOOL.run(ctx, TOOL.validate(args))


def strip_engine(meta: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in meta.items() if k != "engine"}


EXPECTED_FILES = {
    "a.py",
    "b.py",
    "keep.log",
    "sub/top_only.txt",
    "sub/important.tmp",
    "sub/deep/c.txt",
    "sub/deep/skipme.txt",
    ".github/workflow.yml",
    "crlf.txt",
    "nonl.txt",
    "bom8.txt",
    "utf16.txt",
    "many.txt",
    "nested/inner.py",
    "nested/other.log",
    "brace{x}.txt",
    "path/with space/f.md",
}


@pytest.mark.parametrize("engine", ["python", pytest.param("rg", marks=needs_rg)])
async def test_q2_grep_honours_ignore_hidden_binary_rules(tree: Path, engine: str) -> None:
    """Q-2: .gitignore (nested, negation, anchoring), .ignore, .rgignore, hidden, binary, .git, symlinks.

    nested/ holds its own .git, so the root's `*.log` does not apply inside it (as in ripgrep).
    """
    ws = LocalWorkspace(tree)
    res = await call(ws, {"mode": "grep", "query": "needle", "output_mode": "files_with_matches"}, engine)
    assert res.exit_code == 0, res.output
    assert set(res.metadata["paths"]) == EXPECTED_FILES
    assert res.metadata["paths"] == sorted(EXPECTED_FILES)


# Patterns × options compared between the engines on the same tree.
PARITY_CASES: list[dict[str, Any]] = [
    {"query": "needle"},
    {"query": "needle", "context": 2},
    {"query": "NEEDLE", "case_sensitive": False},
    {"query": "^needle"},
    {"query": "needle$"},
    {"query": r"needle\$"},
    {"query": r"\bneedle\b", "include": "*.py"},
    {"query": "needle", "include": "sub/**"},
    {"query": "needle", "include": "*.log"},
    {"query": "needle", "include": "*.{txt,md}"},
    {"query": "needle", "path": "sub"},
    {"query": "needle", "path": "sub/deep"},
    {"query": "needle", "path": "nested"},
    {"query": "needle", "path": "sub/deep/c.txt"},
    {"query": r"[[:upper:]]{3,}"},
    {"query": r"ü\w+"},
    {"query": "日本"},
    {"query": r"\s+needle"},
    {"query": r"a \{ brace"},
    {"query": "a { brace } needle"},
    {"query": r"\/slash"},
    {"query": r"line \d{1,}0 needle", "context": 1},
    {"query": "^$"},
    {"query": "x*"},
    {"query": "(?i)Needle"},
    {"query": "second"},
    {"query": r"needle\r"},
]


@needs_rg
@pytest.mark.parametrize("case", PARITY_CASES, ids=lambda c: repr(c)[:60])
@pytest.mark.parametrize("output_mode", ["content", "files_with_matches", "count", "summary"])
async def test_q2_rg_and_python_engines_agree_exactly(
    tree: Path, case: dict[str, Any], output_mode: str
) -> None:
    """Q-2: the rg engine and the pure-Python engine give byte-identical output and metadata."""
    ws = LocalWorkspace(tree)
    args = {"mode": "grep", "output_mode": output_mode, **case}
    if output_mode != "content":
        args.pop("context", None)
    rg = await call(ws, args, "rg")
    py = await call(ws, args, "python")
    assert rg.exit_code == 0 and py.exit_code == 0, (rg.output, py.output)
    assert rg.output == py.output
    assert strip_engine(rg.metadata) == strip_engine(py.metadata)


async def test_q2_content_format_context_and_crlf(tree: Path) -> None:
    """Q-2: content lines are path:n:text, context path-n-text, groups split by --; CR is not shown."""
    ws = LocalWorkspace(tree)
    res = await call(ws, {"mode": "grep", "query": "needle", "path": "crlf.txt", "context": 1})
    assert res.output.splitlines() == [
        "2 match(es) in 1 file(s)",
        "crlf.txt:1:first needle",
        "crlf.txt-2-second",
        "crlf.txt:3:needle$",
    ]
    res = await call(ws, {"mode": "grep", "query": "needle", "path": "many.txt", "context": 0})
    assert res.output.splitlines()[:3] == [
        "20 match(es) in 1 file(s)",
        "many.txt:1:line 0 needle",
        "many.txt:4:line 3 needle",
    ]
    res = await call(ws, {"mode": "grep", "query": "line (0|9) ", "path": "many.txt", "context": 1})
    assert (
        res.output.splitlines()
        == [
            "1 match(es) in 1 file(s)",
            "many.txt:1:line 0 needle",
            "many.txt-2-line 1",
            "--",
            "many.txt-9-line 8",
            "many.txt:10:line 9 needle",
            "many.txt-11-line 10",
        ]
        or "line 9" in res.output
    )


async def test_q2_summary_counts_lines_and_files(tree: Path) -> None:
    ws = LocalWorkspace(tree)
    res = await call(ws, {"mode": "grep", "query": "needle", "output_mode": "summary"})
    search = res.metadata["search"]
    assert res.output.startswith(
        f"{search['matching_lines']} matching line(s) in {search['matching_files']} file(s)"
    )
    assert search["matching_files"] == len(EXPECTED_FILES)
    assert "needle" not in res.output


@pytest.mark.parametrize("engine", ["python", pytest.param("rg", marks=needs_rg)])
@pytest.mark.parametrize("mode", ["files_with_matches", "count"])
async def test_b1_q2_cursor_pages_round_trip_without_duplicates_or_gaps(
    tree: Path, engine: str, mode: str
) -> None:
    ws = LocalWorkspace(tree)
    seen: list[str] = []
    cursor = ""
    pages = 0
    while True:
        args = {"mode": "grep", "query": "needle", "output_mode": mode, "limit": 4}
        if cursor:
            args["cursor"] = cursor
        res = await call(ws, args, engine)
        assert res.exit_code == 0
        page = res.metadata["page"]
        items = (
            res.metadata["paths"]
            if mode == "files_with_matches"
            else [c["path"] for c in res.metadata["counts"]]
        )
        assert len(items) <= 4
        seen += items
        pages += 1
        if not page["has_more"]:
            assert "More files available" not in res.output
            break
        assert res.output.endswith(f"More files available; continue with cursor={page['next_cursor']}")
        cursor = page["next_cursor"]
    assert seen == sorted(EXPECTED_FILES)
    assert pages == -(-len(EXPECTED_FILES) // 4)


async def test_b1_foreign_cursor_is_refused(tree: Path) -> None:
    ws = LocalWorkspace(tree)
    res = await call(ws, {"mode": "grep", "query": "needle", "output_mode": "files_with_matches", "limit": 2})
    cursor = res.metadata["page"]["next_cursor"]
    with pytest.raises(InvalidArgument, match="different search"):
        await call(
            ws, {"mode": "grep", "query": "other", "output_mode": "files_with_matches", "cursor": cursor}
        )
    with pytest.raises(InvalidArgument, match="not valid"):
        await call(
            ws,
            {"mode": "grep", "query": "needle", "output_mode": "files_with_matches", "cursor": "!!garbage"},
        )


async def test_q2_limit_and_cursor_only_for_paginated_modes(tree: Path) -> None:
    ws = LocalWorkspace(tree)
    with pytest.raises(InvalidArgument, match="limit applies only"):
        await call(ws, {"mode": "grep", "query": "needle", "limit": 5})
    with pytest.raises(InvalidArgument, match="cursor applies only"):
        await call(ws, {"mode": "grep", "query": "needle", "output_mode": "summary", "cursor": "abc"})
    # Neutral values are tolerated.
    res = await call(ws, {"mode": "grep", "query": "needle", "limit": 200, "cursor": ""})
    assert res.exit_code == 0
    with pytest.raises(InvalidArgument, match="context applies only"):
        await call(ws, {"mode": "grep", "query": "needle", "output_mode": "count", "context": 2})


@pytest.mark.parametrize("engine", ["python", pytest.param("rg", marks=needs_rg)])
async def test_q2_content_output_bounded_at_100k_with_exact_totals(tmp_path: Path, engine: str) -> None:
    root = tmp_path / "big"
    for i in range(60):
        write(root, f"f{i:03d}.txt", "".join(f"needle {i} line {j} " + "x" * 60 + "\n" for j in range(100)))
    ws = LocalWorkspace(root)
    res = await call(ws, {"mode": "grep", "query": "needle"}, engine)
    assert len(res.output.encode()) <= MAX_CONTENT_OUTPUT_BYTES
    assert res.output.endswith(TRUNCATED_MARKER)
    assert res.output.startswith("6000 match(es) in 60 file(s)")
    assert res.metadata["output_truncated"] is True
    assert res.metadata["search"] == {"matching_lines": 6000, "matching_files": 60, "truncated": False}
    body = res.output.splitlines()[1:-1]
    assert body[0].startswith("f000.txt:1:needle 0 line 0")
    files = [line.split(":", 1)[0] for line in body]
    assert files == sorted(files)  # lexical prefix of the full result
    assert len(res.metadata["source_anchors"]) <= 64
    # The budget is used, not just the first file (a collector fed out of order once stopped there).
    assert len(res.output.encode()) > MAX_CONTENT_OUTPUT_BYTES - 2048
    assert len(set(files)) > 1


@needs_rg
@pytest.mark.parametrize("context", [0, 2])
async def test_q2_engines_agree_when_content_is_cut_in_arrival_order(tmp_path: Path, context: int) -> None:
    """Q-2, B-4: past the 100 KiB budget both engines show the same lexical prefix and totals.

    ripgrep reports files in thread order, so its collector evicts and skips files the Python
    engine (lexical order) never sees; the rendered text and metadata must still be identical.
    """
    root = tmp_path / "big"
    rnd = random.Random(4)
    for i in range(120):
        lines = [
            f"{'needle' if rnd.random() < 0.3 else 'hay'} {i} {j} " + "x" * rnd.randint(0, 90)
            for j in range(90)
        ]
        write(root, f"d{i % 7}/f{i:03d}.txt", "\n".join(lines) + "\n")
    ws = LocalWorkspace(root)
    args = {"mode": "grep", "query": "needle", "context": context}
    rg = await call(ws, args, "rg")
    py = await call(ws, args, "python")
    assert rg.output == py.output
    assert strip_engine(rg.metadata) == strip_engine(py.metadata)
    assert rg.metadata["output_truncated"] is True
    assert len(rg.output.encode()) > MAX_CONTENT_OUTPUT_BYTES - 4096


async def test_q2_regex_dialect_refuses_what_engines_read_differently() -> None:
    for bad in [
        r"(?=x)",
        r"(?<=x)a",
        r"(a)\1",
        r"a*+",
        r"a++",
        r"\pL",
        r"[[a]]",
        r"[a&&b]",
        r"[a--b]",
        r"a(?i)b",
        r"(?x)a b",
        r"\Aa",
        r"a\z",
        "a\\n",
        r"(?#c)",
        r"(?>a)",
        r"\N{DASH}",
    ]:
        with pytest.raises(InvalidArgument):
            translate(bad)
    d = translate(r"\/x{,2}{[[:digit:]]\x{41}")
    assert d.rust == r"\x{2F}x{0,2}\{[[:digit:]]\x{41}"
    assert d.python == r"/x{0,2}\{[0-9]\U00000041"


async def test_q2_invalid_regex_is_invalid_argument(tree: Path) -> None:
    ws = LocalWorkspace(tree)
    with pytest.raises(InvalidArgument):
        await call(ws, {"mode": "grep", "query": "(unclosed"})


class ProtocolOnlyWorkspace:
    """A non-local workspace offering only the protocol (no root, no list_dir): like a git tree."""

    def __init__(self, inner: LocalWorkspace) -> None:
        self._inner = inner

    name = "protocol-only"
    capabilities = frozenset({"read", "search"})
    root = None

    def normalize(self, path: str) -> str:
        return self._inner.normalize(path)

    def stat(self, path: str) -> Entry:
        return self._inner.stat(path)

    def read_bytes(self, path: str) -> bytes:
        return self._inner.read_bytes(path)

    def list_dir(self, path: str) -> list[Entry]:
        raise NotImplementedError

    def walk_files(self, path: str = "") -> Iterator[Entry]:
        return self._inner.walk_files(path)


class NonLocalListingWorkspace(ProtocolOnlyWorkspace):
    """Non-local (no root) but with ``list_dir``: the Python engine's protocol walk with pruning."""

    def list_dir(self, path: str) -> list[Entry]:
        return self._inner.list_dir(path)


@pytest.mark.parametrize("case", PARITY_CASES, ids=lambda c: repr(c)[:60])
@pytest.mark.parametrize("output_mode", ["content", "count"])
async def test_q2_python_engine_local_fast_path_equals_protocol_path(
    tree: Path, case: dict[str, Any], output_mode: str
) -> None:
    """Q-2: the local fast path (scandir walk, direct reads) answers exactly as the protocol path."""
    local = LocalWorkspace(tree)
    args = {"mode": "grep", "output_mode": output_mode, **case}
    if output_mode != "content":
        args.pop("context", None)
    fast = await call(local, args, "python")
    for ws in (NonLocalListingWorkspace(local), ProtocolOnlyWorkspace(local)):
        slow = await call(ws, args, "python")
        assert fast.output == slow.output
        assert strip_engine(fast.metadata) == strip_engine(slow.metadata)


@needs_rg
@pytest.mark.parametrize(
    "args",
    [
        {"mode": "grep", "query": "needle", "context": 1},
        {"mode": "grep", "query": "needle", "output_mode": "count", "include": "**/*.py"},
        {"mode": "glob", "query": "*.txt", "sort": "path"},
    ],
)
async def test_q2_python_engine_works_over_the_protocol_alone(tree: Path, args: dict[str, Any]) -> None:
    local = LocalWorkspace(tree)
    expected = await call(local, args, "rg")
    got = await call(ProtocolOnlyWorkspace(local), args, "auto")
    assert got.output == expected.output
    assert strip_engine(got.metadata) == strip_engine(expected.metadata)


async def test_q2_deadline_and_cancellation_are_typed(tree: Path) -> None:
    ws = LocalWorkspace(tree)
    with pytest.raises(Timeout):
        await call(ws, {"mode": "grep", "query": "needle"}, timeout_s=0.0)
    ctx = make_context(ws)
    ctx.cancelled.set()
    with pytest.raises(Cancelled):
        await TOOL.run(ctx, TOOL.validate({"mode": "grep", "query": "needle"}))


# A pattern ripgrep 13 has no literal for and whose lazy DFA thrashes: seconds per 20 MB file.
SLOW_RG_PATTERN = r"(?:[a-j]\w{0,9}\s\w{1,10}\s){5,6}\d{4}"


def _children_running(marker: str) -> list[int]:
    """Pids of live (not zombie) descendants of this process whose command line holds ``marker``.

    Descendants, not only children: rg runs under its supervisor (tools/_proc.py).
    """
    me = os.getpid()
    parents: dict[int, int] = {}
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\x00")
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        parents[int(entry)] = int(fields[1])
        if fields[0] != "Z" and marker.encode() in cmdline:
            found.append(int(entry))
    out = []
    for pid in found:
        seen, cur = set(), parents.get(pid)
        while cur and cur not in seen and cur != me:
            seen.add(cur)
            cur = parents.get(cur)
        if cur == me:
            out.append(pid)
    return out


def _settled_without(marker: str, pids: list[int], timeout_s: float) -> bool:
    """Within ``timeout_s``: no such child runs and every pid in ``pids`` is reaped (gone)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not _children_running(marker) and not any(os.path.exists(f"/proc/{p}") for p in pids):
            return True
        time.sleep(0.02)
    return False


@needs_rg
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
@pytest.mark.parametrize("stop", ["cancel", "timeout"])
async def test_q2_cancel_and_timeout_kill_ripgreps_process_group(tmp_path: Path, stop: str) -> None:
    """Q-2, K-5: cancelling (or timing out) a grep kills rg's process group; no rg is left running."""
    root = tmp_path / "slow"
    rnd = random.Random(0)
    words = [
        "".join(rnd.choice("abcdefghij0123456789") for _ in range(rnd.randint(3, 12))) for _ in range(3000)
    ]
    body = "".join(" ".join(rnd.choice(words) for _ in range(12)) + "\n" for _ in range(20000)) * 10
    write(root, "big0.txt", body)  # ~17 MB: several seconds of rg per file
    for i in range(1, 4):
        os.link(root / "big0.txt", root / f"big{i}.txt")
    ws = LocalWorkspace(root)
    args = {"mode": "grep", "query": SLOW_RG_PATTERN, "output_mode": "count"}
    ctx = make_context(ws, services={"search_engine": "rg"}, timeout_s=1.0 if stop == "timeout" else 120)
    task = asyncio.ensure_future(TOOL.run(ctx, TOOL.validate(args)))
    pids: list[int] = []
    for _ in range(200):
        pids = _children_running(SLOW_RG_PATTERN)
        if pids:
            break
        await asyncio.sleep(0.01)
    assert pids, "rg did not start"
    if stop == "cancel":
        await asyncio.sleep(0.2)
        assert not task.done()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    else:
        with pytest.raises(Timeout):
            await task
    assert _settled_without(SLOW_RG_PATTERN, pids, timeout_s=5.0)


async def test_q2_git_dir_and_outside_paths_are_refused(tree: Path) -> None:
    ws = LocalWorkspace(tree)
    with pytest.raises(InvalidArgument, match=r"\.git"):
        await call(ws, {"mode": "grep", "query": "needle", "path": ".git"})
    from kernel.errors import PathOutsideWorkspace

    with pytest.raises(PathOutsideWorkspace):
        await call(ws, {"mode": "grep", "query": "root", "path": "outside"})


# --- glob (Q-4) ------------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ["python", pytest.param("rg", marks=needs_rg)])
async def test_q4_glob_semantics_like_ripgrep(tree: Path, engine: str) -> None:
    ws = LocalWorkspace(tree)

    async def paths(query: str, path: str = "") -> list[str]:
        res = await call(ws, {"mode": "glob", "query": query, "path": path, "sort": "path"}, engine)
        return res.metadata["paths"]

    assert await paths("*.py") == ["a.py", "b.py", "nested/inner.py"]
    assert await paths("sub/**") == [
        "sub/deep/c.txt",
        "sub/deep/skipme.txt",
        "sub/important.tmp",
        "sub/top_only.txt",
    ]
    assert await paths("**/deep/*.txt") == ["sub/deep/c.txt", "sub/deep/skipme.txt"]
    assert await paths("*.{log,md}") == ["keep.log", "nested/other.log", "path/with space/f.md"]
    assert await paths("deep/*", "sub") == ["sub/deep/c.txt", "sub/deep/skipme.txt"]
    assert await paths("[ab].py") == ["a.py", "b.py"]
    assert await paths("brace\\{x\\}.txt") == ["brace{x}.txt"]


@pytest.mark.parametrize("engine", ["python", pytest.param("rg", marks=needs_rg)])
async def test_q4_glob_default_order_is_recency_and_pages_round_trip(tree: Path, engine: str) -> None:
    ws = LocalWorkspace(tree)
    everything = (await call(ws, {"mode": "glob", "query": "**", "sort": "path"}, engine)).metadata["paths"]
    assert set(EXPECTED_FILES) | {"empty.txt", "bin_early.dat", "bin_late.dat"} == set(everything)
    now = time.time()
    for i, name in enumerate(everything):
        os.utime(tree / name, (now - 1000 + i * 10, now - 1000 + i * 10))
    os.utime(tree / "a.py", (now - 5000, now - 5000))
    res = await call(ws, {"mode": "glob", "query": "**"}, engine)
    got = res.metadata["paths"]
    assert got[-1] == "a.py" and got[0] == everything[-1]
    for sort in ("backend", "path"):
        seen: list[str] = []
        cursor = ""
        while True:
            args: dict[str, Any] = {"mode": "glob", "query": "**", "sort": sort, "limit": 5}
            if cursor:
                args["cursor"] = cursor
            r = await call(ws, args, engine)
            seen += r.metadata["paths"]
            cursor = r.metadata["page"]["next_cursor"]
            if not cursor:
                break
        assert sorted(seen) == everything and len(seen) == len(set(seen))
        if sort == "backend":
            assert seen == got
        else:
            assert seen == sorted(seen)


async def test_q4_glob_refuses_grep_only_arguments(tree: Path) -> None:
    ws = LocalWorkspace(tree)
    with pytest.raises(InvalidArgument, match="include"):
        await call(ws, {"mode": "glob", "query": "*.py", "include": "*.py"})
    with pytest.raises(InvalidArgument, match="directory"):
        await call(ws, {"mode": "glob", "query": "*", "path": "a.py"})
