"""``write``: atomic create/replace inside the workspace (SPEC B-3, B-6; REFERENCE 4.16)."""

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
from tools.write import TOOL


async def _write(root: Path, *, session_id: str = "s-1", **args: Any) -> ToolResult:
    ctx = make_context(LocalWorkspace(root), tool_name="write")
    ctx.session_id = session_id
    try:
        out = await TOOL.run(ctx, TOOL.validate(args))
    except ToolError as exc:
        return ToolResult.failure("write", exc)
    return out if isinstance(out, ToolResult) else ToolResult.success("write", out)


def write(root: Path, *, session_id: str = "s-1", **args: Any) -> ToolResult:
    return asyncio.run(_write(root, session_id=session_id, **args))


def leftovers(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.name.endswith((_fileio.TEMP_SUFFIX, _fileio.BACKUP_SUFFIX))]


def test_write_creates_a_file_and_its_parent_directories(tmp_path: Path) -> None:
    res = write(tmp_path, file_path="pkg/sub/mod.py", content="x = 1\n")
    assert res.ok and res.output == "Wrote 6 bytes to pkg/sub/mod.py (created)"
    p = tmp_path / "pkg" / "sub" / "mod.py"
    assert p.read_bytes() == b"x = 1\n" and p.stat().st_mode & 0o7777 == 0o644
    m = res.metadata
    assert m["created"] is True and m["before"] == "" and m["after"] == "x = 1\n"
    assert m["before_sha256"] is None and m["after_bytes"] == 6 and m["before_bytes"] == 0
    assert m["diff"].startswith("--- /dev/null\n+++ b/pkg/sub/mod.py\n")
    assert not leftovers(tmp_path)


def test_write_replaces_content_and_keeps_the_mode(tmp_path: Path) -> None:
    p = tmp_path / "run.sh"
    p.write_text("echo old\n")
    p.chmod(0o750)
    res = write(tmp_path, file_path="run.sh", content="echo new\n")
    assert res.ok and res.output.endswith("(updated)")
    assert p.read_text() == "echo new\n" and p.stat().st_mode & 0o7777 == 0o750
    assert res.metadata["before"] == "echo old\n" and res.metadata["created"] is False
    assert "-echo old\n+echo new\n" in res.metadata["diff"]


def test_write_keeps_content_bytes_exactly(tmp_path: Path) -> None:
    content = "crlf\r\nno final newline é"
    res = write(tmp_path, file_path="t.txt", content=content)
    assert res.ok and (tmp_path / "t.txt").read_bytes() == content.encode()
    assert "\\ No newline at end of file" in res.metadata["diff"]


def test_write_through_an_inner_symlink_replaces_the_target(tmp_path: Path) -> None:
    (tmp_path / "real.txt").write_text("a\n")
    (tmp_path / "alias.txt").symlink_to("real.txt")
    res = write(tmp_path, file_path="alias.txt", content="b\n")
    assert res.ok and (tmp_path / "real.txt").read_text() == "b\n" and (tmp_path / "alias.txt").is_symlink()


def test_write_refuses_a_directory_and_a_file_used_as_a_directory(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    res = write(tmp_path, file_path="d", content="x")
    assert res.exit_code == 1 and "is a directory" in res.output and (tmp_path / "d").is_dir()
    (tmp_path / "f").write_text("keep\n")
    res2 = write(tmp_path, file_path="f/inner.txt", content="x")
    assert res2.exit_code == 1 and (tmp_path / "f").read_text() == "keep\n"
    assert not leftovers(tmp_path)


def test_b6_write_refuses_paths_outside_the_workspace(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    (tmp_path / "outside").mkdir()
    (root / "out").symlink_to(tmp_path / "outside")
    for path in ("../escape.txt", "/tmp/abs.txt", "out/x.txt", "out/new/deeper.txt", ".a3s/x"):
        res = write(root, file_path=path, content="x")
        assert res.error_kind is not None and res.error_kind["type"] == "path_outside_workspace", path
    assert list((tmp_path / "outside").iterdir()) == []
    assert not (tmp_path / "escape.txt").exists()


def test_write_version_conflict_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = tmp_path / "cfg.ini"
    p.write_text("a=1\n")
    monkeypatch.setattr(_fileio, "_before_commit", lambda paths: p.write_text("a=changed-elsewhere\n"))
    res = write(tmp_path, file_path="cfg.ini", content="a=2\n")
    assert res.error_kind is not None and res.error_kind["type"] == "version_conflict"
    assert "Concurrent modification detected" in res.output
    assert p.read_text() == "a=changed-elsewhere\n" and not leftovers(tmp_path)


def test_write_conflicts_when_a_new_file_appears_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = tmp_path / "new.txt"
    monkeypatch.setattr(_fileio, "_before_commit", lambda paths: p.write_text("raced\n"))
    res = write(tmp_path, file_path="new.txt", content="mine\n")
    assert res.error_kind is not None and res.error_kind["type"] == "version_conflict"
    assert p.read_text() == "raced\n"


def test_write_needs_a_session_and_a_cancel_before_commit_writes_nothing(tmp_path: Path) -> None:
    res = write(tmp_path, session_id="", file_path="a.txt", content="x")
    assert res.exit_code == 1 and not (tmp_path / "a.txt").exists()
    ctx = make_context(LocalWorkspace(tmp_path), tool_name="write")
    ctx.cancelled.set()
    with pytest.raises(ToolError) as exc:
        asyncio.run(TOOL.run(ctx, TOOL.validate({"file_path": "a.txt", "content": "x"})))
    assert exc.value.kind == "cancelled" and not (tmp_path / "a.txt").exists() and not leftovers(tmp_path)


def test_b3_big_write_metadata_compacts_through_the_kernel_projection(tmp_path: Path) -> None:
    """B-3: the kernel's §6.5 compactor turns this tool's whole before/after into previews + artifacts."""
    from kernel.artifacts import MemoryArtifactStore
    from kernel.projection import compact_change_metadata

    (tmp_path / "big.txt").write_text("old\n" * 20_000)
    content = "new line\n" * 20_000
    res = write(tmp_path, file_path="big.txt", content=content)
    assert res.ok and res.metadata["after"] == content
    store = MemoryArtifactStore()
    compacted = compact_change_metadata(res.metadata, store, "write")
    change = compacted["change"]
    assert change["compacted"] is True and change["after"]["sha256"] == res.metadata["after_sha256"]
    assert len(compacted["after"].encode()) < 9 * 1024 and len(compacted["before"].encode()) < 9 * 1024
    assert store.get(change["after"]["artifact"]["artifact_uri"]) == content.encode()
    assert "diff" not in compacted, "the diff is carried once: it moved to change.unified_diff"
    assert change["unified_diff"].startswith("--- a/big.txt\n+++ b/big.txt\n")
    assert len(change["unified_diff"].encode()) <= 32 * 1024 + 200
