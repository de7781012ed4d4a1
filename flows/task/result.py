"""What a parent sees of its children: bounded ``TaskResult``s and the fan-in's verdict (SPEC X-3, K-8).

A child's final text reaches the parent's context bounded: at most ``HEAD_CHARS`` (3000) leading and
``TAIL_CHARS`` (800) trailing characters with a one-line marker naming what was cut, so at most
``MAX_OUTPUT_CHARS`` (4000). Its source anchors (the files its tools read or found) are kept in
first-seen order, at most ``MAX_SOURCE_ANCHORS`` (64). A child that was given an ``output_schema``
returns its validated value as ``structured``.

``completion`` says how the child ended: ``completed`` (final answer), ``max_steps`` (the step
bound stopped it), ``failed`` (an error: ``error_kind`` says which), ``cancelled`` (the fan-in
stopped it, or the caller did), ``timed_out`` (the fan-out's ``timeout_ms`` passed first),
``background`` (a handle: the child runs on). Only ``completed`` is a success.

``task_outcome`` turns the children's results into the tool's result: every child succeeded →
success; with ``allow_partial_failure`` and at least ``min_success_count`` (default 1) successes →
success naming the failed indexes; otherwise a failure typed ``partial_failure{failed, total}``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from kernel.errors import PartialFailure
from kernel.result import ToolResult

HEAD_CHARS = 3000
TAIL_CHARS = 800
MARKER_RESERVE_CHARS = 200  # the cut marker fits in what head + tail leave of 4000
MAX_OUTPUT_CHARS = HEAD_CHARS + TAIL_CHARS + MARKER_RESERVE_CHARS
MAX_SOURCE_ANCHORS = 64
MAX_ANCHOR_CHARS = 4096

Completion = Literal["completed", "max_steps", "failed", "cancelled", "timed_out", "background"]
COMPLETIONS: tuple[str, ...] = ("completed", "max_steps", "failed", "cancelled", "timed_out", "background")


def bound_output(text: str) -> tuple[str, int]:
    """``text`` cut to 3000 head + 800 tail characters (and the number of characters omitted)."""
    if len(text) <= HEAD_CHARS + TAIL_CHARS:
        return text, 0
    omitted = len(text) - HEAD_CHARS - TAIL_CHARS
    marker = f"\n… [{omitted} characters of the child's output omitted] …\n"
    return text[:HEAD_CHARS] + marker + text[-TAIL_CHARS:], omitted


def bound_anchors(anchors: Iterable[Any]) -> list[str]:
    """Distinct string anchors, first seen first, at most 64 (over-long ones dropped)."""
    seen: dict[str, None] = {}
    for anchor in anchors:
        if isinstance(anchor, str) and anchor and len(anchor) <= MAX_ANCHOR_CHARS and anchor not in seen:
            seen[anchor] = None
            if len(seen) >= MAX_SOURCE_ANCHORS:
                break
    return list(seen)


def anchors_of(metadata: Any) -> list[str]:
    """The source anchors a tool result's metadata names (``source_anchors``, ``download``'s
    ``source_anchor``); anything else is ignored."""
    if not isinstance(metadata, dict):
        return []
    found: list[str] = []
    raw = metadata.get("source_anchors")
    if isinstance(raw, list):
        found.extend(a for a in raw if isinstance(a, str))
    one = metadata.get("source_anchor")
    if isinstance(one, str):
        found.append(one)
    return found


@dataclass
class TaskResult:
    """One child's result as the parent sees it (REFERENCE 4.13)."""

    task_id: str
    index: int
    agent: str
    description: str
    session_id: str
    success: bool
    completion: Completion
    output: str = ""
    structured: Any = None
    has_structured: bool = False
    source_anchors: list[str] = field(default_factory=list)
    error_kind: dict[str, Any] | None = None
    omitted_chars: int = 0
    steps: int = 0
    usage: dict[str, Any] = field(default_factory=dict)
    duration_ms: int = 0

    @classmethod
    def build(
        cls,
        *,
        task_id: str,
        index: int,
        agent: str,
        description: str,
        session_id: str,
        completion: Completion,
        text: str,
        structured: Any = None,
        has_structured: bool = False,
        anchors: Iterable[Any] = (),
        error_kind: dict[str, Any] | None = None,
        steps: int = 0,
        usage: dict[str, Any] | None = None,
        duration_ms: int = 0,
    ) -> TaskResult:
        """A result whose output and anchors are bounded here, where it is produced."""
        output, omitted = bound_output(text)
        return cls(
            task_id=task_id,
            index=index,
            agent=agent,
            description=description,
            session_id=session_id,
            success=completion == "completed" and error_kind is None,
            completion=completion,
            output=output,
            structured=structured,
            has_structured=has_structured,
            source_anchors=bound_anchors(anchors),
            error_kind=error_kind,
            omitted_chars=omitted,
            steps=steps,
            usage=dict(usage or {}),
            duration_ms=duration_ms,
        )

    @classmethod
    def aborted(
        cls,
        *,
        task_id: str,
        index: int,
        agent: str,
        description: str,
        session_id: str = "",
        completion: Completion = "cancelled",
        error_kind: dict[str, Any] | None = None,
        duration_ms: int = 0,
    ) -> TaskResult:
        """A child that never finished (cancelled by the fan-in, timed out, lost)."""
        kind = error_kind or (
            {"type": "timeout", "op": "task", "duration_ms": duration_ms}
            if completion == "timed_out"
            else {"type": "cancelled", "op": "task"}
        )
        return cls.build(
            task_id=task_id,
            index=index,
            agent=agent,
            description=description,
            session_id=session_id,
            completion=completion,
            text="",
            error_kind=kind,
            duration_ms=duration_ms,
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "task_id": self.task_id,
            "index": self.index,
            "agent": self.agent,
            "description": self.description,
            "session_id": self.session_id,
            "success": self.success,
            "completion": self.completion,
            "output": self.output,
            "source_anchors": list(self.source_anchors),
            "steps": self.steps,
            "usage": dict(self.usage),
            "duration_ms": self.duration_ms,
        }
        if self.has_structured:
            out["structured"] = self.structured
        if self.error_kind is not None:
            out["error_kind"] = self.error_kind
        if self.omitted_chars:
            out["omitted_chars"] = self.omitted_chars
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TaskResult:
        """Rebuilt from data that crossed Redis; bounds are applied again (never trust the size)."""
        completion = data.get("completion")
        if completion not in COMPLETIONS:
            completion = "failed"
        output, omitted = str(data.get("output") or ""), 0
        if len(output) > MAX_OUTPUT_CHARS:  # already-bounded output (head + marker + tail) stays as is
            output, omitted = bound_output(output)
        kind = data.get("error_kind")
        return cls(
            task_id=str(data.get("task_id") or ""),
            index=int(data.get("index") or 0),
            agent=str(data.get("agent") or ""),
            description=str(data.get("description") or ""),
            session_id=str(data.get("session_id") or ""),
            success=bool(data.get("success")) and completion == "completed",
            completion=completion,
            output=output,
            structured=data.get("structured"),
            has_structured="structured" in data,
            source_anchors=bound_anchors(data.get("source_anchors") or []),
            error_kind=kind if isinstance(kind, dict) else None,
            omitted_chars=int(data.get("omitted_chars") or 0) + omitted,
            steps=int(data.get("steps") or 0),
            usage=dict(data.get("usage") or {}),
            duration_ms=int(data.get("duration_ms") or 0),
        )


def _render(result: TaskResult) -> str:
    status = "succeeded" if result.success else f"{result.completion}"
    head = f"[task {result.index}: {result.agent} — {result.description}] {status}"
    if result.error_kind is not None and not result.success:
        head += f" ({result.error_kind.get('type')})"
    lines = [head]
    if result.output:
        lines.append(result.output)
    if result.has_structured:
        lines.append("structured: " + json.dumps(result.structured, ensure_ascii=False)[:HEAD_CHARS])
    if result.source_anchors:
        lines.append("sources: " + ", ".join(result.source_anchors[:16]))
    return "\n".join(lines)


def task_outcome(
    tool: str,
    results: Sequence[TaskResult],
    *,
    allow_partial_failure: bool,
    min_success_count: int | None,
    timed_out: bool = False,
) -> ToolResult:
    """The ``task`` call's result from its children's (see the module docstring)."""
    total = len(results)
    failed = [r.index for r in results if not r.success]
    ok = total - len(failed)
    need = (min_success_count or 1) if allow_partial_failure else total
    status = "complete" if not failed else ("partial" if ok >= need else "failed")
    parts = [_render(r) for r in results]
    if failed and status == "partial":
        parts.append(
            f"{ok} of {total} task(s) succeeded; failed indexes {failed}. Retry only those if needed."
        )
    metadata = {
        "tasks": [r.to_json() for r in results],
        "fan_out": {
            "status": status,
            "total": total,
            "succeeded": ok,
            "failed": len(failed),
            "failed_indexes": failed,
            "allow_partial_failure": allow_partial_failure,
            "min_success_count": min_success_count,
            "timed_out": timed_out,
        },
        "source_anchors": bound_anchors(a for r in results for a in r.source_anchors),
    }
    output = "\n\n".join(parts)
    if status == "failed":
        err = PartialFailure(
            f"{len(failed)} of {total} task(s) failed"
            + (f" (at least {need} had to succeed)" if allow_partial_failure else ""),
            failed=len(failed),
            total=total,
        )
        return ToolResult(tool, f"{err.message}\n\n{output}", 1, metadata, err.to_kind())
    return ToolResult.success(tool, output, metadata)
