"""Workflow history: the reference's event list and envelope, and what a history says (F-3, F-7).

Events (``type`` tag, REFERENCE 4.15): ``run_created{spec, input}``, ``run_started{attempt}``,
``step_created{step_id, step_name, input, retry}``, ``step_started{step_id, attempt}``,
``step_completed{step_id, output}``, ``step_failed{step_id, attempt, error}``,
``run_completed{output}``, ``run_failed{error}``, ``run_cancelled{reason}``, ``run_timed_out{timeout_ms}``.
Envelope: ``{run_id, sequence, event_id, timestamp, event}`` — ``sequence`` counts from 1 per run,
``timestamp`` is wall-clock milliseconds.

``History.fold(envelopes)`` reads a log the way recovery needs it: every ``step_completed`` belongs to
the run segment opened by the latest ``run_created`` before it, and a segment is keyed by its
``input.query``. A step's recorded output is therefore recovered **only** for the same run id (one log
per run), the same query and the same step id (F-3) — never across runs, never from a segment started
with another query, and an unfinished step (``step_started`` without ``step_completed``) is never
promoted to success.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from kernel.errors import InvalidArgument

RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
MAX_STEP_ID_BYTES = 256
MAX_STEP_INPUT_BYTES = 64 * 1024

TERMINAL_RUN_EVENTS = ("run_completed", "run_failed", "run_cancelled", "run_timed_out")


def check_run_id(run_id: str) -> str:
    """A run id names a file and Redis keys: 1–128 of ``[A-Za-z0-9._-]``, starting alphanumeric."""
    if not isinstance(run_id, str) or not RUN_ID_RE.match(run_id) or ".." in run_id:
        raise InvalidArgument(
            f"unsafe workflow run id {run_id!r}: use 1-128 of letters, digits, '.', '_' and '-', "
            "starting with a letter or digit"
        )
    return run_id


def check_step_id(step_id: Any) -> str:
    if not isinstance(step_id, str) or not step_id.strip():
        raise InvalidArgument("wf.step(stepId, …): stepId must be a non-empty string")
    if len(step_id.encode("utf-8", "surrogatepass")) > MAX_STEP_ID_BYTES:
        raise InvalidArgument(f"wf.step: step id is longer than {MAX_STEP_ID_BYTES} bytes")
    if "\n" in step_id or "\r" in step_id:
        raise InvalidArgument("wf.step: a step id must be a single line")
    return step_id


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def digest(value: Any) -> str:
    return hashlib.sha256(canonical(value).encode("utf-8", "surrogatepass")).hexdigest()


def query_of(run_input: Any) -> str:
    """The run's *query* for recovery: ``input.query`` when it is a non-empty string, else a digest of
    the whole input (the reference recovers nothing without a query; a run over any other input
    should still resume, and must still never match a run over a different input)."""
    if isinstance(run_input, dict) and isinstance(run_input.get("query"), str) and run_input["query"]:
        return str(run_input["query"])
    return "sha256:" + digest(run_input)


def step_input_digest(tool: str, args: Any) -> str:
    return digest([tool, args])


def envelope(run_id: str, sequence: int, event: dict[str, Any], now_ms: int) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "sequence": sequence,
        "event_id": str(uuid.uuid4()),
        "timestamp": now_ms,
        "event": event,
    }


@dataclass
class StepRecord:
    step_id: str
    tool: str = ""
    input_digest: str = ""
    status: str = "created"  # created | started | completed | failed
    attempts: int = 0
    failures: int = 0  # step_failed events
    output: dict[str, Any] | None = None
    error: Any = None


@dataclass
class Segment:
    """One ``run_created`` and what followed it until the next one."""

    query: str
    spec: dict[str, Any]
    input: Any
    steps: dict[str, StepRecord] = field(default_factory=dict)
    status: str = "created"  # created | running | completed | failed | cancelled | timed_out
    output: Any = None
    error: Any = None
    starts: int = 0


@dataclass
class History:
    run_id: str
    segments: list[Segment] = field(default_factory=list)
    last_sequence: int = 0
    events: int = 0

    @classmethod
    def fold(cls, run_id: str, envelopes: list[dict[str, Any]]) -> History:
        h = cls(run_id)
        for env in envelopes:
            if env.get("run_id") != run_id:
                continue  # never look across runs
            h.events += 1
            h.last_sequence = max(h.last_sequence, int(env.get("sequence") or 0))
            ev = env.get("event") or {}
            h.apply(ev)
        return h

    @property
    def current(self) -> Segment | None:
        return self.segments[-1] if self.segments else None

    def apply(self, ev: dict[str, Any]) -> None:
        kind = ev.get("type")
        if kind == "run_created":
            run_input = ev.get("input")
            self.segments.append(Segment(query_of(run_input), dict(ev.get("spec") or {}), run_input))
            return
        seg = self.current
        if seg is None:
            return
        sid = ev.get("step_id")
        if kind == "run_started":
            seg.status, seg.starts = "running", seg.starts + 1
        elif kind == "step_created" and isinstance(sid, str):
            rec = seg.steps.setdefault(sid, StepRecord(sid))
            rec.tool = str(ev.get("step_name") or "")
            rec.input_digest = step_input_digest(rec.tool, ev.get("input"))
        elif kind == "step_started" and isinstance(sid, str):
            rec = seg.steps.setdefault(sid, StepRecord(sid))
            rec.status, rec.attempts = "started", int(ev.get("attempt") or rec.attempts + 1)
        elif kind == "step_completed" and isinstance(sid, str):
            rec = seg.steps.setdefault(sid, StepRecord(sid))
            out = ev.get("output")
            rec.status, rec.output = "completed", out if isinstance(out, dict) else None
        elif kind == "step_failed" and isinstance(sid, str):
            rec = seg.steps.setdefault(sid, StepRecord(sid))
            rec.status, rec.error, rec.failures = "failed", ev.get("error"), rec.failures + 1
        elif kind in TERMINAL_RUN_EVENTS:
            seg.status = kind.removeprefix("run_")
            seg.output = ev.get("output")
            seg.error = ev.get("error")

    def recover(self, query: str, step_id: str) -> StepRecord | None:
        """The latest completed record of ``step_id`` in a segment opened with ``query`` (F-3)."""
        if not query or not step_id:
            return None
        for seg in reversed(self.segments):
            if seg.query != query:
                continue
            rec = seg.steps.get(step_id)
            if rec is not None and rec.status == "completed" and rec.output is not None:
                return rec
        return None

    def failures(self, query: str, step_id: str) -> int:
        """How many times ``step_id`` failed in segments opened with ``query``: a fleet step's
        idempotency key includes it, so a failed step runs again rather than being recovered."""
        return sum(
            seg.steps[step_id].failures
            for seg in self.segments
            if seg.query == query and step_id in seg.steps
        )

    def created(self, query: str, step_id: str) -> StepRecord | None:
        seg = self.current
        if seg is None or seg.query != query:
            return None
        return seg.steps.get(step_id)

    def summary(self) -> dict[str, Any]:
        seg = self.current
        if seg is None:
            return {"run_id": self.run_id, "status": "unknown", "events": self.events, "steps": {}}
        counts: dict[str, int] = {}
        for rec in seg.steps.values():
            counts[rec.status] = counts.get(rec.status, 0) + 1
        return {
            "run_id": self.run_id,
            "status": seg.status,
            "query": seg.query,
            "events": self.events,
            "starts": seg.starts,
            "steps": counts,
            "output": seg.output,
            "error": seg.error,
        }
