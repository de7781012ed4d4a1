"""``patch`` with the apply_patch envelope (``*** Begin Patch``) and parser edge cases (SPEC B-3, B-6)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from kernel.errors import InvalidArgument, ToolError, Unsupported
from kernel.result import ToolResult
from kernel.testing import make_context
from kernel.workspace import LocalWorkspace
from tools.patch import TOOL
from tools.patch.parse import parse_patch


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
    return {
        p.relative_to(root).as_posix(): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in root.rglob("*")
        if p.is_file()
    }


@pytest.fixture()
def ws(tmp_path: Path) -> Path:
    (tmp_path / "app.py").write_text(
        "import os\n\n\ndef first():\n    return 1\n\n\ndef second():\n    return 1\n"
    )
    (tmp_path / "old.txt").write_text("remove me\n")
    (tmp_path / "move.txt").write_text("keep\nchange\n")
    return tmp_path


ENVELOPE = """\
*** Begin Patch
*** Add File: docs/notes.md
+# Notes
+
+hello
*** Update File: app.py
@@ def second():
-    return 1
+    return 2
*** Delete File: old.txt
*** Update File: move.txt
*** Move to: moved/move.txt
@@
 keep
-change
+changed
*** End Patch
"""


def test_envelope_adds_updates_deletes_and_moves(ws: Path) -> None:
    res = patch(ws, ENVELOPE)
    assert res.ok, res.output
    assert (ws / "docs/notes.md").read_text() == "# Notes\n\nhello\n"
    # The anchor picks the `return 1` after `def second():`, not the first one.
    assert (
        (ws / "app.py").read_text().endswith("def first():\n    return 1\n\n\ndef second():\n    return 2\n")
    )
    assert not (ws / "old.txt").exists() and not (ws / "move.txt").exists()
    assert (ws / "moved/move.txt").read_text() == "keep\nchanged\n"
    assert res.metadata["format"] == "envelope"
    assert [f["action"] for f in res.metadata["files"]] == ["created", "modified", "deleted", "renamed"]


def test_envelope_without_anchor_refuses_an_ambiguous_hunk(ws: Path) -> None:
    before = tree(ws)
    env = "*** Begin Patch\n*** Update File: app.py\n@@\n-    return 1\n+    return 3\n*** End Patch\n"
    res = patch(ws, env)
    assert res.exit_code == 1 and tree(ws) == before
    assert "occur 2 times (lines 5, 9)" in res.output and "anchor" in res.output


def test_envelope_end_of_file_and_a_miss_with_diagnostics(ws: Path) -> None:
    env = (
        "*** Begin Patch\n*** Update File: app.py\n@@\n     return 1\n+# end\n*** End of File\n*** End Patch"
    )
    res = patch(ws, env)
    assert res.ok, res.output
    assert (ws / "app.py").read_text().endswith("def second():\n    return 1\n# end\n")
    before = tree(ws)
    miss = (
        "*** Begin Patch\n*** Update File: app.py\n@@\n def first():\n-\treturn 1\n+\treturn 5\n*** End Patch"
    )
    bad = patch(ws, miss)
    assert bad.exit_code == 1 and tree(ws) == before
    assert bad.output.startswith("patch not applied (nothing was written): app.py: hunk 1 (@@)")
    assert "Tabs vs spaces" in bad.output


def test_envelope_failure_in_a_later_file_writes_nothing(ws: Path) -> None:
    before = tree(ws)
    env = (
        "*** Begin Patch\n*** Add File: new.txt\n+x\n*** Update File: move.txt\n@@\n-nope\n+x\n*** End Patch"
    )
    res = patch(ws, env)
    assert res.exit_code == 1 and tree(ws) == before and not (ws / "new.txt").exists()
    assert "move.txt: hunk 1" in res.output


def test_envelope_in_a_code_fence_and_crlf_target(tmp_path: Path) -> None:
    (tmp_path / "w.txt").write_bytes(b"a\r\nb\r\n")
    env = "```\n*** Begin Patch\n*** Update File: w.txt\n a\n-b\n+B\n+C\n*** End Patch\n```\n"
    res = patch(tmp_path, env)
    assert res.ok, res.output
    assert (tmp_path / "w.txt").read_bytes() == b"a\r\nB\r\nC\r\n"


def test_parse_git_quoted_paths_and_prefix_rules() -> None:
    parsed = parse_patch(
        'diff --git "a/sp ace/caf\\303\\251.txt" "b/sp ace/caf\\303\\251.txt"\n'
        '--- "a/sp ace/caf\\303\\251.txt"\n+++ "b/sp ace/caf\\303\\251.txt"\n@@ -1 +1 @@\n-x\n+y\n'
    )
    assert parsed.files[0].old_path == parsed.files[0].new_path == "sp ace/café.txt"
    # Without git headers, a/ b/ are stripped only when both sides carry them.
    plain = parse_patch("--- a/x.txt\n+++ x.txt\n@@ -1 +1 @@\n-1\n+2\n")
    assert (plain.files[0].old_path, plain.files[0].new_path) == ("a/x.txt", "x.txt")


def test_parse_removed_line_that_looks_like_a_header_is_kept_by_the_counts() -> None:
    parsed = parse_patch("--- a/q.sql\n+++ b/q.sql\n@@ -1,2 +1,1 @@\n--- comment\n+++ b\n-x\n")
    hunk = parsed.files[0].hunks[0]
    assert hunk.lines == [("-", "-- comment"), ("+", "++ b"), ("-", "x")]


def test_parse_rejects_binary_and_empty_patches() -> None:
    with pytest.raises(Unsupported):
        parse_patch("diff --git a/i.png b/i.png\nBinary files a/i.png and b/i.png differ\n")
    with pytest.raises(InvalidArgument):
        parse_patch("just some text\n")
    with pytest.raises(InvalidArgument):
        parse_patch("*** Begin Patch\n*** End Patch\n")
