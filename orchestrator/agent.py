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
"""

from __future__ import annotations

import dataclasses
import importlib
import os
from pathlib import Path
from typing import Any

from config.settings import Settings
from kernel.artifacts import ArtifactStore, MemoryArtifactStore
from kernel.clock import RandomIds, SystemClock
from kernel.errors import InvalidArgument
from kernel.events import FanoutSink, MemoryEventSink
from kernel.kernel import Kernel
from kernel.options import SessionOptions
from kernel.projection import Projector, ToolResultTransformPolicyV1, compact_change_metadata
from kernel.registry import Registry
from kernel.spec import ToolSpec
from kernel.workspace import Workspace
from orchestrator.fanout import HostGatedRunner
from orchestrator.loop import LoopThread
from orchestrator.session import Session
from orchestrator.snapshot import check_snapshot
from tools import builtin_tools
from tools.search.retrieval import close_retrieval, start_retrieval


def open_workspace(name: str | os.PathLike[str] | Workspace) -> Workspace:
    if isinstance(name, Workspace):
        return name
    from kernel.workspace_names import open_workspace as _open

    return _open(os.fspath(name))


def _artifact_store(workspace: Workspace, options: SessionOptions) -> ArtifactStore:
    if options.artifact_store == "file" and workspace.root is not None and "write" in workspace.capabilities:
        from kernel.artifact_files import FileArtifactStore

        return FileArtifactStore(Path(workspace.root) / ".a3s" / "artifacts")
    return MemoryArtifactStore()


def extra_tools(modules: str) -> list[ToolSpec]:
    """The tools of ``settings.extra_tools``: comma-separated modules exposing ``TOOLS`` or ``TOOL``."""
    specs: list[ToolSpec] = []
    for name in (m.strip() for m in modules.split(",")):
        if not name:
            continue
        try:
            module = importlib.import_module(name)
        except ImportError as exc:
            raise InvalidArgument(f"extra_tools: cannot import {name!r}: {exc}") from exc
        found = getattr(module, "TOOLS", None) or [getattr(module, "TOOL", None)]
        if not all(isinstance(spec, ToolSpec) for spec in found):
            raise InvalidArgument(
                f"extra_tools: {name!r} exposes neither TOOLS (a list of ToolSpec) nor TOOL"
            )
        specs.extend(found)
    return specs


class Agent:
    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or Settings()
        self._loop = LoopThread()
        self._ids = RandomIds()
        self._sessions: list[Session] = []
        self._extra_tools = extra_tools(self.settings.extra_tools)
        self._fleet_app: Any = None

    @property
    def loop(self) -> LoopThread:
        """The event-loop thread every session of this agent runs its kernel on."""
        return self._loop

    def fleet_app(self) -> Any:
        """The Celery app fan-outs are sent through (fleet mode only; built once, on first use)."""
        if self._fleet_app is None:
            from workers.app import make_app

            self._fleet_app = make_app(self.settings)
        return self._fleet_app

    def session(
        self,
        workspace: str | os.PathLike[str] | Workspace = ".",
        options: SessionOptions | None = None,
        *,
        session_id: str | None = None,
    ) -> Session:
        return self._build(workspace, options or SessionOptions(), session_id=session_id)

    def resume(self, snapshot: dict[str, Any], options: SessionOptions | None = None) -> Session:
        check_snapshot(snapshot)
        options = options or SessionOptions()
        pinned = ToolResultTransformPolicyV1.from_json(snapshot["config"]["tool_result_transform_policy"])
        if pinned.binding() != snapshot["transform_binding"]:
            raise InvalidArgument(
                "snapshot transform binding drifted from its pinned policy; refusing to resume"
            )
        if options.tool_result_transform_policy is None:
            options = dataclasses.replace(options, tool_result_transform_policy=pinned)
        elif options.tool_result_transform_policy.digest() != pinned.digest():
            raise InvalidArgument(
                "resume was given a tool_result_transform_policy different from the one pinned in the snapshot"
            )
        return self._build(
            snapshot["workspace"],
            options,
            session_id=snapshot["session_id"],
            session_state=dict(snapshot.get("session_state") or {}),
            budget_used=snapshot.get("budget_used"),
            started_ms=snapshot.get("created_ms"),
        )

    def _build(
        self,
        workspace_name: str | os.PathLike[str] | Workspace,
        options: SessionOptions,
        *,
        session_id: str | None,
        session_state: dict[str, Any] | None = None,
        budget_used: dict[str, Any] | None = None,
        started_ms: int | None = None,
    ) -> Session:
        workspace = open_workspace(workspace_name)
        policy = options.tool_result_transform_policy or ToolResultTransformPolicyV1.conservative()
        policy.validate_policy()
        artifacts = _artifact_store(workspace, options)
        memory = MemoryEventSink()
        sinks: list[Any] = [memory]
        if "event_sink" in options.services:
            sinks.append(options.services["event_sink"])
        sid = session_id or self._ids("session")
        if not self.settings.embedded:
            # Fleet: this process's events join the workers' in the session's Redis Stream (S-5).
            from orchestrator.event_stream import fleet_event_sink
            from workers.runtime import state_url

            sinks.insert(0, fleet_event_sink(state_url(self.settings), sid))
        builtins = builtin_tools(
            workspace.capabilities, retrieval_enabled=options.workspace_retrieval, services=options.services
        )
        registry = Registry(builtins)
        for spec in self._extra_tools:
            # Host-configured tools are dynamic tools: they can never claim built-in trust (K-2).
            registry.register(spec)
        kernel = Kernel(
            session_id=sid,
            registry=registry,
            workspace=workspace,
            options=options,
            projector=Projector(policy, artifacts),
            artifacts=artifacts,
            sink=FanoutSink(*sinks) if len(sinks) > 1 else memory,
            clock=SystemClock(),
            ids=self._ids,
            compact_change=compact_change_metadata,
            services=dict(options.services),
            session_state=session_state,
            budget_used=budget_used,
            started_ms=started_ms,
        )
        name = workspace_name if isinstance(workspace_name, str) else workspace.name
        session = Session(kernel, self._loop, memory, str(name))
        if options.workspace_retrieval:
            # The index is session-owned: it starts building now and is freed when the session closes.
            start_retrieval(kernel.session_state, workspace, kernel.services)
            session.on_close(lambda: close_retrieval(kernel.session_state))
        if not self.settings.embedded:
            from orchestrator.dispatch import CeleryRunner

            remote = CeleryRunner(self.fleet_app(), session.snapshot, self.settings, session_id=session.id)
            # Host hooks are code, not snapshot data: they run here around each remote branch.
            hooks = options.pre_tool_hooks or options.post_tool_hooks
            session.runner = HostGatedRunner(kernel, remote) if hooks else remote
            session.remote = True
        self._sessions.append(session)
        return session

    def release(self, session: Session) -> None:
        """Close one session and forget it (long-lived hosts such as workers evict sessions)."""
        self._close_session(session)
        if session in self._sessions:
            self._sessions.remove(session)

    def _close_session(self, session: Session) -> None:
        session.close()
        aclose = getattr(session.runner, "aclose", None)
        if aclose is not None:  # the fleet runner's Redis connections live on this loop
            self._loop.run(aclose(), timeout=5)

    def close(self) -> None:
        for session in self._sessions:
            self._close_session(session)
        if self._fleet_app is not None:
            self._fleet_app.close()
        self._loop.stop()

    def __enter__(self) -> Agent:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
