"""The run of ``a3s-fleet run --broker`` as one ``a3s.agent`` job on a worker (issue 8 item 4; SPEC A-4, F-1, S-5).

The session is built here (workspace, permission rules), and its snapshot travels in the job's
envelope, exactly like a batch job's (``orchestrator.batch``): a worker rebuilds it, runs the loop
with the model *name* and the worker's own endpoint and key, and reports the result on the run's
result list (``orchestrator.dispatch_agent.AgentJobRunner``). A run that delegates (``task``)
suspends on its worker and is continued by another job, like any fleet agent run.

The live view follows the session's Redis Stream, where the worker publishes the session's events
(``workers.state.events``): tool lines and the spinner work as they do embedded; the model's text
arrives with the result (workers make non-streaming requests). Nobody can be asked on a worker, so
a call that would ask is denied — the snapshot's rules are all there is.
"""

from __future__ import annotations

import concurrent.futures
import threading
import uuid
from dataclasses import dataclass
from typing import Any

STREAM_BLOCK_MS = 200
DRAIN_IDLE_S = 0.5
RESULT_WAIT_S = 5.0


@dataclass
class FleetRunResult:
    """The ``RunResult`` surface the CLI prints, rebuilt from the job's ``ToolResult``."""

    success: bool
    text: str
    session_id: str
    run_id: str
    model: str
    steps: int
    stop_reason: str
    tool_calls: list[dict[str, Any]]
    usage: dict[str, Any]
    error: dict[str, Any] | None
    message: str

    def to_json(self) -> dict[str, Any]:
        return {
            "success": self.success,
            "text": self.text,
            "session_id": self.session_id,
            "run_id": self.run_id,
            "model": self.model,
            "steps": self.steps,
            "stop_reason": self.stop_reason,
            "tool_calls": self.tool_calls,
            "usage": self.usage,
            "error": self.error,
            "message": self.message,
        }


def run_on_fleet(
    agent: Any, session: Any, prompt: str, model: str, max_steps: int | None, view: Any | None
) -> FleetRunResult:
    """Send the run as an ``a3s.agent`` job and wait for it; ``view`` (if any) gets the session's
    events from the stream while it runs. Ctrl-C cancels the job (flag + revoke, like any branch)."""
    from flows.fanout import Branch
    from kernel.errors import ToolError
    from kernel.result import ToolResult
    from orchestrator.dispatch_agent import AgentJobRunner

    snapshot = session.snapshot()
    runner = AgentJobRunner(agent.fleet_app(), lambda: snapshot, agent.settings, session_id=session.id)
    run_id = f"cli-run-{uuid.uuid4().hex[:12]}"
    body: dict[str, Any] = {
        "kind": "run",
        "snapshot": snapshot,
        "run": {"prompt": prompt, "max_steps": max_steps, "model": model},
        "label": {"agent": "general"},
    }

    async def one() -> ToolResult:
        try:
            return await runner.run_branch(run_id, 0, Branch("agent", body, f"run: {prompt[:80]}"))
        except ToolError as err:
            return ToolResult.failure("agent", err)
        finally:
            await runner.aclose()

    future = agent.loop.submit(one())
    try:
        if view is not None:
            _follow_events(agent.settings, session.id, future, view)
        result = future.result()
    except BaseException:
        future.cancel()  # the job's coroutine is cancelled: flag + revoke + settle (dispatch.py)
        try:
            future.result(timeout=RESULT_WAIT_S)
        except (concurrent.futures.CancelledError, concurrent.futures.TimeoutError, Exception):
            pass
        raise
    return _from_tool_result(result, run_id, model, session.id)


def _follow_events(settings: Any, session_id: str, future: concurrent.futures.Future[Any], view: Any) -> None:
    from workers.runtime import state_url
    from workers.state import make_client
    from workers.state.events import RedisStreamReader

    client = make_client(state_url(settings))
    stop = threading.Event()
    future.add_done_callback(lambda _f: stop.set())
    reader = RedisStreamReader(client, session_id)
    cursor = "0-0"
    try:
        for item in reader.read(cursor, block_ms=STREAM_BLOCK_MS, stop=stop):
            cursor = item.id
            view.event(item.event)
        # The worker publishes before it reports; take what is still on the way.
        for item in reader.read(cursor, block_ms=STREAM_BLOCK_MS, idle_timeout_s=DRAIN_IDLE_S):
            view.event(item.event)
    except Exception:  # events are observability: the result still comes back
        pass
    finally:
        client.close()


def _from_tool_result(result: Any, run_id: str, model: str, session_id: str) -> FleetRunResult:
    meta = result.metadata.get("agent_run") if isinstance(result.metadata, dict) else None
    meta = meta if isinstance(meta, dict) else {}
    success = result.exit_code == 0 and bool(meta.get("success", True))
    error = None if success else (result.error_kind or {"type": "failed"})
    return FleetRunResult(
        success=success,
        text=result.output if success or meta else "",
        session_id=str(meta.get("session_id") or session_id),
        run_id=run_id,
        model=model,
        steps=int(meta.get("steps") or 0),
        stop_reason=str(meta.get("stop_reason") or ("end_turn" if success else "error")),
        tool_calls=list(meta.get("tool_calls") or []),
        usage=dict(meta.get("usage") or {}),
        error=error,
        # A run that ended badly reports its kind (and the CLI prints it); a job that failed before
        # any run (no worker could start it, a bad envelope) has only its message.
        message="" if success or meta else " ".join(str(result.output or "").split())[:500],
    )
