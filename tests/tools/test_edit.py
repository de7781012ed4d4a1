"""``edit``: exact replacement, counts, dry run, diagnostics, encodings, CAS (SPEC B-3, B-5, B-6; REFERENCE 4.5)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from kernel.errors import ToolError
from kernel.result import ToolResult
from kernel.testing import make_context
from kernel.workspace import LocalWorkspace
from tools import _fileio
from tools.edit import TOOL


async def _edit(root: Path, *, session_id: str = "s-1", **args: Any) -> ToolResult:
    """Run the tool body as the kernel would: a raised ToolError becomes an exit_code=1 result."""
    ctx = make_context(LocalWorkspace(root), tool_name="edit")
    ctx.session_id = session_id
    try:
        out = await TOOL.run(ctx, TOOL.validate(args))
    except ToolError as exc:
        return ToolResult.failure("edit", exc)
    return out if isinstance(out, ToolResult) else ToolResult.success("edit", out)


def edit(root: Path, *, session_id: str = "s-1", **args: Any) -> ToolResult:
    return asyncio.run(_edit(root, session_id=session_id, **args))


def snap(path: Path) -> tuple[bytes, int, int]:
    st = path.stat()
    return path.read_bytes(), st.st_mtime_ns, st.st_mode


@pytest.fixture()
def src(tmp_path: Path) -> Path:
    p = tmp_path / "app.py"
    p.write_text("import os\n\ndef main():\n    return os.path.join(os.getcwd(), 'x')\n")
    return p


def test_b5_edit_replaces_the_unique_match_and_reports_change_metadata(tmp_path: Path, src: Path) -> None:
    before = src.read_text()
    res = edit(tmp_path, file_path="app.py", old_string="os.getcwd()", new_string="os.getpid()")
    assert res.ok, res.output
    assert src.read_text() == before.replace("getcwd", "getpid")
    m = res.metadata
    assert m["file_path"] == "app.py" and m["before"] == before and m["after"] == src.read_text()
    assert m["replacement_count"] == 1 and m["dry_run"] is False
    assert m["expected_replacements"] is None and m["max_replacements"] is None
    assert m["before_bytes"] == len(before) and m["after_bytes"] == len(src.read_bytes())
    assert len(m["before_sha256"]) == 64 and m["before_sha256"] != m["after_sha256"]
    assert (
        "-    return os.path.join(os.getcwd(), 'x')\n+    return os.path.join(os.getpid(), 'x')\n"
        in m["diff"]
    )
    assert m["diff"].startswith("--- a/app.py\n+++ b/app.py\n")
    assert res.output.startswith("Replaced 1 occurrence(s) in app.py")
    assert not [
        p for p in tmp_path.iterdir() if p.name.endswith((_fileio.TEMP_SUFFIX, _fileio.BACKUP_SUFFIX))
    ]


def test_b5_dry_run_writes_nothing_and_returns_the_same_metadata_as_a_real_edit(
    tmp_path: Path, src: Path
) -> None:
    before = snap(src)
    args = {"file_path": "app.py", "old_string": "os", "new_string": "sys", "replace_all": True}
    dry = edit(tmp_path, dry_run=True, **args)
    assert dry.ok and snap(src) == before
    assert dry.output.startswith("Dry run: would replace 3 occurrence(s) in app.py; nothing was written")
    caps = TOOL.capabilities(TOOL.validate({**args, "dry_run": True}))
    assert (
        caps.read_only
        and caps.allows_parallel_batch
        and caps.max_parallelism == 16
        and caps.output_kind == "diff"
    )
    real_caps = TOOL.capabilities(TOOL.validate(args))
    assert not real_caps.read_only and real_caps.output_kind == "diff"
    real = edit(tmp_path, expected_replacements=dry.metadata["replacement_count"], **args)
    assert real.ok and src.read_bytes() != before[0]
    strip = lambda m: {k: v for k, v in m.items() if k not in ("dry_run", "expected_replacements")}  # noqa: E731
    assert strip(dry.metadata) == strip(real.metadata)
    assert dry.metadata["dry_run"] is True and real.metadata["dry_run"] is False


def test_b5_expected_replacements_mismatch_fails_and_leaves_the_file_identical(
    tmp_path: Path, src: Path
) -> None:
    before = snap(src)
    res = edit(tmp_path, file_path="app.py", old_string="os", new_string="sys", expected_replacements=2)
    assert res.exit_code == 1 and snap(src) == before
    assert (
        "Replacement count mismatch" in res.output and "expected 2" in res.output and "found 3" in res.output
    )
    assert res.metadata["replacement_count"] == 3 and res.metadata["expected_replacements"] == 2
    ok = edit(tmp_path, file_path="app.py", old_string="os", new_string="sys", expected_replacements=3)
    assert ok.ok and src.read_text().count("sys") == 3


def test_b5_max_replacements_caps_a_replace_all(tmp_path: Path, src: Path) -> None:
    before = snap(src)
    res = edit(
        tmp_path, file_path="app.py", old_string="os", new_string="sys", replace_all=True, max_replacements=2
    )
    assert res.exit_code == 1 and "exceeds max_replacements=2" in res.output and snap(src) == before
    ok = edit(
        tmp_path, file_path="app.py", old_string="os", new_string="sys", replace_all=True, max_replacements=3
    )
    assert ok.ok and ok.metadata["replacement_count"] == 3 and ok.metadata["max_replacements"] == 3


def test_edit_ambiguous_match_names_the_count_and_lines(tmp_path: Path, src: Path) -> None:
    before = snap(src)
    res = edit(tmp_path, file_path="app.py", old_string="os", new_string="sys")
    assert res.exit_code == 1 and snap(src) == before
    assert "old_string found 3 times in app.py" in res.output and "replace_all=true" in res.output
    assert "lines 1, 4, 4" in res.output


def test_edit_miss_names_a_non_breaking_space(tmp_path: Path) -> None:
    p = tmp_path / "doc.md"
    p.write_text("intro\nPrice:\u00a0100 EUR\noutro\n")
    before = snap(p)
    res = edit(tmp_path, file_path="doc.md", old_string="Price: 100 EUR", new_string="Price: 90 EUR")
    assert res.exit_code == 1 and snap(p) == before
    assert res.output.startswith("old_string not found in doc.md")
    assert res.error_kind == {"type": "not_found", "path": "doc.md"}
    assert "U+00A0 NO-BREAK SPACE" in res.output and "U+0020 SPACE" in res.output
    assert "line 2, column 7" in res.output and "non-breaking" in res.output


def test_edit_miss_names_tabs_versus_spaces(tmp_path: Path) -> None:
    p = tmp_path / "m.go"
    p.write_text("func f() {\n\treturn 1\n}\n")
    res = edit(tmp_path, file_path="m.go", old_string="func f() {\n    return 1\n}", new_string="x")
    assert res.exit_code == 1
    assert "Tabs vs spaces" in res.output and "U+0009 CHARACTER TABULATION" in res.output
    assert "Closest match: lines 1-3" in res.output


def test_edit_miss_names_crlf_in_a_mixed_file(tmp_path: Path) -> None:
    p = tmp_path / "mixed.txt"
    p.write_bytes(b"alpha\nbeta\r\ngamma\n")
    before = snap(p)
    res = edit(tmp_path, file_path="mixed.txt", old_string="alpha\nbeta\ngamma", new_string="x")
    assert res.exit_code == 1 and snap(p) == before
    assert "CRLF" in res.output and "U+000D CARRIAGE RETURN" in res.output


def test_edit_keeps_a_crlf_file_crlf(tmp_path: Path) -> None:
    p = tmp_path / "win.txt"
    p.write_bytes(b"one\r\ntwo\r\nthree\r\n")
    res = edit(tmp_path, file_path="win.txt", old_string="one\ntwo\n", new_string="one\n1.5\ntwo\n")
    assert res.ok, res.output
    assert p.read_bytes() == b"one\r\n1.5\r\ntwo\r\nthree\r\n"
    assert res.metadata["line_endings"] == "crlf"


def test_edit_preserves_a_utf8_bom_and_the_file_mode(tmp_path: Path) -> None:
    p = tmp_path / "bom.txt"
    p.write_bytes(b"\xef\xbb\xbfh\xc3\xa9llo world\n")
    p.chmod(0o751)
    res = edit(tmp_path, file_path="bom.txt", old_string="world", new_string="monde")
    assert res.ok
    assert p.read_bytes() == b"\xef\xbb\xbfh\xc3\xa9llo monde\n"
    assert p.stat().st_mode & 0o7777 == 0o751
    assert res.metadata["encoding"] == "utf-8-sig" and res.metadata["before"] == "héllo world\n"


def test_edit_non_utf8_file_keeps_every_other_byte(tmp_path: Path) -> None:
    p = tmp_path / "legacy.txt"
    p.write_bytes(b"caf\xe9 \xff\xfe value=1\n")
    res = edit(tmp_path, file_path="legacy.txt", old_string="value=1", new_string="value=2")
    assert res.ok and res.metadata["encoding"] == "latin-1"
    assert p.read_bytes() == b"caf\xe9 \xff\xfe value=2\n"
    before = snap(p)
    bad = edit(tmp_path, file_path="legacy.txt", old_string="value=2", new_string="value=\u20ac")
    assert bad.exit_code == 1 and "latin-1" in bad.output and snap(p) == before


def test_edit_version_conflict_when_the_file_changes_before_commit(
    tmp_path: Path, src: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def concurrent_writer(paths: list[Path]) -> None:
        src.write_text("someone else's content\n")

    monkeypatch.setattr(_fileio, "_before_commit", concurrent_writer)
    res = edit(tmp_path, file_path="app.py", old_string="os.getcwd()", new_string="os.getpid()")
    assert res.exit_code == 1
    assert res.error_kind is not None and res.error_kind["type"] == "version_conflict"
    assert res.error_kind["path"] == "app.py" and res.error_kind["expected"] != res.error_kind["actual"]
    assert "Concurrent modification detected" in res.output and "Re-read the file" in res.output
    assert src.read_text() == "someone else's content\n"
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(_fileio.TEMP_SUFFIX)]


def test_b6_edit_refuses_paths_outside_the_workspace(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    outside = tmp_path / "secret.txt"
    outside.write_text("token=1\n")
    (root / "link.txt").symlink_to(outside)
    for path in ("../secret.txt", str(outside), "link.txt"):
        res = edit(root, file_path=path, old_string="token=1", new_string="token=2")
        assert res.error_kind is not None and res.error_kind["type"] == "path_outside_workspace", path
    assert outside.read_text() == "token=1\n"


def test_edit_missing_file_blank_session_and_identical_strings_fail_cleanly(
    tmp_path: Path, src: Path
) -> None:
    missing = edit(tmp_path, file_path="nope.py", old_string="a", new_string="b")
    assert missing.error_kind == {"type": "not_found", "path": "nope.py"}
    before = snap(src)
    no_session = edit(tmp_path, session_id="  ", file_path="app.py", old_string="import", new_string="from")
    assert no_session.exit_code == 1 and "session id" in no_session.output and snap(src) == before
    same = edit(tmp_path, file_path="app.py", old_string="import", new_string="import")
    assert same.exit_code == 1 and snap(src) == before
    empty = edit(tmp_path, file_path="app.py", old_string="", new_string="x")
    assert empty.error_kind is not None and empty.error_kind["type"] == "invalid_argument"


def test_edit_of_a_large_file_bounds_its_diff(tmp_path: Path) -> None:
    """B-3: the unified diff is bounded; before/after stay whole for the kernel to compact."""
    p = tmp_path / "big.txt"
    p.write_text("".join(f"row {i}\n" for i in range(40_000)))
    res = edit(tmp_path, file_path="big.txt", old_string="row", new_string="ROW", replace_all=True)
    assert res.ok and res.metadata["replacement_count"] == 40_000
    assert res.metadata["diff_truncated"] is True
    assert len(res.metadata["diff"].encode()) <= 32 * 1024 + 200
    assert res.metadata["after"] == p.read_text()
    assert len(res.output.encode()) <= 32 * 1024 + 300
    p.write_text("".join(f"row {i}\n" for i in range(120_000)))  # before+after > 1 MiB: no diff at all
    huge = edit(tmp_path, file_path="big.txt", old_string="row 7\n", new_string="seven\n")
    assert huge.ok and huge.metadata["diff_omitted"] is True and huge.metadata["diff"] == ""


def test_b3_b5_edit_write_patch_through_a_session(agent: Any, tmp_path: Path) -> None:
    """The same tools through the kernel: registered for a writable local workspace, metadata projected."""
    s = agent.session(tmp_path)
    assert {"write", "edit", "patch"} <= set(s.tool_names())
    big = "".join(f"row {i}\n" for i in range(10_000))
    wrote = s.write_file("big.txt", big)
    assert wrote.exit_code == 0, wrote.output
    assert wrote.metadata["change"]["compacted"] is True and len(wrote.metadata["after"]) < 9 * 1024
    dry = s.tool(
        "edit", {"file_path": "big.txt", "old_string": "row 5\n", "new_string": "five\n", "dry_run": True}
    )
    assert dry.exit_code == 0 and (tmp_path / "big.txt").read_text() == big
    edited = s.edit_file("big.txt", "row 5\n", "five\n")
    assert edited.exit_code == 0 and "five\n" in (tmp_path / "big.txt").read_text()
    assert dry.metadata["change"]["after"]["sha256"] == edited.metadata["change"]["after"]["sha256"]
    patched = s.patch_file("big.txt", "@@ -1 +1 @@\n-row 0\n+zero\n")
    assert patched.exit_code == 0 and (tmp_path / "big.txt").read_text().startswith("zero\n")
    outside = s.edit_file("../x.txt", "a", "b")
    assert outside.error_kind is not None and outside.error_kind["type"] == "path_outside_workspace"


def test_k8_replace_all_past_the_size_limit_fails_before_building_the_new_text(tmp_path: Path) -> None:
    """SPEC K-8, B-3: 1 MiB of 'a' with every 'a' -> 65 chars would be 65 MiB; the size is computed
    from the count first, so the call fails typed, the 65 MiB string is never built (peak memory
    stays small) and the file is untouched."""
    import tracemalloc

    p = tmp_path / "big.txt"
    p.write_bytes(b"a" * (1 << 20))
    before = snap(p)
    tracemalloc.start()
    try:
        res = edit(tmp_path, file_path="big.txt", old_string="a", new_string="a" * 65, replace_all=True)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert res.error_kind is not None and res.error_kind["type"] == "invalid_argument", res.output
    assert f"{_fileio.MAX_FILE_BYTES >> 20} MiB" in res.output and "Nothing was written" in res.output
    assert peak < 16 * 1024 * 1024, f"peak {peak >> 20} MiB"
    assert snap(p) == before


def test_k8_a_miss_against_a_hostile_file_returns_promptly_within_the_diagnostic_budget(
    tmp_path: Path,
) -> None:
    """SPEC K-8: the closest-match hint compares with SequenceMatcher, quadratic in what the model
    controls. A 200,000-character line of 'a' against an old_string of 20,000 'a' and one 'b' took
    ~4e9 steps before; the diagnostic now stops at ``MAX_COMPARE_STEPS`` and the miss still comes
    back typed and at once (a generous bound: the unbounded search ran for minutes)."""
    import time

    p = tmp_path / "a.txt"
    p.write_text("a" * 200_000 + "\n")
    before = snap(p)
    t0 = time.monotonic()
    res = edit(tmp_path, file_path="a.txt", old_string="a" * 20_000 + "b", new_string="c")
    elapsed = time.monotonic() - t0
    assert res.error_kind is not None and res.error_kind["type"] == "not_found", res.output
    assert "stopped after" in res.output and "First difference at line 1, column 20001" in res.output, (
        res.output
    )
    assert elapsed < 20, elapsed
    assert snap(p) == before
