"""``patch``: unified diffs, strict placement, all-or-nothing multi-file commits (SPEC B-3, B-6; REFERENCE 4.16)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from kernel.errors import ToolError
from kernel.result import ToolResult
from kernel.testing import make_context
from kernel.workspace import LocalWorkspace
from tools import _fileio
from tools.patch import TOOL, patch_paths


async def _patch(root: Path, diff: str, **args: Any) -> ToolResult:
    ctx = make_context(LocalWorkspace(root), tool_name="patch")
    try:
        out = await TOOL.run(ctx, TOOL.validate({"diff": diff, **args}))
    except ToolError as exc:
        return ToolResult.failure("patch", exc)
    return out if isinstance(out, ToolResult) else ToolResult.success("patch", out)


def patch(root: Path, diff: str, **args: Any) -> ToolResult:
    return asyncio.run(_patch(root, diff, **args))


def tree(root: Path) -> dict[str, tuple[bytes, int]]:
    """Every file's bytes and mtime: a failed patch must leave this identical."""
    return {
        p.relative_to(root).as_posix(): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture()
def ws(tmp_path: Path) -> Path:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "app.py").write_text("import os\n\n\ndef main():\n    return os.getcwd()\n")
    (tmp_path / "src" / "util.py").write_text("".join(f"line {i}\n" for i in range(1, 21)))
    return tmp_path


APP_DIFF = (
    "--- a/src/app.py\n"
    "+++ b/src/app.py\n"
    "@@ -3,3 +3,4 @@\n"
    " \n"
    " def main():\n"
    "-    return os.getcwd()\n"
    "+    cwd = os.getcwd()\n"
    "+    return cwd\n"
)


def test_patch_applies_a_unified_diff_with_prefixes(ws: Path) -> None:
    res = patch(ws, APP_DIFF)
    assert res.ok, res.output
    assert (
        ws / "src/app.py"
    ).read_text() == "import os\n\n\ndef main():\n    cwd = os.getcwd()\n    return cwd\n"
    m = res.metadata
    assert m["file_path"] == "src/app.py" and m["format"] == "unified"
    assert (
        m["files"][0]["action"] == "modified"
        and m["files"][0]["hunks"] == 1
        and m["files"][0]["offsets"] == []
    )
    assert m["before"].endswith("return os.getcwd()\n") and m["after"].endswith("return cwd\n")
    assert len(m["after_sha256"]) == 64 and "+    return cwd\n" in m["diff"]
    assert TOOL.subject(TOOL.validate({"diff": APP_DIFF})) == ["src/app.py"]


def test_patch_hunk_with_a_wrong_line_number_applies_only_at_a_unique_offset(ws: Path) -> None:
    diff = "--- a/src/util.py\n+++ b/src/util.py\n@@ -2,3 +2,3 @@\n line 11\n-line 12\n+LINE 12\n line 13\n"
    res = patch(ws, diff)
    assert res.ok, res.output
    assert "LINE 12\n" in (ws / "src/util.py").read_text()
    assert res.metadata["files"][0]["offsets"] == [
        {"hunk": 1, "stated_line": 2, "applied_line": 11, "offset": 9}
    ]


def test_patch_ambiguous_offset_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "dup.txt"
    p.write_text("a\nx\nb\nfill\na\nx\nb\n")
    before = tree(tmp_path)
    res = patch(tmp_path, "--- a/dup.txt\n+++ b/dup.txt\n@@ -3,3 +3,3 @@\n a\n-x\n+y\n b\n")
    assert res.exit_code == 1 and tree(tmp_path) == before
    assert "2 times elsewhere" in res.output and "lines 1, 5" in res.output


def test_patch_mismatch_names_file_hunk_and_first_differing_line(ws: Path) -> None:
    before = tree(ws)
    diff = (
        "--- a/src/util.py\n+++ b/src/util.py\n"
        "@@ -1,2 +1,2 @@\n-line 1\n+LINE 1\n line 2\n"
        "@@ -5,3 +5,3 @@\n line 5\n-line 6\n+LINE 6\n line\u00a07\n"
    )
    res = patch(ws, diff)
    assert res.exit_code == 1 and tree(ws) == before
    out = res.output
    assert out.startswith("patch not applied (nothing was written): src/util.py: hunk 2 (@@ -5,3 +5,3 @@)")
    assert "line 7 does not match: expected 'line\\xa07', found 'line 7'" in out
    assert "U+00A0 NO-BREAK SPACE" in out
    assert res.error_kind is not None and res.error_kind["type"] == "invalid_argument"


def test_patch_creates_deletes_and_renames_in_one_multi_file_patch(ws: Path) -> None:
    (ws / "old_name.py").write_text("value = 1\n")
    (ws / "gone.txt").write_text("bye\n")
    diff = """\
diff --git a/new/pkg/mod.py b/new/pkg/mod.py
new file mode 100755
--- /dev/null
+++ b/new/pkg/mod.py
@@ -0,0 +1,2 @@
+#!/usr/bin/env python3
+print("hi")
diff --git a/gone.txt b/gone.txt
deleted file mode 100644
--- a/gone.txt
+++ /dev/null
@@ -1 +0,0 @@
-bye
diff --git a/old_name.py b/new_name.py
similarity index 50%
rename from old_name.py
rename to new_name.py
--- a/old_name.py
+++ b/new_name.py
@@ -1 +1 @@
-value = 1
+value = 2
"""
    res = patch(ws, diff)
    assert res.ok, res.output
    created = ws / "new/pkg/mod.py"
    assert (
        created.read_text() == '#!/usr/bin/env python3\nprint("hi")\n'
        and created.stat().st_mode & 0o777 == 0o755
    )
    assert not (ws / "gone.txt").exists() and not (ws / "old_name.py").exists()
    assert (ws / "new_name.py").read_text() == "value = 2\n"
    actions = {f["file_path"]: (f["action"], f["from_path"]) for f in res.metadata["files"]}
    assert actions == {
        "new/pkg/mod.py": ("created", None),
        "gone.txt": ("deleted", None),
        "new_name.py": ("renamed", "old_name.py"),
    }
    assert "=== new_name.py ===\nvalue = 2\n" in res.metadata["after"]
    assert TOOL.subject(TOOL.validate({"diff": diff})) == [
        "gone.txt",
        "new/pkg/mod.py",
        "new_name.py",
        "old_name.py",
    ]
    assert not [p for p in ws.rglob("*") if p.name.endswith((_fileio.TEMP_SUFFIX, _fileio.BACKUP_SUFFIX))]


def test_patch_pure_git_rename_moves_bytes_exactly(ws: Path) -> None:
    (ws / "bin.dat").write_bytes(b"\x00\xff\xfe raw\r\n")
    diff = "diff --git a/bin.dat b/data/bin.dat\nsimilarity index 100%\nrename from bin.dat\nrename to data/bin.dat\n"
    res = patch(ws, diff)
    assert res.ok, res.output
    assert (ws / "data/bin.dat").read_bytes() == b"\x00\xff\xfe raw\r\n" and not (ws / "bin.dat").exists()


def test_patch_differing_header_paths_rename_when_the_old_file_exists(ws: Path) -> None:
    diff = "--- src/app.py\n+++ src/main.py\n@@ -1,1 +1,1 @@\n-import os\n+import sys\n"
    res = patch(ws, diff)
    assert res.ok, res.output
    assert not (ws / "src/app.py").exists() and (ws / "src/main.py").read_text().startswith("import sys\n")
    # The common `x.orig` -> `x` form edits x when x.orig does not exist.
    diff2 = "--- src/main.py.orig\t2024-01-01\n+++ src/main.py\n@@ -1,1 +1,1 @@\n-import sys\n+import re\n"
    res2 = patch(ws, diff2)
    assert res2.ok and res2.metadata["files"][0]["action"] == "modified"
    assert (ws / "src/main.py").read_text().startswith("import re\n")


def test_patch_whose_second_file_fails_writes_nothing_to_the_first(ws: Path) -> None:
    before = tree(ws)
    diff = APP_DIFF + "--- a/src/util.py\n+++ b/src/util.py\n@@ -1,2 +1,2 @@\n-line one\n+LINE 1\n line 2\n"
    res = patch(ws, diff)
    assert res.exit_code == 1 and tree(ws) == before
    assert "src/util.py: hunk 1" in res.output and "expected 'line one', found 'line 1'" in res.output


def test_patch_rolls_back_renamed_files_when_a_later_rename_fails(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failure after the first rename restores the first file from its backup (all-or-nothing)."""
    before = tree(ws)
    util_diff = "--- a/src/util.py\n+++ b/src/util.py\n@@ -1,2 +1,2 @@\n-line 1\n+LINE 1\n line 2\n"
    renamed: list[str] = []
    real_replace = _fileio.os.replace

    def sabotage(paths: list[Path]) -> None:
        # Remove the second file's staged temp file: its rename will fail with ENOENT.
        for tmp in (ws / "src").glob(".util.py.*" + _fileio.TEMP_SUFFIX):
            tmp.unlink()

    def spy(src: Any, dst: Any, **dir_fds: Any) -> None:
        real_replace(src, dst, **dir_fds)
        renamed.append(os.fspath(dst))

    monkeypatch.setattr(_fileio, "_before_commit", sabotage)
    monkeypatch.setattr(_fileio.os, "replace", spy)
    res = patch(ws, APP_DIFF + util_diff)
    assert res.exit_code == 1 and "cannot replace src/util.py" in res.output
    assert "app.py" in renamed  # the first file really was replaced, then restored
    assert {k: v[0] for k, v in tree(ws).items()} == {k: v[0] for k, v in before.items()}
    assert not [p for p in ws.rglob("*") if p.name.endswith((_fileio.TEMP_SUFFIX, _fileio.BACKUP_SUFFIX))]


def test_patch_version_conflict_on_any_file_writes_nothing(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    util_diff = "--- a/src/util.py\n+++ b/src/util.py\n@@ -1,2 +1,2 @@\n-line 1\n+LINE 1\n line 2\n"
    monkeypatch.setattr(_fileio, "_before_commit", lambda paths: (ws / "src/util.py").write_text("changed\n"))
    res = patch(ws, APP_DIFF + util_diff)
    assert res.error_kind is not None and res.error_kind["type"] == "version_conflict"
    assert res.error_kind["path"] == "src/util.py"
    assert (ws / "src/app.py").read_text().endswith("return os.getcwd()\n")


def test_patch_keeps_crlf_files_crlf(tmp_path: Path) -> None:
    p = tmp_path / "win.txt"
    p.write_bytes(b"one\r\ntwo\r\nthree\r\n")
    res = patch(tmp_path, "--- a/win.txt\n+++ b/win.txt\n@@ -1,3 +1,4 @@\n one\n-two\n+2\n+2.5\n three\n")
    assert res.ok, res.output
    assert p.read_bytes() == b"one\r\n2\r\n2.5\r\nthree\r\n"
    # A diff transported with CRLF line breaks applies the same way.
    res2 = patch(tmp_path, "--- a/win.txt\r\n+++ b/win.txt\r\n@@ -4 +4 @@\r\n-three\r\n+3\r\n")
    assert res2.ok and p.read_bytes() == b"one\r\n2\r\n2.5\r\n3\r\n"


def test_patch_respects_no_newline_at_end_of_file_and_a_bom(tmp_path: Path) -> None:
    p = tmp_path / "n.txt"
    p.write_bytes(b"\xef\xbb\xbfa\nb")
    keep = patch(
        tmp_path,
        "--- a/n.txt\n+++ b/n.txt\n@@ -2 +2 @@\n-b\n\\ No newline at end of file\n+B\n\\ No newline at end of file\n",
    )
    assert keep.ok and p.read_bytes() == b"\xef\xbb\xbfa\nB"
    add = patch(tmp_path, "--- a/n.txt\n+++ b/n.txt\n@@ -2 +2 @@\n-B\n\\ No newline at end of file\n+B\n")
    assert add.ok and p.read_bytes() == b"\xef\xbb\xbfa\nB\n"


def test_patch_without_headers_uses_file_path(ws: Path) -> None:
    res = patch(ws, "@@ -1,1 +1,1 @@\n-import os\n+import os, sys\n", file_path="src/app.py")
    assert res.ok and (ws / "src/app.py").read_text().startswith("import os, sys\n")
    no_target = patch(ws, "@@ -1,1 +1,1 @@\n-import os\n+import re\n")
    assert no_target.exit_code == 1 and "pass file_path" in no_target.output
    # With file_path naming another file than the headers, the headers are only labels.
    res2 = patch(ws, "--- original\n+++ modified\n@@ -1 +1 @@\n-line 1\n+first\n", file_path="src/util.py")
    assert res2.ok and (ws / "src/util.py").read_text().startswith("first\nline 2\n")


def test_patch_body_with_wrong_counts_and_bare_empty_context_lines(tmp_path: Path) -> None:
    p = tmp_path / "g.py"
    p.write_text("def a():\n    pass\n\n\ndef b():\n    pass\n")
    # Models drop the space before empty context lines and miscount headers; the body decides.
    diff = "--- a/g.py\n+++ b/g.py\n@@ -1,9 +1,9 @@\n def a():\n-    pass\n+    return 1\n\n\n def b():\n"
    res = patch(tmp_path, diff)
    assert res.ok, res.output
    assert p.read_text() == "def a():\n    return 1\n\n\ndef b():\n    pass\n"


def test_b6_patch_refuses_paths_outside_the_workspace(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "ok.txt").write_text("a\n")
    before = tree(root)
    diff = (
        "--- a/ok.txt\n+++ b/ok.txt\n@@ -1 +1 @@\n-a\n+b\n"
        "--- /dev/null\n+++ b/../evil.txt\n@@ -0,0 +1 @@\n+pwned\n"
    )
    res = patch(root, diff)
    assert res.error_kind is not None and res.error_kind["type"] == "path_outside_workspace"
    assert tree(root) == before and not (tmp_path / "evil.txt").exists()
    env = "*** Begin Patch\n*** Add File: /etc/evil\n+x\n*** End Patch\n"
    res2 = patch(root, env)
    assert res2.error_kind is not None and res2.error_kind["type"] == "path_outside_workspace"


def test_patch_refuses_creating_an_existing_file_and_incomplete_deletes(ws: Path) -> None:
    before = tree(ws)
    create = patch(ws, "--- /dev/null\n+++ b/src/app.py\n@@ -0,0 +1 @@\n+x\n")
    assert create.exit_code == 1 and "already exists" in create.output
    delete = patch(ws, "--- a/src/util.py\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-line 1\n-line 2\n")
    assert delete.exit_code == 1 and "do not remove every line" in delete.output
    assert tree(ws) == before


def _add(path: str) -> str:
    return f"--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+{path}\n"


@pytest.mark.parametrize(
    ("diff", "file", "inside"),
    [
        (_add("sub") + _add("sub/x"), "sub", "sub/x"),
        (_add("sub/x") + _add("sub"), "sub", "sub/x"),
        (_add("a/sub") + _add("src/n.py") + _add("a/sub/x/y"), "a/sub", "a/sub/x/y"),
        ("*** Begin Patch\n*** Add File: sub\n+x\n*** Add File: sub/x\n+y\n*** End Patch", "sub", "sub/x"),
        (
            "--- a/src/app.py\n+++ /dev/null\n@@ -1,5 +0,0 @@\n-import os\n-\n-\n-def main():\n-    return os.getcwd()\n"
            + _add("src/app.py/x"),
            "src/app.py",
            "src/app.py/x",
        ),
    ],
    ids=["file-then-inside", "inside-then-file", "deeper-among-others", "envelope", "delete-file-add-inside"],
)
def test_b3_k8_patch_naming_a_file_and_a_path_inside_it_is_a_clear_conflict(
    ws: Path, diff: str, file: str, inside: str
) -> None:
    """B-3/K-8: creating sub and sub/x was refused as a 'Concurrent modification' (version_conflict,
    'created by someone else'): nobody else was there. It is invalid_argument naming both paths,
    decided before anything is read or written."""
    before = tree(ws)
    res = patch(ws, diff)
    assert res.error_kind is not None and res.error_kind["type"] == "invalid_argument", res.output
    assert f"{file} " in res.output and inside in res.output and "nothing was written" in res.output
    assert "Concurrent" not in res.output
    assert tree(ws) == before and sorted(p.name for p in ws.iterdir()) == ["src"]


def test_patch_paths_lists_every_touched_path() -> None:
    params = TOOL.validate(
        {"diff": "*** Begin Patch\n*** Update File: a.py\n*** Move to: b.py\n@@\n-x\n+y\n*** End Patch"}
    )
    assert patch_paths(params) == ["a.py", "b.py"]
    caps = TOOL.capabilities(params)
    assert not caps.read_only and caps.max_parallelism == 1
    assert TOOL.requires == frozenset({"read", "write"}) and TOOL.path_fields == ("file_path",)


def test_k8_hunk_search_tries_only_the_positions_of_its_rarest_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SPEC K-8: a hunk without line numbers used to be tried at every offset with a full compare:
    100,000 'x' lines against 1,999 'x' lines and one 'y' compared ~2e8 lines. Candidates now come
    from the positions of the hunk's rarest line ('y', once), so it places within a budget of
    100,000 compared lines."""
    from tools.patch import apply

    monkeypatch.setattr(apply, "MAX_COMPARED_LINES", 100_000)
    (tmp_path / "f.txt").write_text("x\n" * 100_000 + "y\n" + "x\n" * 10)
    diff = "--- a/f.txt\n+++ b/f.txt\n@@\n" + " x\n" * 1_999 + "-y\n+z\n"
    res = patch(tmp_path, diff)
    assert res.ok, res.output
    assert (tmp_path / "f.txt").read_text() == "x\n" * 100_000 + "z\n" + "x\n" * 10


def test_k8_placing_a_patch_past_its_compared_lines_budget_fails_typed_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SPEC K-8: every line compared while placing one patch's hunks is counted; a hunk whose
    every line is common (50 blocks of 300 'a' and a 'b', so 49 candidates of ~300 lines each)
    runs past the budget (20,000,000 in production, 10,000 here) and the patch fails with
    invalid_argument, nothing written."""
    from tools.patch import apply

    monkeypatch.setattr(apply, "MAX_COMPARED_LINES", 10_000)
    (tmp_path / "f.txt").write_text(("a\n" * 300 + "b\n") * 50)
    before = tree(tmp_path)
    diff = "--- a/f.txt\n+++ b/f.txt\n@@\n b\n" + " a\n" * 300 + "-b\n+c\n"
    res = patch(tmp_path, diff)
    assert res.error_kind is not None and res.error_kind["type"] == "invalid_argument", res.output
    assert "10,000 line comparisons" in res.output and "nothing was written" in res.output, res.output
    assert tree(tmp_path) == before


@pytest.mark.parametrize("number", ["999999999999999999999", "9" * 5000, "2147483649"])
def test_k8_a_hunk_header_with_a_huge_line_number_is_invalid_argument(ws: Path, number: str) -> None:
    """SPEC K-4, K-8: a header number past MAX_HUNK_LINE_NUMBER (2**31) is refused while parsing —
    a 5,000-digit one made int() raise ValueError out of the tool (and out of the permission
    subject), a huge count kept the hunk open — and nothing is written."""
    before = tree(ws)
    for header in (f"@@ -{number} +1 @@", f"@@ -1,{number} +1 @@", f"@@ -1 +1,{number} @@"):
        diff = f"--- a/src/util.py\n+++ b/src/util.py\n{header}\n-line 1\n+line one\n"
        res = patch(ws, diff)
        assert res.error_kind is not None and res.error_kind["type"] == "invalid_argument", res.output
        assert "at most 2147483648" in res.output, res.output
        assert patch_paths(TOOL.validate({"diff": diff})) == []
    assert tree(ws) == before


def _creates(count: int) -> tuple[str, str]:
    unified = "".join(f"--- /dev/null\n+++ b/new/f{i}.txt\n@@ -0,0 +1 @@\n+{i}\n" for i in range(count))
    envelope = (
        "*** Begin Patch\n"
        + "".join(f"*** Add File: new/f{i}.txt\n+{i}\n" for i in range(count))
        + "*** End Patch\n"
    )
    return unified, envelope


def test_k8_a_patch_of_more_than_256_files_fails_at_parse_time(ws: Path) -> None:
    """SPEC K-3, K-8: MAX_PATCH_FILES (256) is checked while parsing, so the permission subject —
    every path, each one a question for the gate — is never built for a bigger patch, and the call
    fails with invalid_argument, nothing written. 256 files still apply."""
    from tools.patch.parse import MAX_PATCH_FILES

    assert MAX_PATCH_FILES == 256
    before = tree(ws)
    for diff in _creates(257):
        assert patch_paths(TOOL.validate({"diff": diff})) == []
        res = patch(ws, diff)
        assert res.error_kind is not None and res.error_kind["type"] == "invalid_argument", res.output
        assert "more than 256 file sections" in res.output, res.output
        assert tree(ws) == before
    unified, _ = _creates(256)
    assert len(patch_paths(TOOL.validate({"diff": unified}))) == 256
    res = patch(ws, unified)
    assert res.ok, res.output
    assert (ws / "new" / "f255.txt").read_text() == "255\n"


def test_k8_a_patch_of_mostly_blank_lines_parses_in_linear_time(tmp_path: Path) -> None:
    """SPEC K-8: each blank line of a hunk body looked ahead over every following blank line, and
    the trailing blank lines of a diff were trimmed one list copy at a time — both quadratic, so
    200,000 blank lines took ~2e10 steps. A blank run is now looked at once and the trim slices
    once; the bound below is generous (linear parsing takes well under a second)."""
    import time

    from tools.patch.parse import parse_patch

    blanks = 200_000
    body = "--- a/f.txt\n+++ b/f.txt\n@@\n" + "\n" * blanks + "-a\n+b\n"
    for diff in (body, body + "\n" * blanks, "--- a/f.txt\n+++ b/f.txt\n@@ -1,1 +1,1 @@\n" + "\n" * blanks):
        t0 = time.monotonic()
        try:
            parse_patch(diff)
        except ToolError:
            pass  # the last one is a blank context line and nothing else: any typed answer will do
        assert time.monotonic() - t0 < 10
    (tmp_path / "f.txt").write_text("\n" * blanks + "a\n")
    res = patch(tmp_path, body + "\n" * blanks)
    assert res.ok, res.output
    assert (tmp_path / "f.txt").read_text() == "\n" * blanks + "b\n"


def test_k8_one_patch_reads_at_most_its_total_of_existing_file_content(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SPEC K-8, B-3: each file may be up to 64 MiB, but one patch reads at most
    MAX_PATCH_READ_BYTES (64 MiB; 1,000 bytes here) of existing files in total — 256 sections of
    64 MiB would otherwise hold 16 GiB. Past it the patch fails typed and writes nothing."""
    from tools.patch import apply

    monkeypatch.setattr(apply, "MAX_PATCH_READ_BYTES", 1_000)
    for name in ("a", "b", "c"):
        (tmp_path / f"{name}.txt").write_text("first\n" + "x" * 393 + "\n")  # 400 bytes
    before = tree(tmp_path)

    def section(name: str) -> str:
        return f"--- a/{name}.txt\n+++ b/{name}.txt\n@@ -1 +1 @@\n-first\n+FIRST\n"

    res = patch(tmp_path, section("a") + section("b") + section("c"))
    assert res.error_kind is not None and res.error_kind["type"] == "invalid_argument", res.output
    assert "c.txt" in res.output and "64 MiB of existing files in total" in res.output, res.output
    assert tree(tmp_path) == before
    res = patch(tmp_path, section("a") + section("b"))
    assert res.ok, res.output


@pytest.mark.parametrize(
    "diff",
    [
        "diff --git a/src/app.py b/big.txt\nrename from src/app.py\nrename to big.txt\n",
        "--- /dev/null\n+++ b/big.txt\n@@ -0,0 +1 @@\n+new\n",
    ],
)
def test_k8_a_rename_or_create_target_is_checked_by_stat_not_read(ws: Path, diff: str) -> None:
    """SPEC K-8, B-3: whether the target of a rename or create exists is a stat; a 1 GiB (sparse)
    file there was read — refused as too big to hold, the wrong reason — instead of being
    reported as existing. Nothing is read and nothing is written."""
    import tracemalloc

    with open(ws / "big.txt", "wb") as fh:
        fh.truncate(1 << 30)
    big = ws / "big.txt"
    before = (tree(ws / "src"), big.stat().st_size, big.stat().st_mtime_ns)
    tracemalloc.start()
    try:
        res = patch(ws, diff)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert res.error_kind is not None and res.error_kind["type"] == "invalid_argument", res.output
    assert "big.txt: it already exists" in res.output, res.output
    assert peak < 8 * 1024 * 1024, f"peak {peak >> 20} MiB"
    assert (tree(ws / "src"), big.stat().st_size, big.stat().st_mtime_ns) == before
