"""The ``a3s-fleet`` CLI: tools, tool, artifact; one-line errors and exit codes (issue 2 §5)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

BIN = [sys.executable, "-m", "orchestrator.cli"]


def run(args: list[str], cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("A3S_")}
    return subprocess.run(
        [*BIN, *args], cwd=cwd, input=stdin, capture_output=True, text=True, env=env, timeout=60
    )


def test_cli_tools_lists_surface(workspace: Path) -> None:
    out = run(["tools"], workspace)
    assert out.returncode == 0, out.stderr
    assert (
        out.stdout.splitlines()[0].split()[0]
        == sorted(line.split()[0] for line in out.stdout.splitlines())[0]
    )
    defs = json.loads(run(["tools", "--json"], workspace).stdout)
    assert {"read", "ls", "batch"} <= {d["name"] for d in defs}


def test_cli_tool_prints_output_and_json_with_exit_codes(workspace: Path) -> None:
    ok = run(["tool", "read", '{"file_path": "README.md"}'], workspace)
    assert ok.returncode == 0 and "hello world" in ok.stdout
    as_json = run(
        ["tool", "read", "-", "--json", "--workspace", str(workspace)],
        Path("/"),
        stdin='{"file_path": "README.md"}',
    )
    data = json.loads(as_json.stdout)
    assert set(data) == {"name", "output", "exit_code", "metadata", "error_kind"} and data["exit_code"] == 0
    missing = run(["tool", "read", '{"file_path": "nope"}', "--json"], workspace)
    assert missing.returncode == 1 and json.loads(missing.stdout)["error_kind"]["type"] == "not_found"


def test_cli_errors_are_one_line_without_traceback(workspace: Path) -> None:
    bad_json = run(["tool", "read", "{not json"], workspace)
    assert (
        bad_json.returncode == 2
        and "Traceback" not in bad_json.stderr
        and "not valid JSON" in bad_json.stderr
    )
    bad_ws = run(["tool", "ls", "{}", "--workspace", "/definitely/not/here"], workspace)
    assert bad_ws.returncode == 2 and "Traceback" not in bad_ws.stderr
    assert len(bad_ws.stderr.strip().splitlines()) == 1


def test_k8_cli_integer_over_the_int_string_limit_is_a_one_line_error(workspace: Path) -> None:
    """K-8: valid JSON that json.loads refuses (an integer over 4300 digits) is a usage error naming it."""
    long_int = run(["tool", "read", '{"file_path": "README.md", "offset": 1' + "0" * 5000 + "}"], workspace)
    assert long_int.returncode == 2 and "Traceback" not in long_int.stderr, long_int.stderr[-500:]
    assert len(long_int.stderr.strip().splitlines()) == 1
    assert "integer" in long_int.stderr and "longer than 4300 digits" in long_int.stderr


def test_cli_artifact_prints_original_bytes(workspace: Path) -> None:
    (workspace / "huge.txt").write_text("".join(f"{i:06d} " + "y" * 120 + "\n" for i in range(2000)))
    calls = [
        {"tool": "read", "args": {"file_path": "huge.txt", "offset": o, "limit": 600}} for o in (0, 600, 1200)
    ]
    res = run(
        ["tool", "batch", json.dumps({"invocations": calls}), "--json", "--policy", "context-efficient"],
        workspace,
    )
    ev = json.loads(res.stdout)["metadata"]["a3s_tool_result_evidence"]
    assert ev["loss_mode"] != "none"
    art = run(["artifact", ev["content_ref"]], workspace)
    assert art.returncode == 0 and "     1\t000000 " in art.stdout
    assert len(art.stdout.encode()) == ev["original_bytes"]


def test_k8_cli_tool_failures_from_raising_paths_are_one_line(workspace: Path) -> None:
    """Issue 15 item 6: OS errors, deep arguments and broken input never print a traceback or an empty error."""
    deep = '{"x": ' * 5000 + "1" + "}" * 5000
    cases = [
        ["tool", "read", json.dumps({"file_path": "a" * 300})],
        ["tool", "ls", json.dumps({"path": "a" * 300})],
        ["tool", "read", '{"file_path": "README.md", "x": ' + deep + "}"],
        ["tool", "git", json.dumps({"command": "log", "ref": "r" * 100_000})],
        ["artifact", "a3s://tool-output/" + "x" * 5000],
        ["tool", "read", '{"file_path": "README.md"}', "--workspace", str(workspace / "missing")],
    ]
    for args in cases:
        out = run(args, workspace)
        assert out.returncode != 0, (args[:2], out.stdout[:200])
        assert "Traceback" not in out.stderr, out.stderr[-2000:]
        lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
        assert lines, "a failure always says something"
        assert lines[0].strip() not in ("error:", "error: "), out.stderr
        assert len(out.stderr.encode()) < 20_000, "error messages are bounded"
