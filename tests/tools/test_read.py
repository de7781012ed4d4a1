"""``read`` single and batch modes (SPEC B-1, B-4; REFERENCE 4.2)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator import Agent


def test_b1_read_numbers_lines_and_continues_with_offset(agent: Agent, workspace: Path) -> None:
    s = agent.session(workspace)
    first = s.tool("read", {"file_path": "notes.txt", "limit": 10})
    assert first.output.splitlines()[0] == "     1\tline 1"
    assert first.output.rstrip().endswith("... (more lines available; continue with offset=10)")
    rng = first.metadata["range"]
    assert (
        rng["next_offset"] == 10
        and rng["total_lines"] == 300
        and rng["returned_lines"] == 10
        and not rng["eof"]
    )
    nxt = s.tool("read", {"file_path": "notes.txt", "offset": rng["next_offset"], "limit": 5})
    assert nxt.output.splitlines()[0] == "    11\tline 11"


def test_b1_read_offset_at_and_past_eof(agent: Agent, workspace: Path) -> None:
    s = agent.session(workspace)
    at_end = s.tool("read", {"file_path": "notes.txt", "offset": 300})
    assert at_end.exit_code == 0 and "(end of file: offset 300 equals file length)" in at_end.output
    past = s.tool("read", {"file_path": "notes.txt", "offset": 301})
    assert past.exit_code == 1 and "Offset 301 exceeds file length (300 lines)" in past.output


def test_read_limit_is_clamped_and_recorded(agent: Agent, workspace: Path) -> None:
    res = agent.session(workspace).tool("read", {"file_path": "notes.txt", "limit": 5000})
    assert res.metadata["range"]["limit_clamped"] is True and res.metadata["range"]["applied_limit"] == 2000


def test_read_long_lines_are_cut_utf8_safely(agent: Agent, workspace: Path) -> None:
    (workspace / "wide.txt").write_text("é" * 3000 + "\n")
    out = agent.session(workspace).tool("read", {"file_path": "wide.txt"}).output
    line = out.splitlines()[0].split("\t", 1)[1]
    assert line.endswith("…") and len(line[:-1].encode()) <= 2000


def test_read_file_path_and_files_are_exclusive(agent: Agent, workspace: Path) -> None:
    s = agent.session(workspace)
    both = s.tool("read", {"file_path": "a", "files": [{"path": "b"}]})
    assert (
        both.error_kind
        and both.error_kind["type"] == "invalid_argument"
        and "mutually exclusive" in both.output
    )
    top_level_offset = s.tool("read", {"files": [{"path": "a"}], "offset": 3})
    assert top_level_offset.error_kind and top_level_offset.error_kind["type"] == "invalid_argument"


def _resume_all(session: Any, files: list[dict[str, Any]], budget: int) -> tuple[list[str], int]:
    """Follow batch continuations until complete; return every numbered line seen, and the round count."""
    seen: list[str] = []
    rounds = 0
    while True:
        rounds += 1
        res = session.tool("read", {"files": files, "max_output_bytes": budget})
        assert res.exit_code == 0, res.output
        assert len(res.output.encode()) <= budget
        current = None
        for line in res.output.splitlines():
            if line.startswith("=== "):
                current = line[4:-4]
            elif "\t" in line and current:
                seen.append(f"{current}:{line.split(chr(9))[0].strip()}")
        batch = res.metadata["batch"]
        if not batch["truncated"]:
            return seen, rounds
        files = json.loads(json.dumps(batch["continuation"]))  # verbatim, as a client would
        assert rounds < 100


def test_b4_read_files_continuation_resumes_exactly_without_repeats(agent: Agent, workspace: Path) -> None:
    for name in ("a.txt", "b.txt", "c.txt"):
        (workspace / name).write_text("".join(f"{name} row {i}\n" for i in range(1, 151)))
    s = agent.session(workspace)
    seen, rounds = _resume_all(
        s, [{"path": "a.txt"}, {"path": "b.txt", "offset": 10, "limit": 100}, {"path": "c.txt"}], 2048
    )
    expected = (
        [f"a.txt:{i}" for i in range(1, 151)]
        + [f"b.txt:{i}" for i in range(11, 111)]
        + [f"c.txt:{i}" for i in range(1, 151)]
    )
    assert seen == expected
    assert rounds > 3


def test_b4_one_unreadable_file_does_not_drop_the_others(agent: Agent, workspace: Path) -> None:
    res = agent.session(workspace).tool(
        "read", {"files": [{"path": "README.md"}, {"path": "missing.txt"}, {"path": "src/app.py"}]}
    )
    assert res.exit_code == 0
    batch = res.metadata["batch"]
    assert (
        batch["status"] == "partial_failure" and batch["failed_files"] == 1 and batch["successful_files"] == 2
    )
    order = [line for line in res.output.splitlines() if line.startswith("===")]
    assert order == ["=== README.md ===", "=== missing.txt ===", "=== src/app.py ==="]
    assert "(Complete: all 3 file(s) processed.)" in res.output


def test_b4_all_files_failing_is_an_error(agent: Agent, workspace: Path) -> None:
    res = agent.session(workspace).tool("read", {"files": [{"path": "x"}, {"path": "y"}]})
    assert res.exit_code == 1 and res.error_kind == {"type": "partial_failure", "failed": 2, "total": 2}


def test_b4_duplicate_paths_and_tiny_budget_are_rejected(agent: Agent, workspace: Path) -> None:
    s = agent.session(workspace)
    dup = s.tool("read", {"files": [{"path": "README.md"}, {"path": "README.md"}]})
    assert "Duplicate path in files" in dup.output
    (workspace / "fat.txt").write_text("x" * 1900 + "\n")
    tiny = s.tool("read", {"files": [{"path": "fat.txt"}], "max_output_bytes": 1024})
    assert tiny.exit_code == 1 and "max_output_bytes=1024 is too small" in tiny.output


@pytest.mark.parametrize("budget", [1024, 1500, 4096, 65536])
def test_b4_budget_includes_headers_and_footer(agent: Agent, workspace: Path, budget: int) -> None:
    res = agent.session(workspace).tool(
        "read", {"files": [{"path": "notes.txt"}, {"path": "README.md"}], "max_output_bytes": budget}
    )
    assert len(res.output.encode()) <= budget
    assert res.metadata["batch"]["output_bytes"] == len(res.output.encode())


def test_b6_read_refuses_paths_outside_the_workspace(agent: Agent, workspace: Path) -> None:
    s = agent.session(workspace)
    for bad in ("../etc/passwd", "/etc/passwd", "src/../../x", ".a3s/artifacts/x"):
        res = s.tool("read", {"file_path": bad})
        assert res.error_kind and res.error_kind["type"] == "path_outside_workspace", bad
