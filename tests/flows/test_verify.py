"""Verification plans and reports: parsing, parallel runs, verdict, timeouts, evidence, JUnit (SPEC F-6, X-3)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from types import SimpleNamespace

import pytest

from flows.plan_files import load_plan, parse_plan
from flows.verify import (
    FAN_OUT_WIDTH,
    VERIFY_OUTPUT_BYTES,
    VERIFY_TAIL_BYTES,
    BranchSpec,
    CommandResult,
    VerificationPlan,
    VerificationReport,
    build_plan,
    run_plan,
    verification_policy,
)
from kernel.errors import InvalidArgument, NotFound
from kernel.options import SessionOptions
from orchestrator import Agent
from orchestrator.fanout import Branch

REPO = Path(__file__).resolve().parents[2]


def plan(*commands: dict, title: str = "t") -> VerificationPlan:
    return build_plan({"title": title, "commands": list(commands)})


def cmd(id: str, command: str, **extra: object) -> dict:
    return {"id": id, "command": command, **extra}


# ---- parsing ----------------------------------------------------------------------------------


def test_f6_shipped_examples_parse_identically_from_json_and_toml() -> None:
    toml_plan = load_plan(REPO / "examples" / "verify.toml")
    json_plan = load_plan(REPO / "examples" / "verify.json")
    assert toml_plan == json_plan
    assert len(toml_plan.commands) >= 4
    assert any(not c.required for c in toml_plan.commands) and any(c.required for c in toml_plan.commands)


def test_f6_plan_defaults_and_camel_case_timeout() -> None:
    """F-6: kind/description/required/timeout_ms have defaults; the reference's ``timeoutMs`` is accepted."""
    p = plan(cmd("a", "true"), cmd("b", "true", kind="lint", required=False, timeoutMs=5000))
    a, b = p.commands
    assert (a.kind, a.description, a.required, a.timeout_ms) == ("check", "", True, 600_000)
    assert (b.kind, b.required, b.timeout_ms) == ("lint", False, 5000)


def test_f6_toml_and_json_text_give_the_same_plan() -> None:
    toml_text = 'title = "x"\n[[commands]]\nid = "u"\nkind = "test"\ncommand = "echo hi"\ntimeout_ms = 2000\n'
    json_text = json.dumps(
        {"title": "x", "commands": [{"id": "u", "kind": "test", "command": "echo hi", "timeout_ms": 2000}]}
    )
    assert parse_plan(toml_text, "toml") == parse_plan(json_text, "json")


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        ({"title": "t", "commands": [cmd("a", "true"), cmd("a", "false")]}, "'a' is used twice"),
        ({"title": "t", "commands": []}, "commands: Tuple should have at least 1 item"),
        ({"title": "t", "commands": [{"id": "a"}]}, "commands[0].command: Field required"),
        ({"title": "t", "commands": [cmd("  ", "true")]}, "commands[0].id: id must not be blank"),
        ({"title": "t", "commands": [cmd("a", "   ")]}, "commands[0].command: command must not be blank"),
        ({"title": "t", "commands": [cmd("a", "true", timeout_ms=10)]}, "commands[0].timeout_ms"),
        (
            {"title": "t", "commands": [cmd("a", "true", timeout_ms=3_600_001)]},
            "less than or equal to 3600000",
        ),
        ({"title": "t", "commands": [cmd("a", "true", retries=2)]}, "commands[0].retries: Extra inputs"),
        ({"commands": [cmd("a", "true")]}, "title: Field required"),
        ({"title": "two\nlines", "commands": [cmd("a", "true")]}, "title must be a single line"),
        ([1, 2], "a plan must be an object"),
    ],
)
def test_f6_invalid_plans_are_rejected_with_a_clear_message(data: object, needle: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        build_plan(data, source="p.json")
    assert needle in info.value.message and info.value.message.startswith("p.json: ")
    assert "\n" not in info.value.message


def test_f6_plan_file_syntax_errors_name_file_and_line(tmp_path: Path) -> None:
    bad_json = tmp_path / "p.json"
    bad_json.write_text('{"title": "t",\n "commands": [}\n')
    with pytest.raises(InvalidArgument, match=r"p\.json: invalid JSON at line 2"):
        load_plan(bad_json)
    bad_toml = tmp_path / "p.toml"
    bad_toml.write_text('title = "t"\n[[commands]\n')
    with pytest.raises(InvalidArgument, match=r"p\.toml: invalid TOML: .*line 2"):
        load_plan(bad_toml)
    sniffed = tmp_path / "plan.txt"  # no known suffix: a TOML document is recognised as TOML
    sniffed.write_text('title = "t"\n[[commands]]\nid = "a"\ncommand = "true"\n')
    assert load_plan(sniffed).commands[0].id == "a"
    with pytest.raises(NotFound, match="plan file not found"):
        load_plan(tmp_path / "missing.toml")


def test_f6_branches_have_the_fields_of_the_orchestrators_branch() -> None:
    """flows may not import orchestrator (ARCHITECTURE.md): its branch value mirrors ``Branch`` exactly."""
    assert [f.name for f in dataclasses.fields(BranchSpec)] == [f.name for f in dataclasses.fields(Branch)]


# ---- running ----------------------------------------------------------------------------------


def test_f6_x3_commands_run_in_parallel_not_one_after_another(agent: Agent, tmp_path: Path) -> None:
    session = agent.session(tmp_path)
    p = plan(*(cmd(f"s{i}", "sleep 0.5") for i in range(6)))
    t0 = time.monotonic()
    report = session.verify_commands(p.title, [c.model_dump() for c in p.commands])
    elapsed = time.monotonic() - t0
    assert report.passed and all(c.status == "passed" for c in report.commands)
    assert elapsed < 2.0, f"6 x sleep 0.5 took {elapsed:.2f}s: not parallel"  # serial would be >= 3.0 s
    assert all(c.duration_ms >= 450 for c in report.commands)


def test_f6_verdict_comes_from_required_commands_only(agent: Agent, tmp_path: Path) -> None:
    session = agent.session(tmp_path)
    optional_fails = run_plan(session, plan(cmd("ok", "echo fine"), cmd("opt", "exit 3", required=False)))
    assert optional_fails.passed and optional_fails.verdict == "passed"
    opt = optional_fails.commands[1]
    assert (opt.status, opt.exit_code, opt.ok, opt.blocking) == ("failed", 3, False, False)
    assert optional_fails.counts() == {
        "total": 2,
        "passed": 1,
        "failed": 1,
        "required_failed": 0,
        "optional_failed": 1,
        "timed_out": 0,
    }
    required_fails = run_plan(session, plan(cmd("ok", "echo fine"), cmd("bad", "echo boom >&2; exit 7")))
    assert not required_fails.passed and required_fails.verdict == "failed"
    bad = required_fails.commands[1]
    assert (bad.status, bad.exit_code, bad.blocking) == ("failed", 7, True)
    assert "boom" in bad.output
    assert required_fails.to_json()["counts"]["required_failed"] == 1


def test_f6_only_optional_commands_pass_even_when_they_fail(agent: Agent, tmp_path: Path) -> None:
    report = run_plan(agent.session(tmp_path), plan(cmd("o", "false", required=False)))
    assert report.passed and report.counts()["optional_failed"] == 1


def test_f6_a_timed_out_command_is_reported_and_the_others_are_unaffected(
    agent: Agent, tmp_path: Path
) -> None:
    session = agent.session(tmp_path)
    p = plan(
        cmd("slow", "echo started; sleep 30", timeout_ms=1000),
        cmd("quick", "sleep 0.3; echo done", timeout_ms=10_000),
        cmd("other", "true"),
    )
    t0 = time.monotonic()
    report = run_plan(session, p)
    assert time.monotonic() - t0 < 10
    slow, quick, other = report.commands
    assert slow.timed_out and slow.status == "timed_out" and slow.blocking
    assert slow.error_kind is not None and slow.error_kind["type"] == "timeout"
    assert 900 <= slow.duration_ms < 5000
    assert "started" in slow.output
    assert (quick.status, quick.exit_code, quick.timed_out) == ("passed", 0, False) and "done" in quick.output
    assert other.status == "passed"
    assert report.verdict == "failed" and report.counts()["timed_out"] == 1


def test_f6_large_output_is_bounded_with_evidence_and_a_readable_artifact(
    agent: Agent, tmp_path: Path
) -> None:
    """F-6 + R-6: the report keeps the bounded output; the artifact ref reads back the full original.

    ``bash`` caps what it captures at 100 KiB (B-2) and keeps an original of at most 1 MiB whole as
    an artifact; the verification policy then keeps head + tail of the capture in the report. The
    evidence describes the real original, cut twice: ``composite``."""
    session = agent.session(tmp_path, SessionOptions(tool_result_transform_policy=verification_policy()))
    report = run_plan(
        session, plan(cmd("big", "seq 1 100000"), cmd("yes", "yes | head -c 300000"), cmd("small", "echo hi"))
    )
    big, yes, small = report.commands
    assert big.status == "passed" and big.output_summary["total_bytes"] == 588_895
    assert big.output_summary["truncated"] is True and "stdout" not in big.output_summary
    assert len(big.output.encode()) <= VERIFY_OUTPUT_BYTES + 256  # the cap, plus the artifact line
    assert big.output.startswith("1\n2\n3\n") and "100000" in big.output[-VERIFY_TAIL_BYTES:]
    ev = big.evidence
    assert ev is not None and ev["loss_mode"] == "composite" and ev["original_bytes"] == 588_895
    assert big.artifact_ref is not None and big.artifact_ref == ev["content_ref"]
    assert big.artifact_ref.startswith("a3s://tool-output/bash/") and big.artifact_ref in big.output
    original = session.read_artifact(big.artifact_ref)
    assert len(original) == ev["original_bytes"] > len(big.output.encode())
    assert "sha256:" + hashlib.sha256(original).hexdigest() == ev["content_digest"]
    assert original.startswith(b"1\n2\n3\n") and b"\n99999\n100000\n" in original
    # repeated lines fold the capture; the original is still kept whole
    assert yes.evidence is not None and yes.evidence["loss_mode"] == "composite"
    assert yes.artifact_ref is not None and session.read_artifact(yes.artifact_ref) == b"y\n" * 150_000
    # a lossless result keeps an inline reference and no artifact
    assert small.artifact_ref is None and small.evidence is not None
    assert small.evidence["content_ref"].startswith("inline:sha256:")


def test_f6_a_cd_in_one_command_does_not_move_the_session_or_other_commands(
    agent: Agent, tmp_path: Path
) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "marker").write_text("root\n")
    session = agent.session(tmp_path)
    # "cd" finishes last, so without the subshell its directory would be the one the session keeps.
    report = run_plan(session, plan(cmd("here", "cat marker"), cmd("cd", "sleep 0.3; cd sub && pwd")))
    assert report.passed, [c.output for c in report.commands]
    assert report.commands[1].output.strip().endswith("/sub")
    assert session.bash("cat marker").strip() == "root"
    again = run_plan(session, plan(cmd("here-again", "cat marker")))
    assert again.passed and again.commands[0].output == "root\n"


def test_f6_x3_plans_wider_than_one_fan_out_run_in_waves(agent: Agent, tmp_path: Path) -> None:
    session = agent.session(tmp_path)
    n = FAN_OUT_WIDTH + 2
    seen: list[str] = []
    report = run_plan(
        session, plan(*(cmd(f"c{i}", f"echo {i}") for i in range(n))), lambda r: seen.append(r.id)
    )
    assert report.passed and [c.id for c in report.commands] == [f"c{i}" for i in range(n)]
    assert sorted(seen) == sorted(f"c{i}" for i in range(n))  # progress once per command
    assert len(report.run_ids) == 2 and all(c.run_id in report.run_ids for c in report.commands)
    assert [c.output.strip() for c in report.commands] == [str(i) for i in range(n)]


def test_f6_progress_reports_each_command_as_it_finishes(agent: Agent, tmp_path: Path) -> None:
    seen: list[tuple[str, float]] = []
    t0 = time.monotonic()
    p = plan(cmd("late", "sleep 0.6"), cmd("early", "true"))
    run_plan(agent.session(tmp_path), p, lambda r: seen.append((r.id, time.monotonic() - t0)))
    assert [s[0] for s in seen] == ["early", "late"]
    assert seen[0][1] < 0.5 <= seen[1][1]


def test_f6_report_json_is_serialisable_and_complete(agent: Agent, tmp_path: Path) -> None:
    report = run_plan(agent.session(tmp_path), plan(cmd("a", "echo hi", kind="test", description="says hi")))
    data = json.loads(report.to_json_text())
    assert data["schema"] == "a3s.fleet.verification-report.v1" and data["verdict"] == "passed"
    (a,) = data["commands"]
    assert {
        "id",
        "kind",
        "status",
        "exit_code",
        "duration_ms",
        "timed_out",
        "output",
        "evidence",
        "artifact_ref",
    } <= set(a)
    assert (a["kind"], a["description"], a["exit_code"], a["output"]) == ("test", "says hi", 0, "hi\n")


# ---- JUnit ------------------------------------------------------------------------------------


def test_f6_junit_xml_parses_and_counts_only_required_failures(agent: Agent, tmp_path: Path) -> None:
    p = plan(
        cmd("ok", "echo ok", kind="test"),
        cmd("bad", "echo nope; exit 2", kind="lint"),
        cmd("opt", "exit 5", kind="env", required=False),
        cmd("slow", "sleep 30", kind="test", timeout_ms=1000),
        cmd("ctl", r"printf 'red \033[31mX\033[0m nul:\000: bell\a & <tag> ]]>'", kind="test"),
        title='release <ready> & "checked"',
    )
    report = run_plan(agent.session(tmp_path), p)
    root = ET.fromstring(report.to_junit_xml().encode())
    assert root.tag == "testsuites"
    (suite,) = root.findall("testsuite")
    assert suite.get("name") == 'release <ready> & "checked"'
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("5", "2", "0")
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert list(cases) == ["ok", "bad", "opt", "slow", "ctl"]
    assert cases["bad"].get("classname") == "lint"
    assert float(cases["slow"].get("time")) >= 0.9
    failure = cases["bad"].find("failure")
    assert (
        failure is not None and failure.get("type") == "exit_code" and "exit code 2" in failure.get("message")
    )
    assert cases["slow"].find("failure").get("type") == "timeout"
    assert cases["opt"].find("failure") is None and cases["ok"].find("failure") is None
    assert "does not affect the verdict" in cases["opt"].find("system-out").text
    assert cases["opt"].find("properties/property").get("name") == "optional_failure"
    ctl_out = cases["ctl"].find("system-out").text
    assert "\\x1b[31mX" in ctl_out and "\\x00" in ctl_out and "& <tag> ]]>" in ctl_out
    props = {p.get("name"): p.get("value") for p in suite.findall("properties/property")}
    assert props["verdict"] == "failed"


def _result(
    id: str, status: str, *, required: bool = True, output: str = "", **extra: object
) -> CommandResult:
    fields = {
        "kind": "test",
        "description": "",
        "command": "x",
        "timeout_ms": 1000,
        "exit_code": None,
        "duration_ms": 10,
        "branch_ms": 12,
        "timed_out": False,
    }
    fields.update(extra)
    return CommandResult(id=id, required=required, status=status, output=output, **fields)  # type: ignore[arg-type]


def test_f6_junit_marks_commands_that_never_ran_as_errors_and_bounds_output() -> None:
    huge = "".join(f"line {i}\n" for i in range(40_000))  # ~400 KB
    report = VerificationReport(
        "t",
        [
            _result("never", "error", error_kind={"type": "unsupported", "message": "no sandbox"}),
            _result("gone", "cancelled"),
            _result("loud", "failed", exit_code=1, output=huge),
        ],
        duration_ms=30,
        started_at=0.0,
    )
    root = ET.fromstring(report.to_junit_xml())
    suite = root.find("testsuite")
    assert (suite.get("failures"), suite.get("errors")) == ("1", "2")
    cases = suite.findall("testcase")
    assert cases[0].find("error").get("type") == "unsupported"
    assert cases[1].find("error").get("type") == "cancelled"
    out = cases[2].find("system-out").text
    assert len(out.encode()) < 70 * 1024 and "bytes omitted" in out and out.rstrip().endswith("line 39999")
    assert len(cases[2].find("failure").text.encode()) <= 4 * 1024
    assert suite.get("timestamp") == "1970-01-01T00:00:00"


def test_f6_a_command_that_never_ran_is_an_error_not_a_pass(agent: Agent, tmp_path: Path) -> None:
    """F-6: a bash call refused before starting (here: sandbox required, none available) has no exit code."""
    no_sandbox = SimpleNamespace(available=False)
    options = SessionOptions(bash_sandbox="always", services={"sandbox": no_sandbox})
    report = run_plan(agent.session(tmp_path, options), plan(cmd("x", "touch should-not-exist")))
    (x,) = report.commands
    assert (x.status, x.exit_code, x.blocking) == ("error", None, True)
    assert x.error_kind is not None and x.error_kind["type"] == "unsupported"
    assert not (tmp_path / "should-not-exist").exists() and report.verdict == "failed"
    case = ET.fromstring(report.to_junit_xml()).find("testsuite/testcase")
    assert case.find("error").get("type") == "unsupported" and case.find("failure") is None


def test_f6_session_verify_commands_takes_the_reference_shape(agent: Agent, tmp_path: Path) -> None:
    """``session.verify_commands(title, [{id, kind, description, command, required, timeoutMs}])``."""
    session = agent.session(tmp_path)
    seen: list[str] = []
    report = session.verify_commands(
        "release ready",
        [
            {
                "id": "unit",
                "kind": "test",
                "description": "d",
                "command": "echo ok",
                "required": True,
                "timeoutMs": 5000,
            },
            {
                "id": "opt",
                "kind": "lint",
                "description": "",
                "command": "exit 1",
                "required": False,
                "timeout_ms": 5000,
            },
        ],
        progress=lambda r: seen.append(r.id),
    )
    assert isinstance(report, VerificationReport) and report.title == "release ready" and report.passed
    assert report.commands[0].timeout_ms == 5000 and sorted(seen) == ["opt", "unit"]
    with pytest.raises(InvalidArgument, match="verify_commands: commands: Tuple should have at least 1 item"):
        session.verify_commands("t", [])


def test_f6_a_bad_command_in_a_plan_is_named_without_a_false_count_error() -> None:
    """A typo in one command is that command's error only: pydantic also reports the list as empty
    ("commands: Tuple should have at least 1 item") because the bad item did not validate, which
    contradicts a plan that plainly has one command."""
    with pytest.raises(InvalidArgument) as info:
        build_plan(
            {"title": "t", "commands": [{"id": "a", "command": "true", "timeout": 5}]}, source="p.toml"
        )
    assert info.value.message == "p.toml: commands[0].timeout: Extra inputs are not permitted"
    with pytest.raises(InvalidArgument) as empty:  # an empty list is still reported as such
        build_plan({"title": "t", "commands": []}, source="p.toml")
    assert "commands: Tuple should have at least 1 item" in empty.value.message
