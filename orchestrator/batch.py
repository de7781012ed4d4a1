"""Batch agent jobs: a JSONL file of prompts run as agent runs, embedded or on a fleet (SPEC A-5, A-4, F-1).

``run_batch(BatchRequest)``:

1. validates everything before anything runs: the whole job file (``orchestrator.batch_file``), each
   job's workspace (it must open) and model (the job's, ``--model`` or ``A3S_MODEL``: a job without one
   is an error naming its line);
2. reads RESULTS back and keeps only the jobs whose latest result is missing or failed (a rerun runs
   exactly those);
3. runs them — embedded: ``concurrency`` at a time (default ``DEFAULT_EMBEDDED_CONCURRENCY``), each in
   a session of its own on this process's loop; with a broker: each an ``a3s.agent`` job
   (``orchestrator.dispatch_agent``), all queued at once unless ``concurrency`` caps how many are in
   flight, as many running as the workers' slots allow. A run that fans out suspends on its worker
   and is resumed by a continuation job (A-4), so even one worker with one slot finishes the batch;
4. appends each result to RESULTS as it arrives, flushed and fsynced, and tells ``progress``.

Jobs never share a session: each starts fresh on its workspace with the batch's permission rules
(``--allow``/``--deny``; read-only calls are allowed, anything else that no rule allows is denied —
a batch has nobody to ask).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from config.settings import Settings
from flows.fanout import Branch
from flows.task.runs import Finished, advance, plan_run
from kernel.errors import InvalidArgument, ToolError, error_from_exception
from kernel.options import SessionOptions
from kernel.policy import PermissionPolicy
from kernel.result import ToolResult
from orchestrator.batch_file import Job, ResultsWriter, latest_results, load_jobs, pending_jobs, result_line

log = logging.getLogger(__name__)

DEFAULT_EMBEDDED_CONCURRENCY = 4
MAX_CONCURRENCY = 256


@dataclass
class BatchRequest:
    jobs_path: str
    out_path: str
    model: str | None = None
    workspace: str = "."
    concurrency: int | None = None
    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    settings: Settings = field(default_factory=Settings)


@dataclass
class BatchProgress:
    total: int
    skipped: int = 0
    done: int = 0
    failed: int = 0
    running: int = 0
    started: float = field(default_factory=time.monotonic)
    batch_id: str = field(default_factory=lambda: f"batch-{uuid.uuid4().hex[:12]}")

    @property
    def finished(self) -> int:
        return self.done + self.failed

    def rate(self) -> float:
        elapsed = time.monotonic() - self.started
        return self.finished / elapsed if elapsed > 0 else 0.0

    def eta_s(self) -> float | None:
        rate = self.rate()
        left = self.total - self.finished
        return left / rate if rate > 0 and left > 0 else (0.0 if left == 0 else None)


ProgressFn = Callable[[BatchProgress], None]


def batch_policy(allow: tuple[str, ...], deny: tuple[str, ...]) -> PermissionPolicy:
    """``--allow``/``--deny`` rules; read-only calls pass unless a rule says otherwise (as ``run``), and
    so does ``task``: delegating widens nothing, every child call meets these same rules. Anything else
    asks — and a batch has nobody to ask, so it is denied (``--deny task`` turns delegation off)."""
    return PermissionPolicy(allow=("task", *allow), deny=deny, allow_read_only=True)


def run_batch(req: BatchRequest, progress: ProgressFn | None = None) -> BatchProgress:
    """Validate, run what is pending, append results (see the module docstring)."""
    from orchestrator.agent import Agent, open_workspace

    jobs = load_jobs(req.jobs_path)
    default_model = req.model or getattr(req.settings, "model", None)
    for job in jobs:
        if not (job.spec.model or default_model):
            raise InvalidArgument(
                f"{req.jobs_path}:{job.line}: job {job.id!r} has no model: pass --model, set A3S_MODEL or "
                'give "model" in the job',
                path=f"{req.jobs_path}:{job.line}",
            )
    for name in sorted({j.spec.workspace or req.workspace for j in jobs}):
        try:
            open_workspace(name)
        except ToolError as err:
            raise InvalidArgument(f"workspace {name!r}: {err.message}", path=name) from None
    todo = pending_jobs(jobs, latest_results(req.out_path))
    state = BatchProgress(total=len(todo), skipped=len(jobs) - len(todo))
    if progress:
        progress(state)
    if not todo:
        return state
    policy = batch_policy(req.allow, req.deny)
    with ResultsWriter(req.out_path) as writer, Agent(req.settings) as agent:
        runner = _Embedded(agent, policy) if req.settings.embedded else _Fleet(agent, policy)

        lock = threading.Lock()

        def record(job: Job, row: dict[str, Any]) -> None:
            writer.write(row)
            with lock:
                if row["success"]:
                    state.done += 1
                else:
                    state.failed += 1
            if progress:
                progress(state)

        runner.run(todo, req, default_model, state, record, progress)
    return state


def _row(job: Job, result: ToolResult, started: float) -> dict[str, Any]:
    meta = result.metadata.get("agent_run") if isinstance(result.metadata, dict) else None
    meta = meta if isinstance(meta, dict) else {}
    return result_line(
        job.id,
        success=result.exit_code == 0,
        text=result.output,
        usage=dict(meta.get("usage") or {}),
        duration_ms=int((time.monotonic() - started) * 1000),
        session_id=str(meta.get("session_id") or ""),
        structured=meta.get("structured"),
        has_structured="structured" in meta,
        error=result.error_kind if result.exit_code != 0 else None,
    )


def _job_failed(job: Job, err: Exception) -> ToolResult:
    """The failed result of a job that raised; an untyped exception is a bug, logged with its traceback."""
    if not isinstance(err, ToolError):
        log.exception("batch job %s failed", job.id)
    return ToolResult.failure("agent", error_from_exception(err, "agent"))


class _Embedded:
    """Each job a session of this process; ``concurrency`` jobs at a time on the agent's loop."""

    def __init__(self, agent: Any, policy: PermissionPolicy) -> None:
        self.agent = agent
        self.policy = policy
        self.lock = threading.Lock()

    def run(
        self,
        todo: list[Job],
        req: BatchRequest,
        default_model: str | None,
        state: BatchProgress,
        record: Callable[[Job, dict[str, Any]], None],
        progress: ProgressFn | None,
    ) -> None:
        width = max(1, min(MAX_CONCURRENCY, req.concurrency or DEFAULT_EMBEDDED_CONCURRENCY))
        with concurrent.futures.ThreadPoolExecutor(width, thread_name_prefix="a3s-batch") as pool:
            futures = {pool.submit(self._one, job, req, default_model, state, progress): job for job in todo}
            for fut in concurrent.futures.as_completed(futures):
                job, row = fut.result()
                record(job, row)

    def _one(
        self, job: Job, req: BatchRequest, default_model: str | None, state: BatchProgress, progress: Any
    ) -> tuple[Job, dict[str, Any]]:
        started = time.monotonic()
        with self.lock:
            state.running += 1
        if progress:
            progress(state)
        try:
            spec = job.spec
            session = self.agent.session(
                spec.workspace or req.workspace, SessionOptions(permission_policy=self.policy)
            )
            try:
                try:
                    plan = plan_run(
                        session.core,
                        spec.prompt,
                        agent=spec.agent,
                        max_steps=spec.max_steps,
                        output_schema=spec.output_schema,
                        model=spec.model or default_model,
                    )
                    outcome = self.agent.loop.run(advance(session.core, plan, prompt=spec.prompt))
                    result = (
                        outcome.to_tool_result()
                        if isinstance(outcome, Finished)
                        else ToolResult.failure("agent", InvalidArgument("the run suspended embedded"))
                    )
                except Exception as err:  # a bug in one job is that job's failure, never the batch's
                    result = _job_failed(job, err)
                result.metadata.setdefault("agent_run", {}).setdefault("session_id", session.id)
            finally:
                self.agent.release(session)
            return job, _row(job, result, started)
        finally:
            with self.lock:
                state.running -= 1


class _Fleet:
    """Each job an ``a3s.agent`` job; results come back on one run's result list."""

    def __init__(self, agent: Any, policy: PermissionPolicy) -> None:
        self.agent = agent
        self.policy = policy

    def run(
        self,
        todo: list[Job],
        req: BatchRequest,
        default_model: str | None,
        state: BatchProgress,
        record: Callable[[Job, dict[str, Any]], None],
        progress: ProgressFn | None,
    ) -> None:
        from orchestrator.dispatch_agent import AgentJobRunner

        templates: dict[str, dict[str, Any]] = {}
        for name in sorted({j.spec.workspace or req.workspace for j in todo}):
            session = self.agent.session(name, SessionOptions(permission_policy=self.policy))
            templates[name] = session.snapshot()
            self.agent.release(session)
        first = next(iter(templates.values()))
        runner = AgentJobRunner(self.agent.fleet_app(), lambda: first, req.settings, session_id="batch")
        batch_id = state.batch_id
        cap = asyncio.Semaphore(min(MAX_CONCURRENCY * 64, req.concurrency or len(todo)))

        async def one(index: int, job: Job) -> None:
            spec = job.spec
            snapshot = dict(templates[spec.workspace or req.workspace])
            snapshot["session_id"] = f"{batch_id}.{index}"
            body: dict[str, Any] = {
                "kind": "run",
                "snapshot": snapshot,
                "run": {
                    "prompt": spec.prompt,
                    "agent": spec.agent,
                    "max_steps": spec.max_steps,
                    "output_schema": spec.output_schema,
                    "model": spec.model or default_model,
                },
                "label": {"agent": spec.agent or "general", "batch_id": batch_id, "job_id": job.id},
            }
            async with cap:
                started = time.monotonic()
                state.running += 1
                if progress:
                    progress(state)
                try:
                    try:
                        result = await runner.run_branch(
                            batch_id, index, Branch("agent", body, f"job {job.id}")
                        )
                    except Exception as err:  # as embedded
                        result = _job_failed(job, err)
                finally:
                    state.running -= 1
                result.metadata.setdefault("agent_run", {}).setdefault("session_id", snapshot["session_id"])
                # The line is fsynced: off the loop, whose reader feeds every other job's result.
                await asyncio.to_thread(record, job, _row(job, result, started))

        async def main() -> None:
            try:
                await asyncio.gather(*(one(i, job) for i, job in enumerate(todo)))
            finally:
                await runner.aclose()

        self.agent.loop.run(main())
