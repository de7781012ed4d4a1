"""Large change metadata compaction for edit/write/patch (SPEC B-3; REFERENCE §6.5)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from kernel.artifacts import MemoryArtifactStore
from kernel.projection import compact_change_metadata
from kernel.projection.change import bounded_head_tail, unified_diff


def test_b3_small_change_stays_inline() -> None:
    meta = {"before": "a\nb\n", "after": "a\nc\n", "path": "f.txt"}
    store = MemoryArtifactStore()
    out = compact_change_metadata(meta, store, "edit")
    assert out["before"] == "a\nb\n" and out["after"] == "a\nc\n" and out["path"] == "f.txt"
    assert out["change"] == {
        "compacted": False,
        "before": {"bytes": 4, "sha256": hashlib.sha256(b"a\nb\n").hexdigest(), "artifact": None},
        "after": {"bytes": 4, "sha256": hashlib.sha256(b"a\nc\n").hexdigest(), "artifact": None},
        "unified_diff": None,
        "diff_omitted": False,
    }
    assert len(store) == 0
    assert "change" not in meta  # input not mutated


def test_b3_exactly_64k_is_not_compacted() -> None:
    out = compact_change_metadata(
        {"before": "x" * 32768, "after": "y" * 32768}, MemoryArtifactStore(), "write"
    )
    assert out["change"]["compacted"] is False


def test_b3_large_change_is_previewed_stored_and_diffed() -> None:
    before = "".join(f"line {i} 界\n" for i in range(8000))
    after = before.replace("line 4000 界\n", "line 4000 changed\n")
    store = MemoryArtifactStore()
    out = compact_change_metadata({"before": before, "after": after}, store, "edit")
    change = out["change"]
    assert change["compacted"] is True and change["diff_omitted"] is False
    for side, text in (("before", before), ("after", after)):
        data = text.encode()
        info = change[side]
        assert info["bytes"] == len(data)
        assert info["sha256"] == hashlib.sha256(data).hexdigest()
        assert info["artifact"]["artifact_uri"] == f"a3s://tool-output/edit-{side}/{info['sha256']}"
        assert info["artifact"]["artifact_id"] == f"tool-output:edit-{side}:{info['sha256']}"
        assert store.get(info["artifact"]["artifact_uri"]) == data
        preview = out[side].encode()
        assert len(preview) <= 8 * 1024 + 64
        assert b"bytes omitted from middle] ...\n\n" in preview
    diff = change["unified_diff"]
    assert diff.startswith("--- before\n+++ after\n@@ -3998,7 +3998,7 @@\n")
    assert "-line 4000 界\n+line 4000 changed\n" in diff


def test_b3_diff_omitted_above_one_mib() -> None:
    before, after = "a\n" * 300_000, "b\n" * 300_000
    out = compact_change_metadata({"before": before, "after": after}, MemoryArtifactStore(), "write")
    assert out["change"]["compacted"] is True
    assert out["change"]["unified_diff"] is None
    assert out["change"]["diff_omitted"] is True


def test_b3_side_larger_than_store_limit_is_not_stored() -> None:
    store = MemoryArtifactStore(max_bytes=50_000)
    out = compact_change_metadata({"before": "s" * 10_000, "after": "L" * 60_000}, store, "write")
    assert out["change"]["before"]["artifact"] is not None
    assert out["change"]["after"]["artifact"] is None
    assert out["change"]["after"]["bytes"] == 60_000


def test_b3_one_sided_change_and_no_change_fields() -> None:
    out = compact_change_metadata({"after": "n" * 70_000}, MemoryArtifactStore(), "write")
    assert out["change"]["before"] is None
    assert out["change"]["after"]["bytes"] == 70_000
    assert out["change"]["unified_diff"].startswith("--- before\n+++ after\n@@ -0,0 +1 @@\n+nnn")
    untouched = {"path": "x"}
    assert compact_change_metadata(untouched, MemoryArtifactStore(), "write") is untouched


def test_b3_compaction_is_idempotent() -> None:
    store = MemoryArtifactStore()
    once = compact_change_metadata({"before": "p" * 70_000, "after": "q" * 70_000}, store, "edit")
    assert compact_change_metadata(once, store, "edit") is once


def test_b3_bounded_head_tail_is_utf8_safe() -> None:
    data = ("界" * 10_000).encode()
    out = bounded_head_tail(data, 8 * 1024)
    text = out.decode("utf-8")
    head, tail = text.split("\n\n... [")[0], text.split("] ...\n\n")[1]
    omitted = len(data) - len(head.encode()) - len(tail.encode())
    assert f"[{omitted} bytes omitted from middle]" in text
    assert bounded_head_tail(b"short", 10) == b"short"


def test_b3_unified_diff_marks_missing_final_newline() -> None:
    assert unified_diff("a\nb", "a\nc") == (
        "--- before\n+++ after\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+c\n\\ No newline at end of file\n"
    )


def test_b3_large_write_through_a_session_carries_the_diff_once(tmp_path: Path) -> None:
    """Issue 13 item 2: a large write's metadata holds one bounded diff (change.unified_diff), ~49 KB."""
    from orchestrator import Agent

    (tmp_path / "big.txt").write_text("".join(f"old line {i}\n" for i in range(20_000)))
    content = "".join(f"new line {i}\n" for i in range(20_000))
    with Agent() as agent:
        s = agent.session(tmp_path)
        res = s.tool("write", {"file_path": "big.txt", "content": content})
        assert res.ok
        meta = res.metadata
        change = meta["change"]
        assert change["compacted"] is True and "diff" not in meta
        diff = change["unified_diff"]
        assert diff.startswith("--- a/big.txt\n+++ b/big.txt\n")
        assert 30 * 1024 < len(diff.encode()) <= 32 * 1024 + 200
        # reference shape: two 8 KiB previews + one 32 KiB diff + small fields (≈ 49 KB), never two diffs
        raw = _string_bytes(meta)
        assert 48 * 1024 < raw < 50 * 1024, raw
        assert len(json.dumps(meta, ensure_ascii=False).encode()) < 56 * 1024  # + JSON escapes of newlines
        tool_end = [e for e in s.events() if e.type == "tool_end"][-1]
        assert len(json.dumps(tool_end.data, ensure_ascii=False).encode()) < 40 * 1024
        small = s.tool("write", {"file_path": "small.txt", "content": "a\nb\n"})
        assert (
            small.metadata["diff"].startswith("--- /dev/null\n")
            and small.metadata["change"]["compacted"] is False
        )


def _string_bytes(value: object) -> int:
    if isinstance(value, str):
        return len(value.encode())
    if isinstance(value, dict):
        return sum(_string_bytes(v) for v in value.values())
    if isinstance(value, list):
        return sum(_string_bytes(v) for v in value)
    return 0
