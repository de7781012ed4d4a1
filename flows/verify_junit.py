"""JUnit XML for a ``VerificationReport`` (SPEC F-6): what CI systems read.

Shape: ``<testsuites>`` holding one ``<testsuite name=TITLE>``; one ``<testcase name=ID
classname=KIND time=SECONDS>`` per command, in plan order.

Invariants:

- the XML counts agree with the verdict: ``failures + errors`` counts *required* commands that did
  not pass, so a CI system that fails on any ``<failure>`` agrees with the process exit code;
  a failed required command gets ``<failure>`` (``type`` = ``exit_code`` or ``timeout``), one that
  never ran gets ``<error>`` (``type`` = the error kind);
- an optional command that failed is not a ``<failure>``: its ``<system-out>`` opens with a line
  saying it failed and does not affect the verdict, and the testcase carries a property
  ``optional_failure=true`` — so it is visible without turning CI red;
- output is bounded (``MAX_SYSTEM_OUT_BYTES`` per testcase, head + tail, UTF-8 safe; the failure
  body is only the last ``MAX_FAILURE_BODY_BYTES``) and every character XML 1.0 forbids (ANSI
  escapes, NUL, lone surrogates…) is written as a visible ``\\xNN`` escape, so the document always
  parses.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from flows.verify import CommandResult, VerificationReport

MAX_SYSTEM_OUT_BYTES = 64 * 1024
SYSTEM_OUT_HEAD_BYTES = 16 * 1024  # the rest of the budget goes to the tail, where failures show up
MAX_FAILURE_BODY_BYTES = 4 * 1024
MARKER_RESERVE_BYTES = 64  # "[… N bytes omitted …]" and its newlines

# Everything outside XML 1.0's Char production.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def xml_safe(text: str) -> str:
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def head_tail(text: str, max_bytes: int, head_bytes: int) -> str:
    """``text`` if it fits ``max_bytes`` (UTF-8), else a UTF-8-safe head and tail around a marker,
    the whole never longer than ``max_bytes``."""
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= max_bytes:
        return text
    budget = max(0, max_bytes - MARKER_RESERVE_BYTES)
    head_bytes = min(head_bytes, budget)
    tail_bytes = budget - head_bytes
    head = data[:head_bytes].decode("utf-8", "ignore")
    tail = data[len(data) - tail_bytes :].decode("utf-8", "ignore") if tail_bytes else ""
    omitted = len(data) - len(head.encode()) - len(tail.encode())
    return f"{head}\n[… {omitted} bytes omitted …]\n{tail}"


def render_junit(report: VerificationReport) -> str:
    counts = _counts(report)
    seconds = f"{report.duration_ms / 1000:.3f}"
    stamp = datetime.fromtimestamp(report.started_at, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    suites = ET.Element("testsuites", {"name": xml_safe(report.title), "time": seconds, **counts})
    suite = ET.SubElement(
        suites,
        "testsuite",
        {"name": xml_safe(report.title), "time": seconds, "timestamp": stamp, "skipped": "0", **counts},
    )
    props = ET.SubElement(suite, "properties")
    ET.SubElement(props, "property", name="verdict", value=report.verdict)
    if report.session_id:
        ET.SubElement(props, "property", name="session_id", value=xml_safe(report.session_id))
    for run_id in report.run_ids:
        ET.SubElement(props, "property", name="run_id", value=xml_safe(run_id))
    for command in report.commands:
        _testcase(suite, command)
    ET.indent(suites)
    body = ET.tostring(suites, encoding="unicode")
    return f'<?xml version="1.0" encoding="UTF-8"?>\n{body}\n'


def _counts(report: VerificationReport) -> dict[str, str]:
    errors = sum(c.blocking and _never_ran(c) for c in report.commands)
    failures = sum(c.blocking and not _never_ran(c) for c in report.commands)
    return {"tests": str(len(report.commands)), "failures": str(failures), "errors": str(errors)}


def _never_ran(command: CommandResult) -> bool:
    return command.status in ("error", "cancelled")


def _testcase(suite: ET.Element, command: CommandResult) -> None:
    case = ET.SubElement(
        suite,
        "testcase",
        name=xml_safe(command.id),
        classname=xml_safe(command.kind),
        time=f"{command.duration_ms / 1000:.3f}",
    )
    if command.blocking:
        message = xml_safe(_why(command))
        tail = head_tail(command.output, MAX_FAILURE_BODY_BYTES, 0)
        if _never_ran(command):
            kind = (command.error_kind or {}).get("type") or command.status
            ET.SubElement(case, "error", message=message, type=xml_safe(str(kind))).text = xml_safe(tail)
        else:
            kind = "timeout" if command.timed_out else "exit_code"
            ET.SubElement(case, "failure", message=message, type=kind).text = xml_safe(tail)
    lines = []
    if not command.required and not command.ok:
        props = ET.SubElement(case, "properties")
        ET.SubElement(props, "property", name="optional_failure", value="true")
        lines.append(f"[optional command {_why(command)}; it does not affect the verdict]")
    lines.append(f"$ {command.command}")
    if command.description:
        lines.append(f"# {command.description}")
    if command.artifact_ref:
        lines.append(f"# full output: {command.artifact_ref}")
    header = "\n".join(lines) + "\n"
    out = head_tail(command.output, MAX_SYSTEM_OUT_BYTES, SYSTEM_OUT_HEAD_BYTES)
    ET.SubElement(case, "system-out").text = xml_safe(header + out)


def _why(command: CommandResult) -> str:
    if command.timed_out:
        return f"timed out after {command.timeout_ms} ms"
    if command.status == "failed":
        return f"failed with exit code {command.exit_code}"
    if command.status == "cancelled":
        return "was cancelled before it finished"
    kind = (command.error_kind or {}).get("type")
    return f"did not run ({kind})" if kind else "did not run"
