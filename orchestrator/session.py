"""``Session``: the SDK face of one kernel — direct calls, surface, events, snapshot (SPEC S-1, X-1, K-6, R-5).

Every method is a thin door into ``Kernel``: ``tool`` is trusted host-direct, ``governed_tool``
host-direct through permission + confirmation, ``model_tool_call`` the ``agent`` origin the model
loop uses; ``send``/``stream`` (``orchestrator.session_agent``) run the agent loop itself. Sync methods run the coroutine on the agent's event-loop thread and wait; ``*_async``
variants return awaitables usable from any asyncio loop. Direct helpers (``read_file``, ``bash``,
``glob``…) take no conversation lease: they are host-privileged operations on the workspace.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import os
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any

from flows.sessions import SessionCore
from kernel.capabilities import ToolCapabilities
from kernel.errors import Cancelled, ToolError, error_from_kind
from kernel.events import Event
from kernel.hooks import is_async_callable
from kernel.result import ToolResult
from kernel.spec import ToolSpec
from orchestrator.fanout import (
    Branch,
    BranchRunner,
    FanOutPolicy,
    FanOutResult,
    InProcessRunner,
    ProgressFn,
    fan_out,
)
from orchestrator.session_agent import AgentRuns

if TYPE_CHECKING:
    from flows.verify import CommandResult, VerificationReport

WORKFLOW_PROGRESS_POLL_S = 0.1
GLOB_PAGE_LIMIT = 1000  # search's largest page (tools/search/grep.py MAX_PAGE_LIMIT): fewest calls


class InvocationRuntime:
    """What a host tool gets for nested calls: always ``governed_nested`` (K-2)."""

    def __init__(self, invoke: Callable[[str, dict[str, Any]], Awaitable[ToolResult]]) -> None:
        self._invoke = invoke

    async def invoke_tool(self, name: str, args: dict[str, Any]) -> ToolResult:
        return await self._invoke(name, args)


class Session(AgentRuns):
    """One governed tool session on a workspace: made by ``Agent.session`` / ``Agent.resume``, never directly.

    Calls (all return a ``ToolResult``; none raises for a failing tool, K-8):

    - ``tool(name, args)`` — trusted host-direct: skips model-side permission and confirmation,
      never the pre-tool hooks, budget, slots, deadline, redaction or projection (K-3, K-7);
    - ``governed_tool(name, args)`` — host-direct through permission policy and confirmation;
    - ``model_tool_call(name, args)`` — the ``agent`` origin, as the model loop calls;
    - ``*_async`` twins return awaitables for asyncio code; typed helpers (``read_file``, ``bash``,
      ``grep``, ``glob``, ``edit_file``…) are trusted host-direct calls that raise the typed
      ``ToolError`` instead of returning a failed result (X-1).

    The surface (``tool_names``, ``tool_definitions``) follows the workspace's capabilities and the
    registered host tools, skills and MCP servers; ``events()`` is the session's event log (S-5);
    ``snapshot()`` is what ``Agent.resume`` rebuilds from (R-5). Blocking methods must not be called
    from the agent's own loop thread (a host tool's handler): use the ``*_async`` variants there.
    ``close()`` (or leaving ``with``/``async with``) cancels every running call (K-6).

    The agent loop (``AgentRuns``, A-2): ``send``/``stream``/``asend``/``astream`` run a prompt
    through the session's model (``model``); ``conversation()`` is what the snapshot keeps.
    """

    def __init__(self, core: SessionCore) -> None:
        self.core = core
        self.kernel = core.kernel
        self.id = core.id
        self.workspace_name = core.workspace_name
        self._loop = core.loop
        # How fan-out branches run: in this process by default; the fleet swaps in a Celery runner
        # and sets `remote`, which sends trusted host-direct calls to the workers as well (F-1).
        self.runner: BranchRunner = InProcessRunner(core.kernel)
        self.remote = False

    @property
    def _closed(self) -> bool:
        return self.core.closed

    # ---- calls --------------------------------------------------------------------------------

    def tool(self, name: str, args: dict[str, Any] | None = None) -> ToolResult:
        """Trusted host-direct call: skips model-side permission and confirmation, never the pre-hooks.

        A host tool registered with a plain function (no runtime argument, ``inline=True``) runs on
        this thread, through the whole kernel pipeline, without a hand-off to the loop thread
        (``Kernel.invoke_host_inline``); anything else — built-ins, async handlers, a busy slot,
        async hooks — runs on the loop as usual. In fleet mode (``remote``) the call is a one-branch
        run on a worker, like a fan-out branch: pre/post hooks still run here, and the session's JSON
        tool state comes back with the result.
        """
        args = args or {}
        if not self.remote and not self._closed and not self._loop.on_loop_thread():
            result = self.kernel.invoke_host_inline(name, args, self._run_on_loop)
            if result is not None:
                return result
        return self._wait(self._host_call(name, args), name)

    def _run_on_loop(self, awaitable: Awaitable[Any]) -> Any:
        async def wait() -> Any:
            return await awaitable

        return self._loop.run(wait())

    async def _host_call(self, name: str, args: dict[str, Any]) -> ToolResult:
        if not self.remote:
            return await self.kernel.invoke_host(name, args)
        with self.kernel.cancel_scope():
            run = await fan_out(
                self.runner,
                self.kernel.ids("call"),
                [Branch(name, args, f"{name} (direct call)")],
                FanOutPolicy(),
            )
        outcome = run.outcomes[0]
        if outcome.result is None:
            return ToolResult.failure(name, Cancelled(f"Tool '{name}' cancelled", op=name))
        state = outcome.result.metadata.get("a3s_fleet", {}).pop("session_state", None)
        if isinstance(state, dict):
            self.kernel.session_state.update(state)
        return outcome.result

    def governed_tool(self, name: str, args: dict[str, Any] | None = None) -> ToolResult:
        """Host-direct call that still goes through permission policy and confirmation."""
        return self._wait(self.kernel.invoke_host(name, args or {}, governed=True), name)

    def model_tool_call(self, name: str, args: dict[str, Any] | None = None) -> ToolResult:
        """A call with the ``agent`` origin, as the model loop makes it (full policy + confirmation)."""
        return self._wait(self.kernel.invoke_agent(name, args or {}), name)

    def tool_async(self, name: str, args: dict[str, Any] | None = None) -> Awaitable[ToolResult]:
        """``tool`` for asyncio code: an awaitable (a ``concurrent.futures.Future`` outside a loop)."""
        return self._future(self._host_call(name, args or {}))

    def governed_tool_async(self, name: str, args: dict[str, Any] | None = None) -> Awaitable[ToolResult]:
        """``governed_tool`` for asyncio code."""
        return self._future(self.kernel.invoke_host(name, args or {}, governed=True))

    def _future(self, coro: Any) -> Awaitable[ToolResult]:
        fut = self._loop.submit(coro)
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return fut  # type: ignore[return-value]
        return asyncio.wrap_future(fut)

    def _wait(self, coro: Any, name: str) -> ToolResult:
        if self._closed:
            coro.close()
            return ToolResult.failure(name, Cancelled(f"Tool '{name}' cancelled: session closed", op=name))
        fut = self._loop.submit(coro)
        try:
            return fut.result()
        except concurrent.futures.CancelledError:
            return ToolResult.failure(name, Cancelled(f"Tool '{name}' cancelled: session closed", op=name))

    # ---- surface ------------------------------------------------------------------------------

    def tool_names(self) -> list[str]:
        """Every tool name the session resolves, hidden aliases included (S-1)."""
        return self.kernel.registry.names()

    def tool_definitions(self) -> list[dict[str, Any]]:
        """The model-visible tools as ``{name, description, parameters}`` (JSON Schema parameters)."""
        return self.kernel.registry.definitions()

    def active_tools(self) -> list[dict[str, Any]]:
        """Calls running now: ``{call_id, tool, origin, parent_call_id, started_ms}`` each."""
        return [dict(v) for v in list(self.kernel.active.values())]

    def register_tool(
        self,
        name: str,
        handler: Callable[..., Any],
        *,
        description: str,
        parameters: dict[str, Any],
        capabilities: ToolCapabilities | dict[str, Any] | None = None,
        visible: bool = True,
        inline: bool = True,
    ) -> None:
        """A host tool. ``handler(args)`` or ``handler(args, runtime)``, sync or async, → ``str`` | ``ToolResult``.

        A sync handler runs in a worker thread, so a call can be abandoned at its deadline. With
        ``inline`` (the default) a plain sync ``handler(args)`` called through ``session.tool`` from
        synchronous code runs on the caller's thread instead — the same governed pipeline, without
        two thread hand-offs — and its deadline is checked when it returns (a late result becomes
        ``timeout``). Pass ``inline=False`` for a handler that may block past its deadline.
        """
        caps = _capabilities(capabilities)
        wants_runtime = len(inspect.signature(handler).parameters) >= 2
        is_async = inspect.iscoroutinefunction(handler)
        plain = not wants_runtime and not is_async_callable(handler)

        async def run(ctx: Any, args: dict[str, Any]) -> Any:
            extra = (InvocationRuntime(ctx.invoke),) if wants_runtime else ()
            if is_async:
                return await handler(args, *extra)
            if wants_runtime:
                # A sync handler that nests calls would block the loop it needs: give it a thread.
                return await asyncio.to_thread(handler, args, *extra)
            return await asyncio.to_thread(handler, args)

        spec = ToolSpec(
            name=name,
            description=description,
            parameters=parameters,
            run=run,
            capabilities=lambda _p: caps,
            visible=visible,
            run_inline=handler if inline and plain else None,
        )
        self.kernel.registry.register(spec)

    def unregister_tool(self, name: str) -> bool:
        """Remove a host tool; False when no such dynamic tool was registered (built-ins stay)."""
        return self.kernel.registry.unregister(name)

    # ---- skills and MCP servers (issue 10; docs/mcp-and-skills.md) ----------------------------

    def register_skill(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        name: str | None = None,
        description: str | None = None,
        instructions: str | None = None,
        allowed_tools: str | list[str] | None = None,
        replace: bool = False,
    ) -> None:
        """Add a skill: a host path (a skill directory or its ``SKILL.md``), or given inline. The
        ``Skill`` and ``search_skills`` tools appear with the first skill. ``InvalidArgument`` when
        the skill breaks a rule of the format (or the name is taken and ``replace`` is False)."""
        from flows.integrations import register_skill
        from tools.skills import load_skill_path, make_skill

        if path is not None:
            skill = load_skill_path(path)
        else:
            skill = make_skill(
                name=name,
                description=description,
                instructions=instructions or "",
                allowed_tools=allowed_tools,
            )
        register_skill(
            self.kernel.registry, self.kernel.session_state, self.kernel.services, skill, replace=replace
        )

    def skills(self) -> list[dict[str, Any]]:
        """The session's skills: name, description, allowed tools, source."""
        catalog = self.kernel.services.get("skills")
        if catalog is None:
            return []
        return [
            {
                "name": s.name,
                "description": s.description,
                "allowed_tools": list(s.allowed_tools),
                "source": s.source,
            }
            for s in catalog.all()
        ]

    def active_skills(self) -> list[str]:
        """Skills loaded through ``Skill`` in this session (their restriction applies when enforced)."""
        from kernel.options import ACTIVE_SKILLS_KEY

        return [str(s.get("name")) for s in self.kernel.session_state.get(ACTIVE_SKILLS_KEY) or []]

    def deactivate_skills(self) -> None:
        """Forget the active skills (and so their tool restriction)."""
        from kernel.options import ACTIVE_SKILLS_KEY

        self.kernel.session_state.pop(ACTIVE_SKILLS_KEY, None)

    def mcp_status(self) -> dict[str, Any]:
        """``{"servers": [{name, transport, source, state, tools, starts, pid, error}], "warnings": [...]}``."""
        servers = self.kernel.services.get("mcp")
        if servers is None:
            return {"servers": [], "warnings": []}
        return {"servers": servers.status(), "warnings": list(servers.warnings)}

    # ---- events, snapshot, artifacts, close ---------------------------------------------------

    def events(self, after_seq: int = 0) -> Iterator[Event]:
        """The session's events with ``seq > after_seq``, in order (S-5). The last 10,000 are kept,
        within 64 MiB: older ones are dropped first (``seq`` shows the gap), and counted."""
        return iter(self.core.memory.snapshot(after_seq))

    def snapshot(self) -> dict[str, Any]:
        """A JSON-ready snapshot (workspace name, surface, tool state, pinned policy, options) for
        ``Agent.resume`` here or on a worker (R-5). It names no secrets and holds no callables."""
        return self.core.snapshot()

    def read_artifact(self, uri: str) -> bytes:
        """The original bytes behind an ``a3s://tool-output/…`` URI of a lossy projection (R-6)."""
        return self.kernel.artifacts.get(uri)

    def close(self) -> None:
        """K-6: cancel every running call (host-direct included) and wait for them to settle."""
        self.core.close()

    def on_close(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` when the session closes (after running calls were cancelled)."""
        self.core.on_close(fn)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.close)  # close() waits for cancelled calls: not on the caller's loop

    # ---- direct helpers (X-1) -----------------------------------------------------------------

    def read_file(self, path: str, offset: int | None = None, limit: int | None = None) -> str:
        """``read`` as text (line-numbered, bounded, B-1); raises the typed ``ToolError`` on failure."""
        args: dict[str, Any] = {"file_path": path}
        if offset is not None:
            args["offset"] = offset
        if limit is not None:
            args["limit"] = limit
        return _text(self.tool("read", args))

    def write_file(self, path: str, content: str) -> ToolResult:
        """``write``: the result carries the bounded change metadata (B-3)."""
        return self.tool("write", {"file_path": path, "content": content})

    def ls(self, path: str | None = None) -> ToolResult:
        """``ls`` of a workspace directory (the root by default)."""
        return self.tool("ls", {"path": path or ""})

    def edit_file(self, path: str, old_string: str, new_string: str, replace_all: bool = False) -> ToolResult:
        """``edit``: replace ``old_string`` (unique unless ``replace_all``) with ``new_string``."""
        return self.tool(
            "edit",
            {
                "file_path": path,
                "old_string": old_string,
                "new_string": new_string,
                "replace_all": replace_all,
            },
        )

    def patch_file(self, path: str, diff: str) -> ToolResult:
        """``patch``: apply a unified diff to one file."""
        return self.tool("patch", {"file_path": path, "diff": diff})

    def bash(self, command: str, timeout: int | None = None) -> str:
        """``bash`` (sandboxed; ``timeout`` in ms): the bounded output, or the typed ``ToolError``."""
        args: dict[str, Any] = {"command": command}
        if timeout is not None:
            args["timeout"] = timeout
        result = self.tool("bash", args)
        if result.error_kind:
            raise error_from_kind(result.error_kind, result.output)
        return result.output

    def grep(self, pattern: str, **kwargs: Any) -> str:
        """``search`` mode ``grep`` (``kwargs``: ``path``, ``glob``, ``output_mode``…) as text."""
        return _text(self.tool("search", {"mode": "grep", "query": pattern, **kwargs}))

    def glob(self, pattern: str, **kwargs: Any) -> list[str]:
        """``search`` mode ``glob``: every matching workspace-relative path, page after page (each
        page one call); with ``limit`` or ``cursor`` given, that one page."""
        one_page = "limit" in kwargs or "cursor" in kwargs
        args: dict[str, Any] = {"limit": GLOB_PAGE_LIMIT, **kwargs, "mode": "glob", "query": pattern}
        out: list[str] = []
        while True:
            result = self.tool("search", args)
            _text(result)
            paths = result.metadata.get("paths")
            if not isinstance(paths, list):
                lines = result.output.splitlines()
                return out + [line for line in lines if line and not line.startswith(("More ", "("))]
            out += [str(p) for p in paths]
            page = result.metadata.get("page")
            more = page.get("next_cursor") if isinstance(page, dict) else None
            if one_page or not more:
                return out
            args["cursor"] = more

    def git(self, command: str | dict[str, Any], subcommand: str | None = None, **kwargs: Any) -> ToolResult:
        """The ``git`` tool: ``git("log", limit=5)`` or the raw arguments as a dict."""
        if isinstance(command, dict):
            return self.tool("git", command)
        args: dict[str, Any] = {"command": command, **{k: v for k, v in kwargs.items() if v is not None}}
        if "reference" in args:
            args["ref"] = args.pop("reference")
        if subcommand is not None:
            args["subcommand"] = subcommand
        return self.tool("git", args)

    def fan_out(
        self,
        branches: list[Branch],
        *,
        allow_partial_failure: bool = False,
        min_success_count: int | None = None,
        timeout_ms: int | None = None,
        run_id: str | None = None,
        progress: ProgressFn | None = None,
    ) -> FanOutResult:
        """Run up to 32 tool-call branches (in process, or as fleet jobs) with fan-in rules (X-3, F-1)."""
        policy = FanOutPolicy(allow_partial_failure, min_success_count, timeout_ms)
        rid = run_id or self.kernel.ids("run")
        return self._loop.run(fan_out(self.runner, rid, list(branches), policy, progress))

    def verify_commands(
        self,
        title: str,
        commands: list[dict[str, Any]],
        *,
        progress: Callable[[CommandResult], None] | None = None,
    ) -> VerificationReport:
        """F-6: run ``commands`` (``{id, kind, description, command, required, timeout_ms}``) as parallel
        ``bash`` fan-out branches and return a ``flows.verify.VerificationReport`` (verdict from the
        required ones). An invalid plan raises ``InvalidArgument``; failing commands never raise."""
        from flows.verify import plan_from_commands, run_plan

        return run_plan(self, plan_from_commands(title, commands), progress)

    def program(self, options: dict[str, Any] | None = None, **kwargs: Any) -> ToolResult:
        """P-2: ``session.tool("program", {type: "script", language: "javascript", ...})`` with the SDK's
        spellings normalised (``allowedTools``/``allowed_tools``, ``limits.timeoutMs``/``timeout_ms``…).
        ``source`` inline or ``path`` (a workspace ``.js``/``.mjs`` file); trusted host-direct, so the
        script's own calls are ``trusted_host_nested`` (K-1)."""
        from tools.program import normalize_program_options

        return self.tool("program", normalize_program_options({**(options or {}), **kwargs}))

    def workflow(
        self,
        options: dict[str, Any] | None = None,
        *,
        progress: Callable[[dict[str, Any]], None] | None = None,
        **kwargs: Any,
    ) -> ToolResult:
        """F-7: run (or resume) a durable workflow — ``source`` or ``path`` (``async function run(wf,
        input)``), ``input``, ``run_id``, ``limits`` (``maxConcurrentSteps``, ``maxConcurrentGenerations``,
        ``timeoutMs``; snake_case accepted). Trusted host-direct: its steps are ``trusted_host_nested``
        embedded, host-direct jobs on a fleet. The driver always runs here — never as a worker job —
        so it holds no worker slot while steps run. ``progress(event)`` is called in this thread for
        each step event (``step_started``, ``step_completed``, ``step_failed``, ``step_recovered``…)."""
        from flows.workflow import normalize_workflow_options

        args = normalize_workflow_options({**(options or {}), **kwargs})
        run_id = args.setdefault("run_id", self.kernel.ids("wf"))
        coro = self.kernel.invoke_host("dynamic_workflow", args)
        if progress is None or self._closed:
            return self._wait(coro, "dynamic_workflow")
        after = max((e.seq for e in self.core.memory.snapshot()), default=0)
        fut = self._loop.submit(coro)
        while True:
            try:
                result: ToolResult | None = fut.result(timeout=WORKFLOW_PROGRESS_POLL_S)
            except concurrent.futures.TimeoutError:
                result = None
            except concurrent.futures.CancelledError:
                result = ToolResult.failure(
                    "dynamic_workflow", Cancelled("workflow cancelled: session closed", op="dynamic_workflow")
                )
            for event in self.core.memory.snapshot(after):
                after = event.seq
                delta = event.data.get("delta") if event.type == "tool_output_delta" else None
                view = delta.get("workflow") if isinstance(delta, dict) else None
                if isinstance(view, dict) and view.get("run_id") == run_id:
                    progress(view)
            if result is not None:
                return result

    def batch(self, invocations: list[dict[str, Any]], max_concurrency: int | None = None) -> ToolResult:
        """``batch`` (X-2): up to 32 ``{tool, args, id?, step?}`` calls; a partial failure names the failed
        indexes and still succeeds, only an all-failed batch is an error."""
        args: dict[str, Any] = {"invocations": invocations}
        if max_concurrency is not None:
            args["max_concurrency"] = max_concurrency
        return self.tool("batch", args)

    # ---- sub-agents (X-3, X-4; issue 9; docs/agents.md) ----------------------------------------

    def task(self, options: dict[str, Any] | None = None, **kwargs: Any) -> ToolResult:
        """One child run: ``{agent, description, prompt, background?, max_steps?, output_schema?}``
        (camelCase ``maxSteps``/``outputSchema``/``timeoutMs`` accepted), as ``task`` with one item. A
        trusted host-direct call of ``task``; the child itself starts at ``agent`` origin (K-2).
        With ``background=True`` the result's ``metadata["background_task"]`` is the handle."""
        from flows.task.schema import normalize_task_options

        return self._task_call(normalize_task_options({**(options or {}), **kwargs}))

    def tasks(self, items: list[dict[str, Any]], **options: Any) -> ToolResult:
        """1–32 child runs at once (``task`` with ``tasks=items``); ``allow_partial_failure``,
        ``min_success_count``, ``timeout_ms`` as keyword arguments. ``auto_parallel`` settings never
        disable this (X-4)."""
        return self._task_call({"tasks": list(items), **options})

    def delegate_task(
        self,
        agent: str,
        description: str,
        prompt: str,
        background: bool = False,
        max_steps: int | None = None,
    ) -> ToolResult:
        """One child run by its parts (the reference SDK's ``delegate_task``): ``task`` with one item."""
        item: dict[str, Any] = {"agent": agent, "description": description, "prompt": prompt}
        if background:
            item["background"] = True
        if max_steps is not None:
            item["max_steps"] = max_steps
        return self._task_call({"tasks": [item]})

    def _task_call(self, args: dict[str, Any]) -> ToolResult:
        # Always this session's own kernel: on a fleet the task runner sends the *children* to the
        # workers (each an a3s.agent job) while the parent waits here, holding no worker slot.
        return self._wait(self.kernel.invoke_host("task", args), "task")

    def task_result(self, task_id: str, timeout: float | None = None) -> dict[str, Any]:
        """A background child's ``TaskResult`` (JSON): at once when it ended, else waited for
        (``timeout`` seconds; ``timeout`` error when it has not finished). ``not_found`` for an
        unknown task id. The same result also arrives as the ``subagent_end`` event."""
        runner = self.kernel.services.get("task_children")
        if runner is None:
            raise error_from_kind({"type": "unsupported"}, "this session has no task runner")
        result = self._loop.run(runner.result(task_id, timeout))
        return result.to_json()


def _text(result: ToolResult) -> str:
    if result.exit_code != 0:
        raise error_from_kind(result.error_kind, result.output)
    return result.output


def _capabilities(value: ToolCapabilities | dict[str, Any] | None) -> ToolCapabilities:
    if value is None:
        return ToolCapabilities.conservative()
    if isinstance(value, ToolCapabilities):
        return value
    try:
        return ToolCapabilities(**value)
    except TypeError as exc:
        raise ToolError(f"invalid capabilities: {exc}") from exc
