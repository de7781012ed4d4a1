"""The replay driver: runs a workflow script in QuickJS and its steps through a ``StepRunner`` (F-2, F-3, F-7).

A workflow is ``async function run(wf, input)``; ``await wf.step(stepId, toolName, args)`` runs one
step — any tool, by name — and resolves to ``{output, exitCode, metadata}`` (a failed step rejects
with an ``Error`` carrying ``stepId``, ``exitCode`` and ``errorKind``; uncaught, it fails the run with
the step's error). Durable by replay:

- every execution runs the script from the start in a fresh VM (``tools.program.vm``);
- a step whose completed output is in the history for this run id, this query (``input.query``,
  see ``events.query_of``) and this step id returns that output without running again; anything else
  — a step that was only started, or that failed — runs again (F-3);
- a step id requested twice in one run with the same tool and arguments is the same step (one
  execution, both callers get its result); with different ones it is an error, and so is a recorded
  step the script now asks for with other arguments (the script is not deterministic);
- a finished step is kept for the rest of the run in the form its history stores (metadata compacted
  to ``MAX_STEP_METADATA_BYTES``, a failure's output cut to ``MAX_FAILED_OUTPUT_CHARS``), never as
  the step's whole result;
- every fact goes to the run's append-only ``EventLog`` before it is acted on or reported:
  ``run_created`` (when the run is new or the query changed), ``run_started``, ``step_created``,
  ``step_started``, ``step_completed`` / ``step_failed``, and the run's end.

Steps run concurrently up to ``max_concurrent_steps`` (``Promise.all``), and ``generate_object`` steps
up to ``max_concurrent_generations`` as well. The driver itself holds no worker slot: it runs where
it was called (the session's process) and only steps travel (``StepRunner``: a nested kernel call
embedded, a Celery job on a fleet).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from flows.workflow.events import (
    MAX_STEP_INPUT_BYTES,
    History,
    canonical,
    check_run_id,
    check_step_id,
    digest,
    envelope,
    query_of,
    step_input_digest,
)
from flows.workflow.log import EventLog, EventLogs
from kernel.errors import BudgetExhausted, InvalidArgument, Timeout, ToolError, error_from_kind
from kernel.result import ToolResult
from tools.program.bridge import compact_metadata
from tools.program.vm import VmOutcome, run_script

DEFAULT_MAX_CONCURRENT_STEPS = 4
MAX_CONCURRENT_STEPS = 32
DEFAULT_MAX_CONCURRENT_GENERATIONS = 1
MAX_CONCURRENT_GENERATIONS = 4
DEFAULT_TIMEOUT_MS = 3_600_000
SLICE_MS = 30_000  # uninterrupted JS between two step requests: more is a runaway loop
MAX_RESULT_BYTES = 1024 * 1024
MAX_STEP_METADATA_BYTES = 256 * 1024
MAX_FAILED_OUTPUT_CHARS = 4096  # of a failed step's output, in its step_failed event
MAX_STEPS = 10_000  # distinct steps one execution may request (a runaway script is not a workflow)
NOT_A_STEP = frozenset({"dynamic_workflow"})  # a workflow never starts a workflow
GENERATION_TOOLS = frozenset({"generate_object"})

ProgressFn = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class StepCall:
    run_id: str
    step_id: str
    tool: str
    args: dict[str, Any]
    query: str
    attempt: int
    failures: int = 0  # times this step failed before, in this run under this query (the history's)


class StepRunner(Protocol):
    """Runs one step: a nested kernel call embedded, a Celery job on a fleet."""

    async def run_step(self, call: StepCall) -> ToolResult: ...


@dataclass(frozen=True)
class WorkflowLimits:
    max_concurrent_steps: int = DEFAULT_MAX_CONCURRENT_STEPS
    max_concurrent_generations: int = DEFAULT_MAX_CONCURRENT_GENERATIONS
    timeout_ms: int = DEFAULT_TIMEOUT_MS

    def clamped(self) -> WorkflowLimits:
        return WorkflowLimits(
            max(1, min(MAX_CONCURRENT_STEPS, self.max_concurrent_steps)),
            max(1, min(MAX_CONCURRENT_GENERATIONS, self.max_concurrent_generations)),
            max(1, self.timeout_ms),
        )


@dataclass
class StepOutcome:
    step_id: str
    tool: str
    status: str  # completed | failed | recovered
    exit_code: int
    duration_ms: int = 0
    attempt: int = 0
    error_kind: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "step_id": self.step_id,
            "tool": self.tool,
            "status": self.status,
            "exit_code": self.exit_code,
            "duration_ms": self.duration_ms,
            "attempt": self.attempt,
            "error_kind": self.error_kind,
        }


@dataclass
class WorkflowOutcome:
    run_id: str
    status: str  # completed | failed
    output: Any = None
    error: str = ""
    error_kind: dict[str, Any] | None = None
    reason: str = ""  # failed because: script | step | timed_out | cancelled
    steps: list[StepOutcome] = field(default_factory=list)
    log: str = ""
    logs: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "status": self.status,
            "output": self.output,
            "error": self.error or None,
            "error_kind": self.error_kind,
            "reason": self.reason or None,
            "steps": [s.to_json() for s in self.steps],
            "log": self.log,
        }


class WorkflowDriver:
    def __init__(
        self,
        logs: EventLogs,
        runner: StepRunner,
        *,
        now_ms: Callable[[], int] | None = None,
        progress: ProgressFn | None = None,
    ) -> None:
        self.logs = logs
        self.runner = runner
        self.now_ms = now_ms or (lambda: time.time_ns() // 1_000_000)
        self.progress = progress

    async def run(
        self,
        source: str,
        run_input: Any,
        run_id: str,
        *,
        name: str = "",
        limits: WorkflowLimits | None = None,
        deadline: float | None = None,
    ) -> WorkflowOutcome:
        check_run_id(run_id)
        limits = (limits or WorkflowLimits()).clamped()
        loop = asyncio.get_running_loop()
        end = loop.time() + limits.timeout_ms / 1000
        deadline = end if deadline is None else min(deadline, end)
        log = await self.logs.open_for_run(run_id)
        try:
            run = _Run(self, log, run_id, run_input, limits)
            await run.begin(source, name)
            return await run.drive(source, deadline)
        finally:
            await log.close()


class _Run:
    """One execution of a run: its history, its log and the steps it started."""

    def __init__(
        self, driver: WorkflowDriver, log: EventLog, run_id: str, run_input: Any, limits: WorkflowLimits
    ) -> None:
        self.driver = driver
        self.log = log
        self.run_id = run_id
        self.input = run_input
        self.query = query_of(run_input)
        self.limits = limits
        self.history = History(run_id)
        self.sequence = 0
        self.step_slots = asyncio.Semaphore(limits.max_concurrent_steps)
        self.generation_slots = asyncio.Semaphore(limits.max_concurrent_generations)
        self.steps: dict[str, tuple[str, asyncio.Task[ToolResult]]] = {}
        self.outcomes: dict[str, StepOutcome] = {}

    async def emit(self, event: dict[str, Any]) -> None:
        """Append ``event`` and wait until it is durable. Sequence numbers are given and envelopes
        queued synchronously, so the log's order is the order of the calls (group commit)."""
        self.sequence += 1
        await self.log.submit(envelope(self.run_id, self.sequence, event, self.driver.now_ms()))
        if self.driver.progress is not None:
            with contextlib.suppress(Exception):  # a display problem never fails the run
                self.driver.progress(event)

    async def begin(self, source: str, name: str) -> None:
        self.history = History.fold(self.run_id, await self.log.load())
        self.sequence = self.history.last_sequence
        seg = self.history.current
        events: list[dict[str, Any]] = []
        if seg is None or seg.query != self.query or canonical(seg.input) != canonical(self.input):
            spec = {"name": name, "source_sha256": digest(source), "limits": self.limits.__dict__}
            events.append({"type": "run_created", "spec": spec, "input": self.input})
        starts = seg.starts if seg is not None and not events else 0
        events.append({"type": "run_started", "attempt": starts + 1})
        await asyncio.gather(*(self.emit(event) for event in events))  # one write for both
        for event in events:
            self.history.apply(event)

    async def drive(self, source: str, deadline: float) -> WorkflowOutcome:
        job = {
            "profile": "workflow",
            "source": _prepare(source),
            "inputs": self.input,
            "runId": self.run_id,
            "sliceMs": SLICE_MS,
        }
        try:
            vm = await run_script(job, self.handle, deadline, per_call=True)
        except asyncio.CancelledError:
            await self._settle_steps()
            with contextlib.suppress(Exception):
                await asyncio.shield(self.emit({"type": "run_cancelled", "reason": "cancelled by caller"}))
            raise
        await self._settle_steps()
        return await self.finish(vm)

    async def _settle_steps(self) -> None:
        """Steps still running when the script ended (not awaited, or the run failed) are cancelled
        and awaited, so no step outlives its run and each records how it ended."""
        live = [task for _, task in self.steps.values() if not task.done()]
        for task in live:
            task.cancel()
        if live:
            await asyncio.gather(*live, return_exceptions=True)

    # ---- one step --------------------------------------------------------------------------------

    async def handle(self, batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
        call = batch[0]
        if not isinstance(call, dict):
            return []  # not a request the prelude makes (a forged line): nothing waits for it
        cid = call.get("id")
        try:
            step_id, tool, args = _parse(call)
        except InvalidArgument as err:
            return [{"id": cid, "ok": False, "value": {"message": err.message, "errorKind": err.to_kind()}}]
        key = step_input_digest(tool, args)
        known = self.steps.get(step_id)
        if known is not None and known[0] != key:
            err = InvalidArgument(f"step id {step_id!r} was reused with different arguments in this run")
            return [{"id": cid, "ok": False, "value": _step_error(step_id, err)}]
        if known is None:
            if len(self.steps) >= MAX_STEPS:
                err = BudgetExhausted(
                    f"workflow requested more than {MAX_STEPS} steps in one run",
                    resource="steps",
                    reason="max_steps",
                )
                return [{"id": cid, "ok": False, "value": _step_error(step_id, err)}]
            task = asyncio.ensure_future(self.execute(step_id, tool, args, key))
            self.steps[step_id] = (key, task)
        else:
            task = known[1]
        try:
            result = await task
        except ToolError as err:
            return [{"id": cid, "ok": False, "value": _step_error(step_id, err)}]
        if result.exit_code != 0:
            message = f"step {step_id!r} ({tool}) failed: {result.output[:2000]}"
            value = {"message": message, "stepId": step_id, "exitCode": result.exit_code}
            value["errorKind"] = result.error_kind  # None for an untyped failure (a non-zero exit)
            return [{"id": cid, "ok": False, "value": value}]
        meta = compact_metadata(result.metadata, MAX_STEP_METADATA_BYTES)
        return [{"id": cid, "ok": True, "value": {"output": result.output, "exitCode": 0, "metadata": meta}}]

    async def execute(self, step_id: str, tool: str, args: dict[str, Any], key: str) -> ToolResult:
        recovered = self.history.recover(self.query, step_id)
        if recovered is not None and recovered.output is not None:
            if recovered.input_digest and recovered.input_digest != key:
                raise InvalidArgument(
                    f"step {step_id!r} is recorded with other arguments for this run and query: the "
                    "workflow script is not deterministic (use a new run id, or new step ids)"
                )
            result = ToolResult.from_json(recovered.output)
            self.outcomes[step_id] = StepOutcome(
                step_id, tool, "recovered", result.exit_code, 0, recovered.attempts
            )
            self._progress({"type": "step_recovered", "step_id": step_id, "step_name": tool})
            return result
        created = self.history.created(self.query, step_id)
        if created is not None and created.input_digest and created.input_digest != key:
            raise InvalidArgument(
                f"step {step_id!r} was created with other arguments in this run: the workflow script is "
                "not deterministic (use a new run id, or new step ids)"
            )
        if created is None:
            await self.emit(
                {"type": "step_created", "step_id": step_id, "step_name": tool, "input": args, "retry": None}
            )
        attempt = (created.attempts if created is not None else 0) + 1
        slots = [self.step_slots, *([self.generation_slots] if tool in GENERATION_TOOLS else [])]
        async with contextlib.AsyncExitStack() as stack:
            for slot in slots:
                await stack.enter_async_context(slot)
            await self.emit({"type": "step_started", "step_id": step_id, "attempt": attempt})
            t0 = time.monotonic()
            failures = self.history.failures(self.query, step_id)
            call = StepCall(self.run_id, step_id, tool, args, self.query, attempt, failures)
            try:
                result = await self.driver.runner.run_step(call)
            except asyncio.CancelledError:
                with contextlib.suppress(Exception):
                    await asyncio.shield(
                        self._failed(step_id, attempt, "cancelled", {"type": "cancelled", "op": tool})
                    )
                raise
            except ToolError as err:  # the dispatcher itself failed (a broker down): typed
                result = ToolResult.failure(tool, err)
            ms = int((time.monotonic() - t0) * 1000)
        # The step's task keeps its result until the run ends (a step id asked for again gets it):
        # keep the form the history stores, not the whole result — 120 steps with 1 MiB of metadata
        # each held 458 MB for the run's life, ~100 MB now.
        if result.exit_code == 0:
            output = result.to_json()
            output["metadata"] = compact_metadata(output.get("metadata") or {}, MAX_STEP_METADATA_BYTES)
            await self.emit({"type": "step_completed", "step_id": step_id, "output": output})
            self.outcomes[step_id] = StepOutcome(step_id, tool, "completed", 0, ms, attempt)
            return ToolResult.from_json(output)
        message = result.output[:MAX_FAILED_OUTPUT_CHARS]
        await self._failed(step_id, attempt, message, result.error_kind)
        self.outcomes[step_id] = StepOutcome(
            step_id, tool, "failed", result.exit_code, ms, attempt, result.error_kind
        )
        return ToolResult(result.name, message, result.exit_code, {}, result.error_kind, result.trust)

    async def _failed(self, step_id: str, attempt: int, message: str, kind: dict[str, Any] | None) -> None:
        await self.emit(
            {
                "type": "step_failed",
                "step_id": step_id,
                "attempt": attempt,
                "error": {"message": message, "error_kind": kind},
            }
        )

    def _progress(self, event: dict[str, Any]) -> None:
        if self.driver.progress is not None:
            with contextlib.suppress(Exception):
                self.driver.progress(event)

    # ---- the run's end ---------------------------------------------------------------------------

    async def finish(self, vm: VmOutcome) -> WorkflowOutcome:
        out = WorkflowOutcome(
            self.run_id,
            "failed",
            steps=list(self.outcomes.values()),
            log=self.driver.logs.location(self.run_id),
            logs=vm.logs,
        )
        if vm.ok:
            size = len(json.dumps(vm.value, ensure_ascii=False, default=str).encode())
            if size <= MAX_RESULT_BYTES:
                out.status, out.output = "completed", vm.value
                await self.emit({"type": "run_completed", "output": vm.value})
                return out
            vm = VmOutcome(False, kind="result_too_large", error="")
            err: ToolError = BudgetExhausted(
                f"workflow result is {size} bytes, over {MAX_RESULT_BYTES}; return a summary",
                resource="script_result",
                reason="max_script_result_bytes",
            )
        else:
            err = _vm_error(vm)
        out.error, out.error_kind = err.message, err.to_kind()
        if vm.kind == "timeout":
            out.reason = "timed_out"
            await self.emit({"type": "run_timed_out", "timeout_ms": self.limits.timeout_ms})
        else:
            out.reason = "step" if vm.step_id else "script"
            await self.emit(
                {"type": "run_failed", "error": {"message": err.message, "error_kind": out.error_kind}}
            )
        return out


def _prepare(source: str) -> str:
    from tools.program.source import prepare

    return prepare(source)


def _parse(call: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    payload = call.get("payload")
    if call.get("kind") != "step" or not isinstance(payload, dict):
        raise InvalidArgument("a workflow script can only call wf.step(stepId, toolName, args)")
    step_id = check_step_id(payload.get("stepId"))
    tool, args = payload.get("tool"), payload.get("args")
    if not isinstance(tool, str) or not tool:
        raise InvalidArgument(f"wf.step({step_id!r}, toolName, …): toolName must be a non-empty string")
    if tool in NOT_A_STEP:
        raise InvalidArgument(f"wf.step({step_id!r}, {tool!r}, …): a workflow cannot start a workflow")
    if not isinstance(args, dict):
        raise InvalidArgument(f"wf.step({step_id!r}, {tool!r}, args): args must be an object")
    if len(canonical(args).encode("utf-8", "surrogatepass")) > MAX_STEP_INPUT_BYTES:
        raise InvalidArgument(f"wf.step({step_id!r}): step input is over {MAX_STEP_INPUT_BYTES} bytes")
    return step_id, tool, args


def _step_error(step_id: str, err: ToolError) -> dict[str, Any]:
    return {"message": err.message, "stepId": step_id, "errorKind": err.to_kind()}


def _vm_error(vm: VmOutcome) -> ToolError:
    if vm.kind == "aborted" and isinstance(vm.value, ToolError):
        return vm.value  # the VM runner ended the run (too many requests outstanding)
    if vm.kind == "timeout":
        return Timeout("workflow timed out", op="dynamic_workflow", duration_ms=vm.duration_ms)
    if vm.kind == "runaway":
        return BudgetExhausted(
            f"workflow script ran for more than {SLICE_MS} ms without waiting on a step",
            resource="cpu",
            reason="runaway_script",
        )
    if vm.kind == "memory":
        return BudgetExhausted(
            "workflow script ran out of memory (64 MiB)", resource="memory", reason="vm_memory"
        )
    if vm.kind == "stack":
        return BudgetExhausted("workflow script overflowed the stack", resource="stack", reason="vm_stack")
    if vm.kind in ("syntax", "no_entry"):
        return InvalidArgument(
            f"workflow script rejected: {vm.error.replace('run(ctx, inputs)', 'run(wf, input)')}"
        )
    if vm.error_kind:
        return error_from_kind(vm.error_kind, f"workflow failed: {vm.error}")
    return ToolError(f"workflow script failed: {vm.error}", stage=vm.kind or "script")
