"""Batch agent jobs on disk: the JSONL job file and the JSONL results file (SPEC A-5; issue 9 item 4).

A job line is ``{"id", "prompt", "workspace"?, "agent"?, "model"?, "max_steps"?, "output_schema"?}``
(no other keys). ``load_jobs`` validates the *whole* file before anything runs: a line that is not a
JSON object, breaks a field rule or repeats an id is one ``InvalidArgument`` naming the file and the
line (``jobs.jsonl:7: duplicate id 'a' (first on line 2)``). Blank lines are skipped.

Results are appended one JSON object per finished job —
``{"id", "success", "text", "structured"?, "error"?, "usage", "duration_ms", "session_id"}`` — and
flushed (and fsynced) per line by ``ResultsWriter``, so a crash loses nothing already finished. A
line torn by a crash mid-write is cut before the next append. ``latest_results`` reads the file
back: the latest line per id wins, and ``pending_jobs`` keeps every job whose latest result is
missing or failed — a rerun runs exactly those.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import PydanticCustomError

from flows.task.schema import AGENT_NAME_PATTERN, MAX_PROMPT_CHARS, MAX_TASK_STEPS, check_output_schema
from kernel.errors import InvalidArgument

MAX_JOBS = 100_000
MAX_LINE_BYTES = 1024 * 1024
MAX_ID_CHARS = 200
MODEL_PATTERN = r"^[a-z][a-z0-9_-]*:.+$"
TAIL_SCAN_BYTES = 64 * 1024


class JobLine(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, max_length=MAX_ID_CHARS)
    prompt: str = Field(min_length=1, max_length=MAX_PROMPT_CHARS)
    workspace: str | None = Field(default=None, min_length=1, max_length=4096)
    agent: str | None = Field(default=None, min_length=1, max_length=64, pattern=AGENT_NAME_PATTERN)
    model: str | None = Field(default=None, min_length=3, max_length=4096, pattern=MODEL_PATTERN)
    max_steps: int | None = Field(default=None, ge=1, le=MAX_TASK_STEPS)
    output_schema: dict[str, Any] | None = None

    @field_validator("id")
    @classmethod
    def _printable_id(cls, value: str) -> str:
        if value != value.strip() or any(not c.isprintable() for c in value):
            raise PydanticCustomError("bad_id", "must be printable, without leading or trailing spaces")
        return value

    @field_validator("prompt")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise PydanticCustomError("blank", "must not be blank")
        return value

    @field_validator("output_schema")
    @classmethod
    def _schema(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            check_output_schema(value)
        return value


@dataclass(frozen=True)
class Job:
    line: int
    spec: JobLine

    @property
    def id(self) -> str:
        return self.spec.id


def load_jobs(path: str | os.PathLike[str]) -> list[Job]:
    """Every job of the file, validated whole (see the module docstring)."""
    name = os.fspath(path)
    try:
        with open(name, "rb") as fh:
            raw_lines = fh.read().split(b"\n")
    except OSError as exc:
        raise InvalidArgument(
            f"{name}: cannot read the job file ({exc.strerror or exc})", path=name
        ) from None
    jobs: list[Job] = []
    first_line: dict[str, int] = {}
    for number, raw in enumerate(raw_lines, start=1):
        if not raw.strip():
            continue
        where = f"{name}:{number}"
        if len(raw) > MAX_LINE_BYTES:
            raise InvalidArgument(f"{where}: line is longer than {MAX_LINE_BYTES} bytes", path=where)
        try:
            data = json.loads(raw)
        except (UnicodeDecodeError, ValueError) as exc:
            raise InvalidArgument(f"{where}: not valid JSON ({exc})", path=where) from None
        if not isinstance(data, dict):
            raise InvalidArgument(f"{where}: a job must be a JSON object", path=where)
        try:
            spec = JobLine.model_validate(data, strict=True)
        except ValidationError as exc:
            raise InvalidArgument(f"{where}: {_first_error(exc)}", path=where) from None
        if spec.id in first_line:
            raise InvalidArgument(
                f"{where}: duplicate id {spec.id!r} (first on line {first_line[spec.id]})", path=where
            )
        first_line[spec.id] = number
        jobs.append(Job(number, spec))
        if len(jobs) > MAX_JOBS:
            raise InvalidArgument(f"{where}: more than {MAX_JOBS} jobs in one file", path=where)
    if not jobs:
        raise InvalidArgument(f"{name}: the job file holds no jobs", path=name)
    return jobs


def _first_error(exc: ValidationError) -> str:
    err = exc.errors(include_url=False)[0]
    field = ".".join(str(p) for p in err["loc"]) or "line"
    msg = err["msg"]
    if err["type"] == "extra_forbidden":
        msg = "unknown key (a job has id, prompt, workspace, agent, model, max_steps, output_schema)"
    elif err["type"] == "missing":
        msg = "required"
    return f"{field}: {msg}"


def latest_results(path: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    """The latest result line per id of a results file (missing file → empty; bad lines ignored)."""
    latest: dict[str, dict[str, Any]] = {}
    try:
        with open(path, "rb") as fh:
            for raw in fh:
                try:
                    row = json.loads(raw)
                except (UnicodeDecodeError, ValueError):
                    continue  # a torn last line, or someone's note
                if isinstance(row, dict) and isinstance(row.get("id"), str):
                    latest[row["id"]] = row
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise InvalidArgument(
            f"{os.fspath(path)}: cannot read the results file ({exc.strerror or exc})"
        ) from None
    return latest


def pending_jobs(jobs: list[Job], latest: dict[str, dict[str, Any]]) -> list[Job]:
    """Jobs whose latest result is missing or did not succeed (a rerun runs exactly these)."""
    return [j for j in jobs if latest.get(j.id, {}).get("success") is not True]


def result_line(
    job_id: str,
    *,
    success: bool,
    text: str,
    usage: dict[str, Any],
    duration_ms: int,
    session_id: str,
    structured: Any = None,
    has_structured: bool = False,
    error: dict[str, Any] | None = None,
) -> dict[str, Any]:
    row: dict[str, Any] = {"id": job_id, "success": success, "text": text}
    if has_structured:
        row["structured"] = structured
    if error is not None:
        row["error"] = error
    row.update({"usage": usage, "duration_ms": duration_ms, "session_id": session_id})
    return row


class ResultsWriter:
    """Appends result lines, each flushed and fsynced before ``write`` returns."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        _cut_torn_tail(self.path)
        try:
            self._fh: TextIO = open(self.path, "a", encoding="utf-8")
        except OSError as exc:
            raise InvalidArgument(
                f"{self.path}: cannot open the results file ({exc.strerror or exc})"
            ) from None

    def write(self, row: dict[str, Any]) -> None:
        line = json.dumps(row, ensure_ascii=False, separators=(",", ":"), default=str) + "\n"
        with self._lock:  # results arrive from several threads; each line is whole and durable
            self._fh.write(line)
            self._fh.flush()
            os.fsync(self._fh.fileno())

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> ResultsWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _cut_torn_tail(path: Path) -> None:
    """A results file whose last line has no newline was cut by a crash mid-write: drop that line."""
    try:
        with open(path, "rb+") as fh:
            size = fh.seek(0, os.SEEK_END)
            if size == 0:
                return
            fh.seek(size - 1)
            if fh.read(1) == b"\n":
                return
            # Walk back, a block at a time, to the newline that ends the last complete line.
            end = size
            while end > 0:
                start = max(0, end - TAIL_SCAN_BYTES)
                fh.seek(start)
                cut = fh.read(end - start).rfind(b"\n")
                if cut >= 0:
                    fh.truncate(start + cut + 1)
                    return
                end = start
            fh.truncate(0)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise InvalidArgument(f"{path}: cannot repair the results file ({exc.strerror or exc})") from None
