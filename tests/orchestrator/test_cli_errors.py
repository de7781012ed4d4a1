"""CLI errors are one line (issue 13 item 5; SPEC K-8, F-6): ``status``, ``events`` and ``worker`` with a
malformed or unreachable broker; one default broker for every command (embedded when none is given, and
each command says which broker it uses); ``-h``; an unknown tool names the nearest ones; ``events`` of an
unknown session says so; ``verify`` prints its session id and writes it into its reports, and checks
its report paths before the plan runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.redis_server import free_port

BIN = [sys.executable, "-m", "orchestrator.cli"]


def run(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("A3S_")}
    return subprocess.run(
        [*BIN, *args], cwd=cwd, capture_output=True, text=True, env={**clean, **env}, timeout=90
    )


def one_error_line(out: subprocess.CompletedProcess[str], code: int = 2) -> str:
    assert out.returncode == code, (out.returncode, out.stdout[-500:], out.stderr[-2000:])
    assert "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


def _plan(path: Path, commands: list[dict[str, object]]) -> Path:
    path.write_text(json.dumps({"title": "t", "commands": commands}))
    return path


@pytest.mark.parametrize("command", [["status"], ["events", "sess-x"], ["worker"]])
def test_k8_fleet_commands_with_a_malformed_broker_are_one_line(tmp_path: Path, command: list[str]) -> None:
    for url, needle in (
        ("foo://x", "must start with redis://"),
        ("not a url", "must start with redis://"),
        ("redis://h:99999/0", "malformed broker URL"),
    ):
        line = one_error_line(run([*command, "--broker", url], tmp_path))
        assert "invalid_argument" in line and needle in line


@pytest.mark.parametrize("command", [["status"], ["events", "sess-x"], ["worker"]])
def test_k8_fleet_commands_with_an_unreachable_broker_are_one_line_naming_it(
    tmp_path: Path, command: list[str]
) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    line = one_error_line(run([*command, "--broker", url], tmp_path))
    assert line.startswith(f"error: transport: broker {url} unreachable")


def test_k8_credentials_in_a_broker_url_are_never_printed(tmp_path: Path) -> None:
    url = f"redis://user:s3cret@127.0.0.1:{free_port()}/0"
    line = one_error_line(run(["status", "--broker", url], tmp_path))
    assert "s3cret" not in line and "redis://***@127.0.0.1:" in line


def test_f1_no_broker_means_embedded_for_every_command(tmp_path: Path) -> None:
    status = run(["status"], tmp_path)
    assert status.returncode == 0 and status.stdout.startswith("broker   none: embedded")
    as_json = json.loads(run(["status", "--json"], tmp_path).stdout)
    assert as_json["broker"] is None and as_json["mode"] == "embedded"
    for command, who in ((["events", "s"], "events"), (["worker"], "a worker")):
        line = one_error_line(run(command, tmp_path))
        assert f"no broker: {who} needs a fleet" in line and "A3S_BROKER_URL" in line
    verify = run(["verify", str(_plan(tmp_path / "p.json", [{"id": "a", "command": "true"}]))], tmp_path)
    assert verify.returncode == 0 and ", embedded, session " in verify.stdout.splitlines()[0]


def test_cli_dash_h_is_help_everywhere(tmp_path: Path) -> None:
    for command in ([], ["tools"], ["tool"], ["verify"], ["status"], ["events"], ["worker"], ["artifact"]):
        out = run([*command, "-h"], tmp_path)
        assert out.returncode == 0 and out.stdout.startswith("Usage: "), (command, out.stderr)


def test_k8_an_unknown_tool_names_the_nearest_ones(tmp_path: Path) -> None:
    line = one_error_line(run(["tool", "reed", "{}"], tmp_path))
    assert line.startswith("error: unknown tool 'reed'; did you mean read") and "a3s-fleet tools" in line
    line = one_error_line(run(["tool", "zzqqxx", "{}"], tmp_path))
    assert line == "error: unknown tool 'zzqqxx' (a3s-fleet tools lists them)"


@pytest.mark.fleet
def test_f5_events_of_an_unknown_session_says_so(tmp_path: Path, redis_urls: Callable[[int], str]) -> None:
    url = redis_urls(9)
    line = one_error_line(run(["events", "sess-never-was", "--broker", url], tmp_path), code=1)
    assert (
        line
        == f"error: no events for session 'sess-never-was' on {url} (unknown session id, or its events expired)"
    )
    follow = run(["events", "sess-never-was", "--broker", url, "--follow", "--idle-timeout", "0.5"], tmp_path)
    assert follow.returncode == 0 and "has no events on" in follow.stderr and follow.stdout == ""


def test_f6_verify_prints_its_session_id_and_writes_it_into_both_reports(tmp_path: Path) -> None:
    plan = _plan(tmp_path / "p.json", [{"id": "a", "command": "true"}])
    out = run(["verify", str(plan), "--json", "r.json", "--junit", "j.xml"], tmp_path)
    assert out.returncode == 0, out.stderr
    header = out.stdout.splitlines()[0]
    session_id = header.rsplit("session ", 1)[1]
    assert session_id.startswith("sess") or session_id
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["session_id"] == session_id
    props = {p.get("name"): p.get("value") for p in ET.parse(tmp_path / "j.xml").getroot().iter("property")}
    assert props["session_id"] == session_id


def test_f6_verify_checks_its_report_paths_before_the_plan_runs(tmp_path: Path) -> None:
    plan = _plan(tmp_path / "p.json", [{"id": "a", "command": "touch ran.marker"}])
    (tmp_path / "adir").mkdir()
    (tmp_path / "blocker").write_text("a file, not a directory")
    cases = [
        (["--json", "adir"], "is a directory"),
        (["--junit", "blocker/j.xml"], "cannot write report"),
        (["--json", "same.out", "--junit", "same.out"], "the same file"),
    ]
    for flags, needle in cases:
        line = one_error_line(run(["verify", str(plan), *flags], tmp_path))
        assert needle in line, line
        assert not (tmp_path / "ran.marker").exists()  # nothing ran
    ok = run(["verify", str(plan), "--json", "new/dir/r.json"], tmp_path)  # parents are created
    assert (
        ok.returncode == 0 and (tmp_path / "new/dir/r.json").exists() and (tmp_path / "ran.marker").exists()
    )
    assert not list((tmp_path / "new/dir").glob(".*probe"))


@pytest.mark.parametrize(
    "command",
    [
        ["tools"],
        ["tool", "read", '{"file_path": "big.txt"}'],
        ["verify", "p.json"],
        ["workflow", "history", "wf-pipe", "--json"],
    ],
)
def test_k8_a_reader_that_stops_early_ends_the_command_quietly(tmp_path: Path, command: list[str]) -> None:
    """`a3s-fleet … | head -1`: the reader closes the pipe; the command stops and says nothing, as
    click ends any command whose stdout is gone (exit 1) — not `error: BrokenPipeError`, exit 2."""
    (tmp_path / "big.txt").write_text("line\n" * 5000)
    _plan(tmp_path / "p.json", [{"id": "a", "command": "true"}])
    (tmp_path / "flow.js").write_text(
        "async function run(wf) { await wf.step('a', 'ls', {}); await wf.step('b', 'ls', {}); return 1 }"
    )
    made = run(["workflow", "run", "flow.js", "--run-id", "wf-pipe"], tmp_path)
    assert made.returncode == 0, made.stderr
    clean = {k: v for k, v in os.environ.items() if not k.startswith("A3S_")}
    with subprocess.Popen(
        [*BIN, *command], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=clean
    ) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()  # the reader is gone before the first line is written
        err = proc.stderr.read().decode()
        code = proc.wait(timeout=90)
    assert (code, err) == (1, "")


@pytest.mark.parametrize(
    "command",
    [
        ["verify", "p.json", "--json", "r.json"],
        ["tool", "write", '\'{"file_path": "ran.marker", "content": "x"}\''],
        ["run", "hi", "--model", "scripted:demo.json", "--allow", "write"],
    ],
)
def test_k8_a_command_started_with_stdout_closed_still_runs(tmp_path: Path, command: list[str]) -> None:
    """`a3s-fleet … >&-` (a cron line, a daemon): Python has no sys.stdout; verify's progress raised
    AttributeError with a traceback, `tool` and `run` failed with `error: AttributeError`, nothing ran."""
    _plan(tmp_path / "p.json", [{"id": "a", "command": "touch ran.marker"}])
    write = {"name": "write", "arguments": {"file_path": "ran.marker", "content": "x"}}
    (tmp_path / "demo.json").write_text(json.dumps({"turns": [{"tool_calls": [write]}, {"text": "done"}]}))
    clean = {k: v for k, v in os.environ.items() if not k.startswith("A3S_")}
    cli = " ".join([*BIN, *command])
    out = subprocess.run(
        ["bash", "-c", f"exec >&-; {cli}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=clean,
        timeout=90,
    )
    assert (out.returncode, "Traceback" in out.stderr, "error" in out.stderr) == (0, False, False), out.stderr
    assert (tmp_path / "ran.marker").exists()
