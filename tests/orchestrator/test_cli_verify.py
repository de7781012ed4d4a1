"""``a3s-fleet verify PLAN``: exit codes, report files, live progress, README's main job (SPEC F-6, X-3)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from flows.verify import CommandResult, VerificationReport, build_plan
from kernel.artifact_files import FileArtifactStore
from orchestrator.cli_verify import Progress, register

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture()
def cli() -> click.Group:
    group = click.Group("a3s-fleet")
    register(group)
    return group


@pytest.fixture(autouse=True)
def embedded(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests prove the embedded default: no broker from the environment."""
    monkeypatch.delenv("A3S_BROKER_URL", raising=False)


def write_plan(path: Path, commands: list[dict], title: str = "ci") -> Path:
    path.write_text(json.dumps({"title": title, "commands": commands}))
    return path


def invoke(cli: click.Group, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["verify", *args], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def test_f6_cli_exits_0_when_required_pass_and_writes_json_and_junit(
    cli: click.Group, tmp_path: Path
) -> None:
    plan = write_plan(
        tmp_path / "plan.json",
        [
            {"id": "unit", "kind": "test", "command": "echo tests ok"},
            {"id": "lint", "kind": "lint", "command": "true"},
            {"id": "extra", "kind": "env", "command": "echo missing >&2; exit 4", "required": False},
        ],
    )
    out = tmp_path / "reports"
    code, stdout, stderr = invoke(
        cli,
        str(plan),
        "--workspace",
        str(tmp_path),
        "--json",
        str(out / "r.json"),
        "--junit",
        str(out / "j.xml"),
    )
    assert code == 0, stdout + stderr
    assert "✓ unit [test]" in stdout and "✗ extra [env] (optional)" in stdout and "exit code 4" in stdout
    assert "PASSED: 2/3 passed" in stdout and "optional failed (ignored): extra" in stdout
    assert "\r" not in stdout  # not a terminal: no spinner
    report = json.loads((out / "r.json").read_text())
    assert report["verdict"] == "passed" and [c["status"] for c in report["commands"]] == [
        "passed",
        "passed",
        "failed",
    ]
    suite = ET.parse(out / "j.xml").getroot().find("testsuite")
    assert (suite.get("name"), suite.get("tests"), suite.get("failures"), suite.get("errors")) == (
        "ci",
        "3",
        "0",
        "0",
    )


def test_f6_cli_exits_1_on_a_required_failure_and_still_writes_reports(
    cli: click.Group, tmp_path: Path
) -> None:
    plan = write_plan(
        tmp_path / "plan.json",
        [
            {"id": "ok", "command": "true"},
            {
                "id": "unit",
                "kind": "test",
                "command": "for i in 1 2 3; do echo step $i; done; echo FAILED >&2; exit 1",
            },
        ],
    )
    code, stdout, _ = invoke(
        cli,
        str(plan),
        "-w",
        str(tmp_path),
        "--json",
        str(tmp_path / "r.json"),
        "--junit",
        str(tmp_path / "j.xml"),
    )
    assert code == 1
    assert "✗ unit [test]" in stdout and "FAILED: 1/2 passed" in stdout and "required failed: unit" in stdout
    assert (
        "--- unit (required) exit code 1" in stdout and "    FAILED" in stdout
    )  # the output tail, for CI logs
    assert json.loads((tmp_path / "r.json").read_text())["verdict"] == "failed"
    suite = ET.parse(tmp_path / "j.xml").getroot().find("testsuite")
    assert suite.get("failures") == "1"


@pytest.mark.parametrize(
    ("name", "text", "needle"),
    [
        (
            "dup.json",
            '{"title": "t", "commands": [{"id": "a", "command": "true"}, {"id": "a", "command": "true"}]}',
            "used twice",
        ),
        ("syntax.toml", 'title = "t"\n[[commands]\n', "invalid TOML"),
        ("empty.json", '{"title": "t", "commands": []}', "at least 1 item"),
        (
            "range.toml",
            'title = "t"\n[[commands]]\nid = "a"\ncommand = "true"\ntimeout_ms = 5\n',
            "timeout_ms",
        ),
    ],
)
def test_f6_cli_exits_2_on_a_bad_plan_with_one_line(
    cli: click.Group, tmp_path: Path, name: str, text: str, needle: str
) -> None:
    plan = tmp_path / name
    plan.write_text(text)
    code, stdout, stderr = invoke(cli, str(plan), "-w", str(tmp_path), "--json", str(tmp_path / "r.json"))
    assert code == 2
    assert (
        len(stderr.strip().splitlines()) == 1 and stderr.startswith("error: bad plan: ") and needle in stderr
    )
    assert "Traceback" not in stderr and stdout == ""
    assert not (tmp_path / "r.json").exists()


def test_f6_cli_exits_2_on_a_missing_plan_or_workspace(cli: click.Group, tmp_path: Path) -> None:
    code, _, stderr = invoke(cli, str(tmp_path / "nope.toml"))
    assert code == 2 and stderr.startswith("error: bad plan: plan file not found")
    plan = write_plan(tmp_path / "p.json", [{"id": "a", "command": "true"}])
    code, _, stderr = invoke(cli, str(plan), "--workspace", str(tmp_path / "not-here"))
    assert code == 2 and stderr.startswith("error: bad workspace") and len(stderr.strip().splitlines()) == 1


def test_f6_cli_reports_a_timeout_and_keeps_the_artifact_of_large_output(
    cli: click.Group, tmp_path: Path
) -> None:
    plan = write_plan(
        tmp_path / "p.json",
        [
            {"id": "hang", "command": "sleep 30", "timeout_ms": 1000},
            {"id": "big", "command": "seq 1 100000"},
        ],
    )
    t0 = time.monotonic()
    code, stdout, _ = invoke(cli, str(plan), "-w", str(tmp_path), "--json", str(tmp_path / "r.json"))
    assert code == 1 and time.monotonic() - t0 < 10
    assert "✗ hang [check]" in stdout and "timed out after 1000 ms" in stdout
    big = json.loads((tmp_path / "r.json").read_text())["commands"][1]
    assert big["status"] == "passed" and big["artifact_ref"].startswith("a3s://tool-output/bash/")
    # the default session keeps artifacts under the workspace, so `a3s-fleet artifact` can read them later
    stored = FileArtifactStore(tmp_path / ".a3s" / "artifacts").get(big["artifact_ref"])
    assert len(stored) == big["evidence"]["original_bytes"] and stored.startswith(b"1\n2\n3\n")


def _fake(id: str, ok: bool, required: bool = True) -> CommandResult:
    return CommandResult(
        id=id,
        kind="test",
        description="",
        command="x",
        required=required,
        timeout_ms=1000,
        status="passed" if ok else "failed",
        exit_code=0 if ok else 2,
        duration_ms=1234,
        branch_ms=1300,
        timed_out=False,
        output="" if ok else "boom\n",
    )


class _Terminal(io.StringIO):
    encoding = "utf-8"

    def isatty(self) -> bool:
        return True


def test_f6_progress_draws_a_spinner_only_on_a_terminal() -> None:
    plan = build_plan({"title": "t", "commands": [{"id": "a", "command": "x"}, {"id": "b", "command": "x"}]})
    for stream, tty in ((_Terminal(), True), (io.StringIO(), False)):
        display = Progress(stream, plan)
        display.header("embedded")
        display.start()
        time.sleep(0.35)
        display.finished(_fake("a", True))
        display.finished(_fake("b", False))
        display.stop()
        display.summary(VerificationReport("t", [_fake("a", True), _fake("b", False)], 2000, 0.0))
        text = stream.getvalue()
        assert ("\r\x1b[K" in text) is tty and ("running: 0/2 done" in text) is tty
        finished = [line.split("\r\x1b[K")[-1] for line in text.rstrip("\n").split("\n")]
        assert "  ✓ a [test] 1.23s" in finished and "  ✗ b [test] 1.23s  exit code 2" in finished
        assert finished[-1] == "FAILED: 1/2 passed in 2.00s; required failed: b"


def test_f6_progress_falls_back_to_ascii_when_the_terminal_cannot_print_marks() -> None:
    stream = io.TextIOWrapper(io.BytesIO(), encoding="ascii")
    plan = build_plan({"title": "t", "commands": [{"id": "a", "command": "x"}]})
    display = Progress(stream, plan)
    display.header("embedded")
    display.finished(_fake("a", True))
    stream.seek(0)
    assert "  ok a [test] 1.23s" in stream.read()


def test_f6_readme_main_job_runs_on_the_embedded_default() -> None:
    """README's main job, as a new user runs it from the repository root: exit 0, well under a minute."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("A3S_")}
    for plan in ("examples/verify.toml", "examples/verify.json"):
        t0 = time.monotonic()
        done = subprocess.run(
            [str(REPO / ".venv" / "bin" / "a3s-fleet"), "verify", plan],
            cwd=REPO,
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        elapsed = time.monotonic() - t0
        assert done.returncode == 0, done.stdout + done.stderr
        assert "PASSED" in done.stdout.splitlines()[-1] and elapsed < 30
