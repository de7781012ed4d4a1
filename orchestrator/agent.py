"""``Agent``: where sessions come from. Embedded by default; a fleet when a broker is configured (F-1).

``Agent()`` with no broker runs every call in this process on one event-loop thread.
``agent.session(workspace, options=SessionOptions(...))`` builds the kernel for a workspace named a
directory path or ``git:REPO@REV``; ``agent.resume(snapshot, options=...)`` rebuilds one from a
snapshot (R-5: the pinned transform policy is inherited, a different one rejected).

With ``settings.broker_url`` set, every session's fan-out runner is a ``CeleryRunner``: its branches
become ``a3s.tool`` jobs carrying the session's snapshot, run by ``a3s-fleet worker`` processes. The
Celery app is built on the first such session (embedded mode never imports Celery).
``settings.extra_tools`` names modules whose ``TOOLS``/``TOOL`` every session registers, so an
orchestrator and its workers offer the same tools.

Building the kernel itself is ``flows.sessions`` (shared with the workers); this module adds the SDK
façade and, in fleet mode, the dispatcher (``orchestrator.dispatch``) — the only door to the workers.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from config.settings import Settings
from flows.integrations import McpSource
from flows.loop import LoopThread
from flows.providers import parse_model_name
from flows.sessions import SessionCore, SessionFactory, extra_tools, open_workspace, process_services
from kernel.clock import RandomIds
from kernel.options import SessionOptions
from kernel.workspace import Workspace
from orchestrator.fanout import HostGatedRunner
from orchestrator.fanout_budget import BudgetedRunner
from orchestrator.session import Session

__all__ = ["Agent", "extra_tools", "open_workspace"]


def mcp_source(settings: Settings) -> McpSource:
    """The MCP servers of this process (``A3S_MCP_CONFIG``), loaded once; the workspace opt-in default."""
    from tools.mcp import load_config_file

    config = load_config_file(settings.mcp_config) if settings.mcp_config else None
    return McpSource(config=config, read_workspace=settings.mcp_workspace_config)


class Agent:
    """Where sessions come from: one event-loop thread, the process's services and, with a broker, the fleet.

    ``Agent()`` reads ``Settings`` from the environment (``A3S_*``); pass ``Settings(...)`` to choose
    explicitly. Without ``broker_url`` every call runs in this process (embedded, F-1); with it,
    fan-outs and direct calls become Celery jobs. Use it as a context manager — ``with Agent() as
    agent:`` or, from asyncio code, ``async with Agent() as agent:`` — so its sessions are closed
    (running calls cancelled, K-6) and its loop thread stopped. A broken ``A3S_MCP_CONFIG`` raises
    here, before any thread starts.
    """

    def __init__(self, settings: Settings | None = None, *, model: str | None = None) -> None:
        self.settings = settings or Settings()
        # The default model of this agent's sessions: Agent(model=...), else A3S_MODEL. A name only;
        # endpoints and keys are read from this process's environment when the model is called.
        self.model = model or self.settings.model
        if self.model:
            parse_model_name(self.model)  # a malformed name fails here, not at the first prompt
        mcp = mcp_source(self.settings)  # a broken A3S_MCP_CONFIG fails here, before any thread starts
        self._loop = LoopThread()
        self._factory = SessionFactory(
            self._loop,
            RandomIds(),
            extra_tools(self.settings.extra_tools),
            process_services(self.settings, self._state_store()),
            mcp,
        )
        self._sessions: list[Session] = []
        self._fleet_app: Any = None

    def _state_store(self) -> Any:
        """Breakers/bulkheads/coalescing for this agent's sessions: in memory, or the fleet's Redis."""
        if self.settings.embedded:
            from kernel.state import MemoryStateStore

            return MemoryStateStore()
        from orchestrator.dispatch_fleet import fleet_state_store

        return fleet_state_store(self.settings)

    @property
    def loop(self) -> LoopThread:
        """The event-loop thread every session of this agent runs its kernel on."""
        return self._loop

    def fleet_app(self) -> Any:
        """The Celery app fan-outs are sent through (fleet mode only; built once, on first use)."""
        if self._fleet_app is None:
            from orchestrator.dispatch_fleet import fleet_app

            self._fleet_app = fleet_app(self.settings)
        return self._fleet_app

    def session(
        self,
        workspace: str | os.PathLike[str] | Workspace = ".",
        options: SessionOptions | None = None,
        *,
        session_id: str | None = None,
        model: str | None = None,
    ) -> Session:
        """A new session on ``workspace`` (a directory, ``git:REPO@REV`` or a ``Workspace``).

        The surface follows the workspace's capabilities (S-2, S-3): a read-only git tree gets no
        ``write``/``edit``/``patch``/``bash``. ``options`` pins the transform policy, permission
        rules, hooks, budget and limits for the session's life. Raises ``ToolError`` (typed) for a
        workspace that cannot be opened or options that are invalid.
        ``model`` overrides the agent's default model (``Agent(model=)`` / ``A3S_MODEL``).
        """
        sid = session_id or self._factory.ids("session")
        core = self._factory.build(
            workspace, options or SessionOptions(), session_id=sid, sinks=self._sinks(sid)
        )
        if model or self.model:
            core.model = model or self.model
        return self._adopt(core)

    def resume(
        self, snapshot: dict[str, Any], options: SessionOptions | None = None, *, model: str | None = None
    ) -> Session:
        """Rebuild a session from ``session.snapshot()`` (R-5): same id, surface, tool state, pinned
        transform policy and agent conversation (A-2); a different policy in ``options`` is rejected
        (``InvalidArgument``). Its model is ``model``, else the snapshot's, else the agent's default.
        Callables (hooks, confirmation handler) are code, not snapshot data: pass them again."""
        sid = snapshot.get("session_id") if isinstance(snapshot, dict) else None
        core = self._factory.resume(snapshot, options, sinks=self._sinks(str(sid)) if sid else ())
        if model or (not core.model and self.model):
            core.model = model or self.model
        return self._adopt(core)

    def _sinks(self, session_id: str) -> list[Any]:
        if self.settings.embedded:
            return []
        # Fleet: this process's events join the workers' in the session's Redis Stream (S-5).
        from orchestrator.dispatch_fleet import fleet_session_sink

        return [fleet_session_sink(self.settings, session_id)]

    def _adopt(self, core: SessionCore) -> Session:
        session = Session(core)
        if not self.settings.embedded:
            from orchestrator.dispatch import CeleryRunner

            jobs = CeleryRunner(self.fleet_app(), session.snapshot, self.settings, session_id=session.id)
            # The session's budget admits and counts every branch here, not the workers' copies (K-3).
            remote = BudgetedRunner(core.kernel, jobs)
            # Host hooks are code, not snapshot data: they run here around each remote branch (before
            # the budget, as the kernel orders them).
            options = core.kernel.options
            hooks = options.pre_tool_hooks or options.post_tool_hooks
            session.runner = HostGatedRunner(core.kernel, remote) if hooks else remote
            session.remote = True
            # Workflows: steps become jobs of this runner; the history goes to a Redis Stream.
            from orchestrator.dispatch_workflow import fleet_workflow_services

            workflows = fleet_workflow_services(session.runner, self.settings, core.kernel.workspace.name)
            core.kernel.services.update(workflows)
            # Sub-agents: every `task` child is an a3s.agent job; the parent waits here (issue 9).
            from orchestrator.dispatch_agent import fleet_task_services

            tasks = fleet_task_services(self.fleet_app(), session.snapshot, self.settings, session.id)
            core.kernel.services.update(tasks)
            core.on_close(tasks["task_children"].close)
        self._sessions.append(session)
        return session

    def release(self, session: Session) -> None:
        """Close one session and forget it (long-lived hosts such as workers evict sessions)."""
        self._close_session(session)
        if session in self._sessions:
            self._sessions.remove(session)

    def _close_session(self, session: Session) -> None:
        session.close()
        agent_jobs = session.kernel.services.get("agent_job_runner")
        for runner in (session.runner, agent_jobs):
            aclose = getattr(runner, "aclose", None)
            if aclose is not None:  # the fleet runners' Redis connections live on this loop
                self._loop.run(aclose(), timeout=5)

    def close(self) -> None:
        """Close every session (cancelling running calls, K-6), the fleet connection, then the loop
        thread. Blocks for at most a few seconds; idempotent."""
        sessions, self._sessions = self._sessions, []
        for session in sessions:
            self._close_session(session)
        fleet_app, self._fleet_app = self._fleet_app, None
        if fleet_app is not None:
            fleet_app.close()
        self._loop.stop()

    def __enter__(self) -> Agent:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Agent:
        return self

    async def __aexit__(self, *exc: object) -> None:
        # close() blocks (it waits for cancelled calls to settle and joins the loop thread): keep it
        # off the caller's event loop so other tasks go on meanwhile.
        await asyncio.to_thread(self.close)
