"""The session core: a kernel built for a workspace or restored from a snapshot (SPEC S-2, R-5, K-6, F-1).

The SDK (``orchestrator.Agent`` / ``Session``) and the fleet's workers both build sessions here, so a
worker never imports the orchestrator (ARCHITECTURE.md: everything a worker needs sits below it).

``SessionFactory.build`` opens the workspace (a directory or ``git:REPO@REV``), assembles the surface
(built-ins gated by the workspace's capabilities, then the configured extra tools as dynamic tools —
they can never claim built-in trust, K-2), pins the transform policy, picks the artifact store and
starts Workspace Retrieval when asked. ``SessionFactory.resume`` rebuilds a session from a snapshot:
the pinned transform policy is inherited, an explicitly different one is rejected, and so is a
snapshot whose binding drifted from its own policy (R-5). ``options_from_snapshot`` recovers the JSON
part of the options (permission rules, budget, limits) so a restored session enforces what the
original enforced.

A ``SessionCore`` is what both sides hold: the kernel, its in-memory event log, the workspace name
and the loop thread it runs on. ``close()`` is K-6: cancel every running call through the kernel's
cancel scope (on the loop), wait for them to settle, then run the close hooks (e.g. free the
retrieval index).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import importlib
import os
from collections.abc import Callable, Sequence
from typing import Any

from flows.agent.conversation import MODEL_STATE_KEY, Conversation
from flows.generate_object import generate_object_tool
from flows.integrations import McpSource, attach_integrations
from flows.loop import LoopThread
from flows.providers import parse_model_name
from flows.session_kernel import artifact_store, assemble_kernel, checked_policy
from flows.snapshot import build_snapshot, check_snapshot
from flows.task.inprocess import InProcessChildren
from flows.task.tool import TASK_CHILDREN_SERVICE, TASK_TOOLS
from flows.workflow.tool import workflow_tool
from kernel.budget import Budget
from kernel.clock import IdFactory
from kernel.errors import InvalidArgument
from kernel.events import EventSink, MemoryEventSink
from kernel.kernel import Kernel
from kernel.options import SessionOptions
from kernel.policy import PermissionPolicy
from kernel.projection import ToolResultTransformPolicyV1
from kernel.registry import Registry
from kernel.spec import ToolSpec
from kernel.workspace import Workspace
from tools.builtin import builtin_tools

CLOSE_SETTLE_S = 5.0
DRAIN_POLL_S = 0.01


def open_workspace(name: str | os.PathLike[str] | Workspace) -> Workspace:
    if isinstance(name, Workspace):
        return name
    from kernel.workspace_names import open_workspace as _open

    return _open(os.fspath(name))


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


def options_from_snapshot(snapshot: dict[str, Any], services: dict[str, Any]) -> SessionOptions:
    """The JSON part of a snapshot's options (permission rules, budget, limits, settings): a restored
    session enforces what the original enforced. The transform policy is pinned by ``resume`` itself;
    callables (hooks, confirmation handler) are code, not data, and stay with the original host."""
    config = snapshot.get("config") or {}
    known = {f.name for f in dataclasses.fields(SessionOptions)}
    kwargs: dict[str, Any] = {k: v for k, v in (config.get("settings") or {}).items() if k in known}
    if kwargs.get("skill_allowed_tools") is not None:
        kwargs["skill_allowed_tools"] = frozenset(kwargs["skill_allowed_tools"])
    kwargs["permission_policy"] = PermissionPolicy.from_json(config.get("permission_policy"))
    kwargs["budget"] = Budget.from_json(config.get("budget"))
    return SessionOptions(**kwargs, services=services)


class SessionCore:
    """One session's kernel, event log and loop; ``close()`` cancels its running calls (K-6).

    It also holds the agent conversation (``flows.agent``): the messages, and the model *name*
    (``model``, kept in session state so model-backed tools on any process see it); both travel in
    the snapshot. ``agent_lock`` lets one agent run at a time use the conversation."""

    def __init__(
        self,
        kernel: Kernel,
        memory: MemoryEventSink,
        workspace_name: str,
        loop: LoopThread,
        conversation: Conversation | None = None,
    ) -> None:
        self.kernel = kernel
        self.memory = memory
        self.workspace_name = workspace_name
        self.loop = loop
        self.closed = False
        self.conversation = conversation or Conversation()
        self.agent_lock = asyncio.Lock()
        self._closers: list[Callable[[], None]] = []

    @property
    def id(self) -> str:
        return self.kernel.session_id

    @property
    def model(self) -> str | None:
        name = self.kernel.session_state.get(MODEL_STATE_KEY)
        return name if isinstance(name, str) and name else None

    @model.setter
    def model(self, name: str | None) -> None:
        if name:
            parse_model_name(name)  # a bad name fails here, before any request
            self.kernel.session_state[MODEL_STATE_KEY] = name
        else:
            self.kernel.session_state.pop(MODEL_STATE_KEY, None)

    def snapshot(self) -> dict[str, Any]:
        snap = build_snapshot(self.kernel, self.workspace_name)
        snap["conversation"] = self.conversation.to_json(self.model)  # a model name, never an endpoint
        return snap

    def on_close(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` when the session closes (after running calls were cancelled)."""
        self._closers.append(fn)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.loop.call(self.kernel.close).result(timeout=CLOSE_SETTLE_S)
        try:
            self.loop.run(self._drain(), timeout=CLOSE_SETTLE_S + 1)
        except concurrent.futures.TimeoutError:
            pass  # a call that ignores cancellation is left behind; close itself never raises for it
        for closer in self._closers:
            closer()

    async def aclose(self) -> None:
        """``close`` from a coroutine on the session's own loop (a ``task`` child ends): the same
        steps, awaited instead of waited for (``close`` would block the very loop it waits on)."""
        if self.closed:
            return
        self.closed = True
        self.kernel.close()
        await self._drain()
        for closer in self._closers:
            closer()

    async def _drain(self) -> None:
        for _ in range(int(CLOSE_SETTLE_S / DRAIN_POLL_S)):
            if not self.kernel.active:
                return
            await asyncio.sleep(DRAIN_POLL_S)


def process_services(settings: Any, state_store: Any) -> dict[str, Any]:
    """Runtimes every session of a process gets unless its options name their own (issue 12):
    ``net`` — the safe transport (A3S_NET_ALLOW and the proxies of *this* process's environment) —,
    ``state_store`` — breakers, bulkheads, coalescing (in memory embedded, Redis on a fleet) — and
    ``web_search`` — engine URLs and API keys (keys stay in this process: never in a snapshot)."""
    from tools.net import NetRuntime
    from tools.web_search.config import SearchConfig

    return {
        "net": NetRuntime.from_settings(settings, os.environ),
        "state_store": state_store,
        "web_search": SearchConfig.from_settings(settings),
    }


class SessionFactory:
    """Builds ``SessionCore``s on one loop thread, with one id factory and one set of extra tools.

    ``services`` are the process's shared runtimes (``process_services``); a session's own
    ``options.services`` override them key by key. ``mcp`` says where sessions get their MCP
    servers (``flows.integrations.McpSource``: this process's config, or a worker's pool)."""

    def __init__(
        self,
        loop: LoopThread,
        ids: IdFactory,
        extra: Sequence[ToolSpec] = (),
        services: dict[str, Any] | None = None,
        mcp: McpSource | None = None,
    ) -> None:
        self.loop = loop
        self.ids = ids
        self.extra = list(extra)
        self.services = dict(services or {})
        self.mcp = mcp or McpSource()

    def build(
        self,
        workspace: str | os.PathLike[str] | Workspace,
        options: SessionOptions,
        *,
        session_id: str | None = None,
        sinks: Sequence[EventSink] = (),
        session_state: dict[str, Any] | None = None,
        budget_used: dict[str, Any] | None = None,
        started_ms: int | None = None,
    ) -> SessionCore:
        """A new session; ``sinks`` receive its events besides the in-memory log (e.g. a Redis Stream)."""
        ws = open_workspace(workspace)
        # Checked and made before anything starts (MCP servers, children) that a failure would strand.
        policy = checked_policy(options)
        artifacts = artifact_store(ws, options)
        registry = Registry(
            [
                *builtin_tools(
                    ws.capabilities, retrieval_enabled=options.workspace_retrieval, services=options.services
                ),
                workflow_tool(options.offer_dynamic_workflow),  # hidden unless the host offers it
                generate_object_tool(),  # a session tool (S-2): uses the session's model
                *TASK_TOOLS,  # task (visible) and the hidden legacy parallel_task
            ]
        )
        for spec in self.extra:
            registry.register(spec)  # dynamic: never built-in trust (K-2)
        state = session_state if session_state is not None else {}
        services = {**self.services, **options.services}
        # Where this session's `task` children run: here unless the host (a fleet) says otherwise.
        children = services.setdefault(TASK_CHILDREN_SERVICE, InProcessChildren(self))
        # Skills and MCP servers (flows.integrations): session tools and dynamic tools (S-2).
        closers = attach_integrations(self.loop, self.mcp, ws, options, registry, state, services)
        kernel, memory = assemble_kernel(
            ws,
            options,
            registry,
            session_id=session_id or self.ids("session"),
            ids=self.ids,
            sinks=sinks,
            services=services,
            session_state=state,
            budget_used=budget_used,
            started_ms=started_ms,
            policy=policy,
            artifacts=artifacts,
        )
        services.setdefault("model_budget", kernel.budget)  # generate_object charges model usage here
        name = workspace if isinstance(workspace, str) else ws.name
        core = SessionCore(kernel, memory, str(name), self.loop)
        for closer in closers:
            core.on_close(closer)
        close_children = getattr(children, "close", None)
        if close_children is not None:
            core.on_close(close_children)
        if options.workspace_retrieval:
            # The index is session-owned: it starts building now and is freed when the session closes.
            from tools.search.retrieval import close_retrieval, start_retrieval

            start_retrieval(kernel.session_state, ws, kernel.services)
            core.on_close(lambda: close_retrieval(kernel.session_state))
        return core

    def resume(
        self,
        snapshot: dict[str, Any],
        options: SessionOptions | None = None,
        *,
        sinks: Sequence[EventSink] = (),
    ) -> SessionCore:
        """The session a snapshot describes, in this process (R-5 policy pinning, see the module doc)."""
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
        conversation = Conversation.from_json(snapshot.get("conversation"))
        state = dict(snapshot.get("session_state") or {})
        model = (snapshot.get("conversation") or {}).get("model")
        if isinstance(model, str) and model:
            state.setdefault(MODEL_STATE_KEY, model)
        core = self.build(
            snapshot["workspace"],
            options,
            session_id=snapshot["session_id"],
            sinks=sinks,
            session_state=state,
            budget_used=snapshot.get("budget_used"),
            started_ms=snapshot.get("created_ms"),
        )
        core.conversation = conversation
        return core
