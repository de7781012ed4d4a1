"""Verification plans and their reports: "done" as checkable evidence (SPEC F-6, fan-out shape X-3).

A plan is a title and 1…``MAX_COMMANDS`` shell commands ``{id, kind, description, command, required,
timeout_ms}`` (``timeoutMs`` is accepted too, as the reference SDK spells it). ``run_plan(session,
plan)`` runs every command as one ``bash`` fan-out branch — in parallel, in this process or as fleet
jobs, whichever runner the session has — with ``allow_partial_failure`` so one failure never cancels
the others, and turns the branch outcomes into a ``VerificationReport``.

Invariants:

- the verdict is ``passed`` iff every *required* command ran and exited 0; optional failures are
  reported (and shown in JUnit) but never fail the run; a plan with only optional commands passes;
- each command's ``output`` is the session-projected tool output (bounded by the session's transform
  policy, R-4) and carries its ``a3s_tool_result_evidence``; when the projection was lossy,
  ``artifact_ref`` is the ``a3s://tool-output/…`` URI of the full original, readable back through
  ``session.read_artifact``;
- each command runs in a subshell, so a ``cd`` in one command never moves the session's bash cwd
  for the other commands (they run concurrently against the same session state) or for later calls;
- ``flows`` never imports ``orchestrator``: the session is passed in and used through the small
  ``VerifySession`` protocol; branches are plain ``BranchSpec`` values with the fields of
  ``orchestrator.fanout.Branch``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from kernel.errors import InvalidArgument
from kernel.projection import ToolResultTransformPolicyV1

REPORT_SCHEMA = "a3s.fleet.verification-report.v1"
TOOL = "bash"
MAX_COMMANDS = 128
FAN_OUT_WIDTH = 32  # the fan-out limit: bigger plans run in consecutive waves of this size
MAX_TITLE_CHARS = 256
MAX_ID_CHARS = 128
MAX_KIND_CHARS = 64
MAX_DESCRIPTION_CHARS = 4096
MAX_COMMAND_BYTES = 64 * 1024
DEFAULT_TIMEOUT_MS = 600_000
MIN_TIMEOUT_MS = 1_000
MAX_TIMEOUT_MS = 3_600_000
DEFAULT_KIND = "check"
MAX_REPORTED_ERRORS = 5
# The CLI's projection of each command's output (see ``verification_policy``).
VERIFY_OUTPUT_BYTES = 32 * 1024
VERIFY_HEAD_BYTES = 8 * 1024
VERIFY_TAIL_BYTES = VERIFY_OUTPUT_BYTES - VERIFY_HEAD_BYTES - 512  # 512 bytes for the markers

CommandStatus = Literal["passed", "failed", "timed_out", "error", "cancelled"]


# ---- the plan ---------------------------------------------------------------------------------


def _single_line(value: str, what: str) -> str:
    if not value.strip():
        raise ValueError(f"{what} must not be blank")
    if "\n" in value or "\r" in value or "\x00" in value:
        raise ValueError(f"{what} must be a single line")
    return value


class CommandSpec(BaseModel):
    """One command of a plan."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    id: str = Field(max_length=MAX_ID_CHARS, description="Unique within the plan; names the JUnit testcase.")
    kind: str = Field(
        default=DEFAULT_KIND, max_length=MAX_KIND_CHARS, description='Free text: "test", "lint"…'
    )
    description: str = Field(default="", max_length=MAX_DESCRIPTION_CHARS)
    command: str = Field(description="Run with `bash -c` at the workspace root.")
    required: bool = Field(default=True, description="Only required commands decide the verdict.")
    timeout_ms: int = Field(
        default=DEFAULT_TIMEOUT_MS, ge=MIN_TIMEOUT_MS, le=MAX_TIMEOUT_MS, alias="timeoutMs"
    )

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        return _single_line(value, "id")

    @field_validator("kind")
    @classmethod
    def _kind(cls, value: str) -> str:
        return _single_line(value, "kind")

    @field_validator("command")
    @classmethod
    def _command(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("command must not be blank")
        if "\x00" in value:
            raise ValueError("command must not contain NUL bytes")
        if len(value.encode("utf-8", "surrogatepass")) > MAX_COMMAND_BYTES:
            raise ValueError(f"command is longer than {MAX_COMMAND_BYTES} bytes")
        return value


class VerificationPlan(BaseModel):
    """A titled list of commands with unique ids."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    title: str = Field(max_length=MAX_TITLE_CHARS)
    commands: tuple[CommandSpec, ...] = Field(min_length=1, max_length=MAX_COMMANDS)

    @field_validator("title")
    @classmethod
    def _title(cls, value: str) -> str:
        return _single_line(value, "title")

    @model_validator(mode="after")
    def _unique_ids(self) -> VerificationPlan:
        seen: set[str] = set()
        for i, command in enumerate(self.commands):
            if command.id in seen:
                raise ValueError(f"commands[{i}].id {command.id!r} is used twice; ids must be unique")
            seen.add(command.id)
        return self


def build_plan(data: Any, *, source: str = "plan") -> VerificationPlan:
    """Validate a decoded plan (a mapping) or raise ``InvalidArgument`` with one readable line."""
    if not isinstance(data, Mapping):
        raise InvalidArgument(f"{source}: a plan must be an object with `title` and `commands`")
    try:
        return VerificationPlan.model_validate(dict(data))
    except ValidationError as exc:
        raise InvalidArgument(f"{source}: {describe_validation_error(exc)}") from None


def plan_from_commands(title: str, commands: Iterable[Mapping[str, Any] | CommandSpec]) -> VerificationPlan:
    """The plan behind ``session.verify_commands(title, commands)``."""
    items = [c.model_dump() if isinstance(c, CommandSpec) else dict(c) for c in commands]
    return build_plan({"title": title, "commands": items}, source="verify_commands")


def describe_validation_error(exc: ValidationError) -> str:
    every = exc.errors()
    # pydantic counts only the items that validated, so one bad command also reports `commands` as
    # too short ("at least 1 item …, not 0"): drop a length error whose items have errors of their own.
    errors = [e for e in every if not (e["type"] == "too_short" and _has_inner_errors(e["loc"], every))]
    parts = []
    for err in errors[:MAX_REPORTED_ERRORS]:
        where = _loc(err.get("loc", ()))
        message = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        parts.append(f"{where}: {message}" if where else message)
    more = len(errors) - MAX_REPORTED_ERRORS
    if more > 0:
        parts.append(f"… and {more} more")
    return "; ".join(parts)


def _has_inner_errors(loc: tuple[Any, ...], errors: Iterable[Any]) -> bool:
    return any(len(e["loc"]) > len(loc) and tuple(e["loc"][: len(loc)]) == tuple(loc) for e in errors)


def _loc(loc: Iterable[Any]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def verification_policy() -> ToolResultTransformPolicyV1:
    """The transform policy ``a3s-fleet verify`` pins on its session (R-1): each command's report keeps
    an 8 KiB head and a 23.5 KiB tail (build and test tools print their verdict last), folds runs of
    identical lines, and anything cut is kept whole as an ``a3s://tool-output/…`` artifact. ``bash``
    itself already bounds what it captures to 100 KiB (B-2); this bounds the report further so a
    32-command report stays about 1 MiB."""
    return ToolResultTransformPolicyV1(
        max_output_bytes=VERIFY_OUTPUT_BYTES,
        head_bytes=VERIFY_HEAD_BYTES,
        tail_bytes=VERIFY_TAIL_BYTES,
        fold_repeated_lines=True,
        repeated_line_threshold=3,
        structured_sample_items=0,
    )


# ---- running it -------------------------------------------------------------------------------


@dataclass(frozen=True)
class BranchSpec:
    """One fan-out branch; the same fields as ``orchestrator.fanout.Branch`` (which flows may not import)."""

    tool: str
    args: dict[str, Any]
    description: str = ""
    key: str | None = None
    label: str | None = None
    allotment: dict[str, int | None] | None = None


class VerifySession(Protocol):
    """What ``run_plan`` needs from a session: ``Session.fan_out`` and nothing else."""

    def fan_out(
        self,
        branches: list[Any],
        *,
        allow_partial_failure: bool = ...,
        min_success_count: int | None = ...,
        timeout_ms: int | None = ...,
        run_id: str | None = ...,
        progress: Callable[[Any], None] | None = ...,
    ) -> Any: ...


def branch_for(command: CommandSpec) -> BranchSpec:
    # The subshell keeps a `cd` inside the command from moving the session cwd (module docstring);
    # the newlines keep a trailing comment in the command from swallowing the closing parenthesis.
    wrapped = f"(\n{command.command.rstrip()}\n)"
    # The branch's description is how the job is named on a fleet (Flower's task list, status).
    described = f"{command.kind}: {command.id}" + (f" — {command.description}" if command.description else "")
    return BranchSpec(TOOL, {"command": wrapped, "timeout": command.timeout_ms}, described)


@dataclass
class CommandResult:
    """What one command did: the evidence a reviewer or a CI system checks."""

    id: str
    kind: str
    description: str
    command: str
    required: bool
    timeout_ms: int
    status: CommandStatus
    exit_code: int | None  # the process exit code (128+N for signal N); None if it never ran
    duration_ms: int  # the command's own run time; the branch's (with dispatch) when it never ran
    branch_ms: int  # the branch's wall time, dispatch included
    timed_out: bool
    output: str  # the session-projected (bounded) tool output
    output_summary: dict[str, Any] = field(default_factory=dict)  # bash's {total_bytes, captured_bytes, …}
    evidence: dict[str, Any] | None = None  # metadata.a3s_tool_result_evidence
    artifact_ref: str | None = None  # a3s://tool-output/… when the output was bounded lossily
    error_kind: dict[str, Any] | None = None
    run_id: str = ""
    branch_index: int = 0

    @property
    def ok(self) -> bool:
        return self.status == "passed"

    @property
    def blocking(self) -> bool:
        """A failure that fails the verdict."""
        return self.required and not self.ok

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "description": self.description,
            "command": self.command,
            "required": self.required,
            "timeout_ms": self.timeout_ms,
            "status": self.status,
            "exit_code": self.exit_code,
            "duration_ms": self.duration_ms,
            "branch_ms": self.branch_ms,
            "timed_out": self.timed_out,
            "output": self.output,
            "output_summary": self.output_summary,
            "evidence": self.evidence,
            "artifact_ref": self.artifact_ref,
            "error_kind": self.error_kind,
            "run_id": self.run_id,
            "branch_index": self.branch_index,
        }


@dataclass
class VerificationReport:
    title: str
    commands: list[CommandResult]
    duration_ms: int
    started_at: float  # seconds since the epoch, for the JUnit timestamp
    run_ids: list[str] = field(default_factory=list)
    session_id: str = ""  # the session whose events (a3s-fleet events) tell how the commands ran

    @property
    def passed(self) -> bool:
        return not any(c.blocking for c in self.commands)

    @property
    def verdict(self) -> Literal["passed", "failed"]:
        return "passed" if self.passed else "failed"

    def counts(self) -> dict[str, int]:
        return {
            "total": len(self.commands),
            "passed": sum(c.ok for c in self.commands),
            "failed": sum(not c.ok for c in self.commands),
            "required_failed": sum(c.blocking for c in self.commands),
            "optional_failed": sum(not c.required and not c.ok for c in self.commands),
            "timed_out": sum(c.timed_out for c in self.commands),
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": REPORT_SCHEMA,
            "title": self.title,
            "verdict": self.verdict,
            "passed": self.passed,
            "counts": self.counts(),
            "duration_ms": self.duration_ms,
            "started_at": self.started_at,
            "session_id": self.session_id,
            "run_ids": self.run_ids,
            "commands": [c.to_json() for c in self.commands],
        }

    def to_json_text(self) -> str:
        return json.dumps(self.to_json(), ensure_ascii=False, indent=2) + "\n"

    def to_junit_xml(self) -> str:
        from flows.verify_junit import render_junit

        return render_junit(self)


ProgressFn = Callable[[CommandResult], None]


def run_plan(
    session: VerifySession,
    plan: VerificationPlan,
    progress: ProgressFn | None = None,
    *,
    wall_clock: Callable[[], float] = time.time,
) -> VerificationReport:
    """Run every command of ``plan`` as parallel ``bash`` branches on ``session``; never raises on a
    failing command (that is what the report is for)."""
    started_at = wall_clock()
    t0 = time.monotonic()
    results: list[CommandResult | None] = [None] * len(plan.commands)
    run_ids: list[str] = []
    for offset in range(0, len(plan.commands), FAN_OUT_WIDTH):
        wave = plan.commands[offset : offset + FAN_OUT_WIDTH]
        branches = [branch_for(c) for c in wave]

        def on_outcome(outcome: Any, wave: tuple[CommandSpec, ...] = wave, offset: int = offset) -> None:
            result = command_result(wave[outcome.index], outcome, "")
            results[offset + outcome.index] = result
            if progress is not None:
                progress(result)

        fan = session.fan_out(branches, allow_partial_failure=True, progress=on_outcome)
        run_ids.append(fan.run_id)
        for outcome in fan.outcomes:
            i = offset + outcome.index
            done = results[i]
            if done is None:
                # The branch never reported (cancelled, fan-out deadline): its result is made here.
                done = results[i] = command_result(wave[outcome.index], outcome, fan.run_id)
                if progress is not None:
                    progress(done)
            done.run_id = fan.run_id
    final = [r for r in results if r is not None]
    elapsed = int((time.monotonic() - t0) * 1000)
    session_id = str(getattr(session, "id", "") or "")
    return VerificationReport(plan.title, final, elapsed, started_at, run_ids, session_id)


def command_result(command: CommandSpec, outcome: Any, run_id: str) -> CommandResult:
    """Map one fan-out ``BranchOutcome`` (duck-typed) to a ``CommandResult``."""
    result = outcome.result
    branch_ms = int(outcome.duration_ms)

    def make(
        status: CommandStatus, exit_code: int | None, duration_ms: int, timed_out: bool, **more: Any
    ) -> CommandResult:
        return CommandResult(
            id=command.id,
            kind=command.kind,
            description=command.description,
            command=command.command,
            required=command.required,
            timeout_ms=command.timeout_ms,
            status=status,
            exit_code=exit_code,
            duration_ms=duration_ms,
            branch_ms=branch_ms,
            timed_out=timed_out,
            run_id=run_id,
            branch_index=int(outcome.index),
            **more,
        )

    if result is None:  # the branch never returned: cancelled, or cut by the fan-out deadline
        cut = outcome.status == "timed_out"
        return make("timed_out" if cut else "cancelled", None, branch_ms, cut, output="")
    meta: dict[str, Any] = result.metadata if isinstance(result.metadata, dict) else {}
    raw_summary = meta.get("output")
    summary: dict[str, Any] = raw_summary if isinstance(raw_summary, dict) else {}
    raw_exit = meta.get("exit_code")
    exit_code = raw_exit if isinstance(raw_exit, int) else None
    kind: dict[str, Any] | None = result.error_kind or None
    kind_type = (kind or {}).get("type")
    timed_out = bool(summary.get("timed_out")) or kind_type == "timeout"
    status: CommandStatus
    if timed_out:
        status = "timed_out"
    elif result.exit_code == 0 and exit_code == 0:
        status = "passed"
    elif exit_code is not None:
        status = "failed"
    elif kind_type == "cancelled":
        status = "cancelled"
    else:
        status = "error"  # the command never ran: no sandbox, refused, dispatcher failure…
    raw_evidence = meta.get("a3s_tool_result_evidence")
    evidence: dict[str, Any] | None = raw_evidence if isinstance(raw_evidence, dict) else None
    ref = (evidence or {}).get("content_ref")
    duration = meta.get("duration_ms")
    return make(
        status,
        exit_code,
        duration if isinstance(duration, int) else branch_ms,
        timed_out,
        output=result.output,
        output_summary={k: v for k, v in summary.items() if k not in ("stdout", "stderr")},
        evidence=evidence,
        artifact_ref=ref if isinstance(ref, str) and ref.startswith("a3s://") else None,
        error_kind=kind,
    )
