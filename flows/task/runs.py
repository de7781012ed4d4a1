"""An agent run driven to its end, possibly across suspensions (SPEC A-2, A-4, X-3; issue 9).

``RunPlan`` is what a run was asked — prompt, model, step bound, system prompt, tool surface,
``output_schema`` — plus what it has used so far (steps, usage). It is JSON-safe: a run that
suspends on a fleet carries it in its suspension, and the continuation resumes with it.

``advance(core, plan, prompt=…)`` runs the agent loop (``flows.agent.run_agent``) for one segment:

- the loop stops ``suspended`` (a ``task`` call on a fleet job left its call pending) →
  ``Suspended``; the caller stores the run and resumes it later with ``prompt=None`` and the pending
  calls' results (``tool_results``);
- otherwise → ``Finished``: the final text and, with an ``output_schema``, the validated value. A
  final answer that does not match gets up to ``MAX_SCHEMA_REPAIRS`` repair turns (one step each, no
  tools: a repair never suspends) with the validation errors; still wrong → ``invalid_argument``.

The step bound covers the whole run: each segment gets what the earlier ones left.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from kernel.call_args import depth_within
from kernel.errors import BudgetExhausted, InvalidArgument
from kernel.result import ToolResult

DEFAULT_MAX_STEPS = 50  # as the agent loop's default (issue 8)
MAX_SCHEMA_REPAIRS = 2
MAX_SCHEMA_ERRORS = 8
MAX_ERROR_CHARS = 300  # per error fed back to the model (generate_object's bound)
MAX_ANSWER_DEPTH = 64  # as generate_object's answers (flows.generate_object.schema)
_TOO_DEEP = f"$: the final answer nests more than {MAX_ANSWER_DEPTH} levels deep"


@dataclass
class RunPlan:
    prompt: str
    max_steps: int
    model: str | None = None
    system: str | None = None
    tools: list[str] | None = None
    output_schema: dict[str, Any] | None = None
    steps_used: int = 0
    usage: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "prompt": self.prompt,
            "max_steps": self.max_steps,
            "model": self.model,
            "system": self.system,
            "tools": self.tools,
            "output_schema": self.output_schema,
            "steps_used": self.steps_used,
            "usage": dict(self.usage),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunPlan:
        return cls(
            prompt=str(data.get("prompt") or ""),
            max_steps=int(data.get("max_steps") or 1),
            model=data.get("model"),
            system=data.get("system"),
            tools=list(data["tools"]) if data.get("tools") is not None else None,
            output_schema=data.get("output_schema"),
            steps_used=int(data.get("steps_used") or 0),
            usage=dict(data.get("usage") or {}),
        )

    def system_prompt(self) -> str | None:
        if self.output_schema is None:
            return self.system
        return (self.system or "") + schema_instructions(self.output_schema)


@dataclass
class Suspended:
    """The loop stopped on pending ``task`` calls (``run`` is the loop's ``RunResult``)."""

    run: Any


@dataclass
class Finished:
    text: str
    success: bool
    stop_reason: str
    error: dict[str, Any] | None
    session_id: str
    steps: int
    usage: dict[str, Any]
    structured: Any = None
    has_structured: bool = False
    tool_calls: list[dict[str, Any]] = field(default_factory=list)

    def to_tool_result(self, name: str = "agent") -> ToolResult:
        """The run as a job result: output = final text, metadata = the rest (JSON)."""
        metadata: dict[str, Any] = {
            "agent_run": {
                "success": self.success,
                "stop_reason": self.stop_reason,
                "session_id": self.session_id,
                "steps": self.steps,
                "usage": self.usage,
                "tool_calls": self.tool_calls,
            }
        }
        if self.has_structured:
            metadata["agent_run"]["structured"] = self.structured
        return ToolResult(name, self.text, 0 if self.success else 1, metadata, self.error)


def plan_run(
    core: Any,
    prompt: str,
    *,
    agent: str | None = None,
    max_steps: int | None = None,
    output_schema: dict[str, Any] | None = None,
    model: str | None = None,
) -> RunPlan:
    """A top-level run (a batch job): ``agent`` — a definition name (``not_found`` when unknown) whose
    tools, system prompt, model and step bound apply — or the session's own tools; the model is the
    job's, else the agent's, else the session's. A top-level run may delegate (``task``)."""
    from flows.task.agents import resolve_agent

    surface = core.kernel.registry.names()
    if agent is not None:
        definition = resolve_agent(core.kernel.workspace, agent)
        tools = None if definition.tools is None else [n for n in surface if n in definition.tools]
        return RunPlan(
            prompt=prompt,
            max_steps=max_steps or definition.max_steps or DEFAULT_MAX_STEPS,
            model=model or definition.model or core.model,
            system=definition.system_prompt,
            tools=tools,
            output_schema=output_schema,
        )
    return RunPlan(
        prompt=prompt,
        max_steps=max_steps or DEFAULT_MAX_STEPS,
        model=model or core.model,
        output_schema=output_schema,
    )


def schema_instructions(schema: dict[str, Any]) -> str:
    return (
        "\n\nWhen you are done, reply with only a JSON value (no prose, no code fence) that matches this "
        "JSON Schema:\n" + json.dumps(schema, ensure_ascii=False)
    )


def structured_answer(text: str, schema: dict[str, Any]) -> tuple[Any, list[str]]:
    """The JSON value a final answer holds and its schema violations (empty when valid)."""
    body = text.strip()
    if body.startswith("```"):
        body = body.split("\n", 1)[1] if "\n" in body else ""
        body = body.rsplit("```", 1)[0]
    try:
        value = json.loads(body)
    except ValueError as exc:
        return None, [f"the final answer is not JSON ({exc})"]
    except RecursionError:  # deeper than json.loads goes
        return None, [_TOO_DEEP]
    if not depth_within(value, MAX_ANSWER_DEPTH):  # jsonschema's recursive descent would raise
        return None, [_TOO_DEEP]
    import jsonschema  # on first use: session builds stay free of it (CLI start-up, issue 13 item 7)

    from kernel.schema_refs import RefRefused, ref_validator  # the model wrote both: RE2, local refs
    from kernel.schema_steps import ValidationTooCostly, bounded_errors

    try:
        validator = ref_validator(jsonschema.Draft202012Validator, schema)
    except RefRefused as exc:  # checked with the call's arguments; a stored plan is checked again
        return value, [f"$: output_schema {exc}"]
    try:
        found = bounded_errors(validator, value)  # a $ref tree can be exponential: bounded (K-8)
    except ValidationTooCostly as exc:
        return value, [f"$: {exc.message}"]
    errors = [
        f"{'/' + '/'.join(str(p) for p in e.absolute_path) if e.absolute_path else '$'}: {e.message}"
        for e in sorted(found, key=lambda e: list(e.absolute_path))[:MAX_SCHEMA_ERRORS]
    ]
    # Each cut, as generate_object's: the message quotes the answer (an enum miss is its repr, whole).
    return value, [e if len(e) <= MAX_ERROR_CHARS else e[:MAX_ERROR_CHARS] + "…" for e in errors]


def usage_json(usage: Any) -> dict[str, Any]:
    to_json = getattr(usage, "to_json", None)
    return dict(to_json()) if callable(to_json) else dict(usage or {})


def add_usage(total: dict[str, Any], more: dict[str, Any]) -> dict[str, Any]:
    out = dict(total)
    for k, v in more.items():
        if isinstance(v, int) and not isinstance(v, bool):
            out[k] = int(out.get(k) or 0) + v
    return out


async def advance(
    core: Any,
    plan: RunPlan,
    *,
    prompt: str | None,
    tool_results: dict[str, ToolResult] | None = None,
) -> Suspended | Finished:
    """One segment of the run (see the module docstring)."""
    from flows.agent import run_agent  # the agent loop (issue 8)

    if plan.model and core.model != plan.model:
        core.model = plan.model  # the session's model from now on: its children inherit it (A-1: a name)
    left = plan.max_steps - plan.steps_used
    if left < 1:
        err = BudgetExhausted(
            f"max_steps ({plan.max_steps}) reached before the run resumed", resource="max_steps"
        )
        return _finished(core, plan, "", False, "max_steps", err.to_kind())
    system = plan.system_prompt()
    run = await run_agent(
        core,
        prompt,
        model=plan.model,
        max_steps=left,
        system=system,
        stream=False,
        tools=plan.tools,
        tool_results=tool_results,
    )
    plan.steps_used += run.steps
    plan.usage = add_usage(plan.usage, usage_json(run.usage))
    calls = [_call_json(c) for c in run.tool_calls]
    if run.stop_reason == "suspended":
        return Suspended(run)
    text, error = run.text, run.error
    if not run.success or plan.output_schema is None:
        return _finished(core, plan, text, run.success, run.stop_reason, error, calls=calls)
    value, problems = structured_answer(text, plan.output_schema)
    repairs = 0
    while problems and repairs < MAX_SCHEMA_REPAIRS:
        repairs += 1
        fix = await run_agent(
            core,
            "Your final answer does not match the required JSON Schema: "
            + "; ".join(problems)
            + ". Reply with only the corrected JSON value.",
            model=plan.model,
            max_steps=1,
            system=system,
            stream=False,
            tools=[],
        )
        plan.steps_used += fix.steps
        plan.usage = add_usage(plan.usage, usage_json(fix.usage))
        if not fix.success:
            return _finished(core, plan, fix.text, False, fix.stop_reason, fix.error, calls=calls)
        text = fix.text
        value, problems = structured_answer(text, plan.output_schema)
    if problems:
        err = InvalidArgument(
            "the final answer does not match the output_schema: " + "; ".join(problems), path="output_schema"
        )
        return _finished(core, plan, text, False, "error", err.to_kind(), calls=calls)
    return _finished(core, plan, text, True, run.stop_reason, None, value, True, calls=calls)


def _spent(core: Any) -> dict[str, int]:
    """The child session's tool calls and output bytes so far (its budget tracker): the parent is
    charged them (``flows.task.tool.charge_children``), as it is the model tokens in ``usage``."""
    tracker = getattr(getattr(core, "kernel", None), "budget", None)
    if tracker is None:
        return {}
    return {"tool_calls": tracker.tool_calls, "output_bytes": tracker.output_bytes}


def _call_json(record: Any) -> dict[str, Any]:
    return {"tool": record.tool, "exit_code": record.exit_code}


def _finished(
    core: Any,
    plan: RunPlan,
    text: str,
    success: bool,
    stop_reason: str,
    error: dict[str, Any] | None,
    structured: Any = None,
    has_structured: bool = False,
    calls: list[dict[str, Any]] | None = None,
) -> Finished:
    return Finished(
        text=text,
        success=success,
        stop_reason=stop_reason,
        error=error,
        session_id=core.id,
        steps=plan.steps_used,
        usage={**plan.usage, **_spent(core)},
        structured=structured,
        has_structured=has_structured,
        tool_calls=list(calls or []),
    )
