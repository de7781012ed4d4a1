"""One MCP server connection: started on demand, restarted after a failure, stopped on close (SPEC M-1, K-6).

``McpConnection(config)`` owns one server (stdio child or streamable-HTTP session) through the
official SDK's ``mcp.ClientSession`` (``initialize`` handshake, paginated ``tools/list``). The SDK's
contexts are entered and left by one *owner task*; calls from any task of the same loop share its
session, calls from another loop are carried over to it (``_hop``), so one process-wide connection
can serve sessions driven by different loops (a fleet worker).

Lifecycle and errors, each naming the server:

- start (first use, or the next call after a failure): spawn/connect, handshake, list tools, all
  within ``startup_timeout_ms`` (``timeout{op: "mcp.start"}``); a program that cannot be spawned,
  exits, or a URL that cannot be reached is ``transport{op: "mcp.start"}`` with the reason (exit code,
  stderr tail, connection error) — one line;
- a server that dies (its output ends) or a connection that breaks during a call is
  ``transport{op: "mcp.call"}``; the connection is marked dead and the **next call restarts it**;
- a server that sends garbage (a message that is not JSON-RPC, an answer to a request it was never
  sent: ``tools.mcp.guard``) breaks its connection the same way, at once: the calls in flight fail
  ``transport{op}`` quoting a bounded excerpt of what it sent, the server is stopped, the next call
  restarts it. An HTTP reply the SDK cannot parse is tied to its call: that call fails the same
  way and the session is kept. A well-formed answer whose ``result`` is not a tool result is
  ``internal_error`` (the connection is kept);
- a call the kernel times out or cancels (its deadline, ``session.close()``) is cancelled here; the
  SDK sends ``notifications/cancelled``, and the server is *suspect*: the next call pings it first
  and restarts it when it does not answer within ``PING_TIMEOUT_S``;
- ``aclose()`` stops the owner: stdin closed, grace period, then the whole process tree is killed
  (``tools.mcp.stdio``); an HTTP session is terminated with ``DELETE``.

JSON-RPC errors the server answers with are typed: invalid params → ``invalid_argument``, unknown
method → ``not_found``, anything else → ``internal_error`` carrying the code.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import mcp_types as types
from mcp import ClientSession
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from kernel.errors import Cancelled, InternalError, InvalidArgument, NotFound, Timeout, ToolError, Transport
from tools.mcp.config import McpServerConfig
from tools.mcp.guard import MAX_EXCERPT_CHARS, ProtocolGuard, excerpt
from tools.mcp.stdio import StdioLink, describe_exit, program_problem, tied_stdio_client

T = TypeVar("T")
log = logging.getLogger(__name__)

CLIENT_INFO = types.Implementation(name="a3s-fleet", version="0.1.0")
PING_TIMEOUT_S = 5.0
STOP_TIMEOUT_S = 5.0
EXIT_REPORT_WAIT_S = 3.0
MAX_TOOL_PAGES = 100
MAX_TOOLS_PER_SERVER = 1024
MAX_SERVER_TEXT_CHARS = 400  # of a server's JSON-RPC error message, in the error the model sees
MAX_RESULT_PROBLEMS = 3
MAX_PROBLEMS_CHARS = 500
_INPUT_VALUE = re.compile(r"input_value=(.*?), input_type=", re.DOTALL)
ProgressFn = Callable[[float, "float | None", "str | None"], Awaitable[None]]


class McpConnection:
    def __init__(self, config: McpServerConfig) -> None:
        self.config = config
        self.name = config.name
        self.tools: list[types.Tool] = []
        self.truncated_listing = False
        self.starts = 0
        self.last_error: str | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock: asyncio.Lock | None = None
        self._session: ClientSession | None = None
        self._owner: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        self._link: StdioLink | None = None
        self._guard: ProtocolGuard | None = None
        self._dead = True
        self._suspect = False
        self._closed = False

    # ---- public --------------------------------------------------------------------------------

    @property
    def alive(self) -> bool:
        """Started, its owner running, its output not ended, no failure seen since."""
        return (
            not self._closed
            and not self._dead
            and self._session is not None
            and self._owner is not None
            and not self._owner.done()
            and (self._link is None or not self._link.eof.is_set())
        )

    @property
    def pid(self) -> int | None:
        """The stdio server's pid while it runs (tests and diagnostics)."""
        return self._link.pid if self._link is not None and self.alive else None

    async def start(self) -> list[types.Tool]:
        """Start (or check) the server and return its tools."""
        await self._run_here(self._ensure())
        return self.tools

    async def call_tool(
        self, tool: str, arguments: dict[str, Any], progress: ProgressFn | None = None
    ) -> types.CallToolResult:
        """``tools/call``; a failure is a ``ToolError`` naming the server (see the module docstring)."""
        return await self._run_here(self._call(tool, arguments, progress))

    async def aclose(self) -> None:
        """Stop the server (idempotent). Safe from any loop."""
        if self._closed:
            return
        self._closed = True
        if self._loop is None:
            return
        await self._run_here(self._stop_owner())

    # ---- loop affinity ---------------------------------------------------------------------------

    async def _run_here(self, coro: Coroutine[Any, Any, T]) -> T:
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
            self._lock = asyncio.Lock()
        if loop is self._loop:
            return await coro
        if self._loop.is_closed() or not self._loop.is_running():
            coro.close()
            raise Transport(
                f"MCP server '{self.name}': its event loop is gone", op="mcp.call", server=self.name
            )
        fut = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return await asyncio.wrap_future(fut)
        except asyncio.CancelledError:
            fut.cancel()  # cancels the call on the connection's loop too
            raise

    # ---- start / stop ----------------------------------------------------------------------------

    async def _ensure(self) -> ClientSession:
        if self.alive and not self._suspect and self._session is not None:
            return self._session  # the common case: no lock, no await
        assert self._lock is not None
        async with self._lock:
            if self._closed:
                raise Cancelled(f"MCP server '{self.name}' is closed (its session closed)", op="mcp.start")
            if self.alive and self._session is not None:
                if not self._suspect:
                    return self._session
                try:
                    await asyncio.wait_for(self._session.send_ping(), PING_TIMEOUT_S)
                    self._suspect = False
                    return self._session
                except (Exception, TimeoutError):
                    log.warning(
                        "MCP server %r did not answer a ping after a cancelled call; restarting", self.name
                    )
            await self._stop_owner()
            return await self._spawn_owner()

    async def _spawn_owner(self) -> ClientSession:
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[ClientSession] = loop.create_future()
        stop = asyncio.Event()
        link = StdioLink() if self.config.transport == "stdio" else None
        guard = ProtocolGuard(lambda reason: self._on_fault(guard, stop, reason))
        self._stop, self._link, self._guard, self._suspect = stop, link, guard, False
        self.starts += 1
        self._owner = loop.create_task(self._serve(ready, stop, link, guard), name=f"mcp-{self.name}")
        timeout_s = self.config.startup_timeout_ms / 1000
        try:
            session = await asyncio.wait_for(asyncio.shield(ready), timeout_s)
        except TimeoutError:
            await self._stop_owner()
            err: ToolError = Timeout(
                f"MCP server '{self.name}' ({self.config.describe()}) did not finish starting within "
                f"{self.config.startup_timeout_ms} ms",
                op="mcp.start",
                duration_ms=self.config.startup_timeout_ms,
                server=self.name,
            )
            self.last_error = err.message
            raise err from None
        except asyncio.CancelledError:
            await asyncio.shield(self._stop_owner())
            raise
        except ToolError as exc:
            await self._stop_owner()
            self.last_error = exc.message
            raise
        self._session, self._dead, self.last_error = session, False, None
        return session

    async def _serve(
        self,
        ready: asyncio.Future[ClientSession],
        stop: asyncio.Event,
        link: StdioLink | None,
        guard: ProtocolGuard,
    ) -> None:
        """The owner task: enters the transport and session contexts, then waits to be stopped."""
        try:
            async with contextlib.AsyncExitStack() as stack:
                streams = guard.wrap(*await stack.enter_async_context(self._transport(link)))
                session = await stack.enter_async_context(
                    ClientSession(*streams, client_info=CLIENT_INFO, logging_callback=self._on_log)
                )
                await session.initialize()
                self.tools, self.truncated_listing = await _list_tools(session)
                ready.set_result(session)
                waits = [asyncio.ensure_future(stop.wait())]
                if link is not None:
                    waits.append(asyncio.ensure_future(link.eof.wait()))
                try:
                    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for w in waits:
                        w.cancel()
        except asyncio.CancelledError:
            if not ready.done():
                ready.set_exception(
                    Cancelled(f"MCP server '{self.name}': start-up cancelled", op="mcp.start")
                )
            raise
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(self._start_error(exc, link, guard))
            else:
                log.info("MCP server %r connection ended: %s", self.name, _root_cause(exc))

    def _transport(self, link: StdioLink | None) -> contextlib.AbstractAsyncContextManager[Any]:
        if link is not None:
            return tied_stdio_client(self.config, link)
        return _http_transport(self.config)

    async def _stop_owner(self) -> None:
        owner, self._owner, self._session = self._owner, None, None
        self._dead = True
        if owner is None:
            return
        if self._stop is not None:
            self._stop.set()
        done, _ = await asyncio.wait({owner}, timeout=STOP_TIMEOUT_S)
        if not done:  # stuck inside the SDK (e.g. a handshake): cancel; the transports still clean up
            owner.cancel()
            await asyncio.wait({owner}, timeout=STOP_TIMEOUT_S)

    def _on_fault(self, guard: ProtocolGuard, stop: asyncio.Event, reason: str) -> None:
        """The guard saw garbage: this connection is over (its pending calls fail at once)."""
        log.warning("MCP server %r %s; stopping it (the next call restarts it)", self.name, reason)
        if self._guard is guard:
            self._dead = True
            self.last_error = self._scrub(f"MCP server '{self.name}' {reason}")
        stop.set()

    async def _on_log(self, params: types.LoggingMessageNotificationParams) -> None:
        log.debug("MCP server %r log (%s): %s", self.name, params.level, str(params.data)[:2000])

    # ---- calls -------------------------------------------------------------------------------------

    async def _call(
        self, tool: str, arguments: dict[str, Any], progress: ProgressFn | None
    ) -> types.CallToolResult:
        session = await self._ensure()
        link, owner, guard = self._link, self._owner, self._guard
        try:
            result = await session.call_tool(tool, arguments, progress_callback=progress)
        except asyncio.CancelledError:
            if not self._closed:
                self._suspect = True  # the server may be stuck in that call: ping before reusing it
            raise
        except MCPError as exc:
            if _connection_closed(exc):
                raise await self._broken(link, owner, None, guard) from None
            if exc.code == types.PARSE_ERROR:  # the HTTP transport could not read the reply
                raise self._garbled(tool, exc.message) from None
            raise self._rpc_error(tool, exc) from None
        except ValidationError as exc:  # well-formed JSON-RPC, but its result is no tool result
            raise InternalError(
                f"MCP server '{self.name}' returned an invalid result for '{tool}': {_problems(exc)}",
                exception="ValidationError",
                errno=None,
                server=self.name,
            ) from None
        except ToolError:
            raise
        except Exception as exc:
            cause = _root_cause(exc)
            if isinstance(cause, (OSError, ConnectionError)) or _is_transport_error(cause):
                raise await self._broken(link, owner, cause, guard) from None
            if isinstance(cause, RuntimeError):  # e.g. structured content that breaks the output schema
                raise InternalError(
                    f"MCP server '{self.name}' returned an invalid result for '{tool}': {cause}",
                    exception="RuntimeError",
                    errno=None,
                    server=self.name,
                ) from None
            raise
        if not isinstance(result, types.CallToolResult):
            raise InternalError(
                f"MCP server '{self.name}' answered '{tool}' with {type(result).__name__}, not a tool result",
                exception=type(result).__name__,
                errno=None,
                server=self.name,
            )
        return result

    async def _broken(
        self,
        link: StdioLink | None,
        owner: asyncio.Task[None] | None,
        cause: BaseException | None,
        guard: ProtocolGuard | None,
    ) -> ToolError:
        """The connection broke mid-call: mark it dead (the next call restarts) and say why."""
        self._dead = True
        if link is not None and owner is not None:
            await asyncio.wait({owner}, timeout=EXIT_REPORT_WAIT_S)  # reaps the child: exit code known
        if guard is not None and guard.fault is not None:
            return self._faulty(self._scrub(f"it {guard.fault}"))
        if link is not None and owner is not None:
            why = describe_exit(link)
        else:
            why = self._scrub(str(cause)) if cause is not None else "the connection closed"
        err = Transport(
            f"MCP server '{self.name}' failed during the call ({why}); it restarts on the next call",
            op="mcp.call",
            server=self.name,
        )
        self.last_error = err.message
        return err

    def _garbled(self, tool: str, message: str) -> ToolError:
        """The HTTP transport could not parse the reply to this call (the SDK answers it
        ``PARSE_ERROR``). Only this call is hit: each HTTP reply is its own body, so the session
        is kept (restarting it would fail the server's other calls in flight)."""
        from tools.mcp.http_limits import NOT_A_RESPONSE

        if NOT_A_RESPONSE in message:  # tools.mcp.http_limits.NotAResponse, through the SDK's message
            said = message.partition(": ")[2] if message.startswith("Failed to parse") else message
            why = f"its reply to '{tool}' is no answer: " + " ".join(self._scrub(said).split())[:400]
        else:
            why = f"its reply to '{tool}' is not JSON-RPC: {self._quoted_reply(message)}"
        return self._faulty(why, restarts=False)

    def _quoted_reply(self, message: str) -> str:
        """The SDK's ``PARSE_ERROR`` message is pydantic's report; the part that quotes the reply
        (already cut short by pydantic) is what the user needs, on one line."""
        quoted = _INPUT_VALUE.search(message)
        if quoted:  # already a repr
            return " ".join(self._scrub(quoted.group(1)[:MAX_EXCERPT_CHARS]).split())
        return excerpt(self._scrub((message.strip().splitlines()[:1] or [""])[0]))

    def _faulty(self, why: str, *, restarts: bool = True) -> ToolError:
        then = "it restarts on the next call" if restarts else "its connection is kept"
        err = Transport(
            f"MCP server '{self.name}' broke the protocol during the call: {why}; {then}",
            op="mcp.call",
            server=self.name,
        )
        self.last_error = err.message
        return err

    def _scrub(self, text: str) -> str:
        """An HTTP library's message may quote the URL (its query may hold a token) or a header
        value: show the URL without secrets and no header value."""
        url = self.config.url
        if url:
            text = text.replace(url, self.config.describe().removeprefix("http: "))
        for _name, value in self.config.headers:
            if len(value) >= 8:
                text = text.replace(value, "[REDACTED]")
        return text

    def _rpc_error(self, tool: str, exc: MCPError) -> ToolError:
        text = f"MCP server '{self.name}' refused '{tool}': {server_text(exc.message)}"
        if exc.code == types.INVALID_PARAMS:
            return InvalidArgument(text, server=self.name, code=exc.code)
        if exc.code == types.METHOD_NOT_FOUND:
            return NotFound(text, path=tool, server=self.name, code=exc.code)
        if exc.code == types.REQUEST_TIMEOUT:
            return Timeout(text, op="mcp.call", duration_ms=None, server=self.name)
        return InternalError(text, exception="MCPError", errno=None, server=self.name, code=exc.code)

    def _start_error(
        self, exc: BaseException, link: StdioLink | None, guard: ProtocolGuard | None = None
    ) -> ToolError:
        cause = _root_cause(exc)
        if isinstance(cause, ToolError):
            return cause
        if guard is not None and guard.fault is not None:
            reason = f"it {guard.fault}"
        elif isinstance(cause, MCPError) and cause.code == types.PARSE_ERROR:
            reason = f"its reply is not JSON-RPC: {self._quoted_reply(cause.message)}"
        elif link is not None and link.pid is None and isinstance(cause, OSError):
            reason = program_problem(self.config, cause)
        elif link is not None:
            reason = describe_exit(link) if link.eof.is_set() else f"{type(cause).__name__}: {cause}"
        else:
            reason = f"{type(cause).__name__}: {cause}" if str(cause) else type(cause).__name__
        return Transport(
            f"MCP server '{self.name}' ({self.config.describe()}) could not start: {self._scrub(reason)}",
            op="mcp.start",
            server=self.name,
        )


async def _list_tools(session: ClientSession) -> tuple[list[types.Tool], bool]:
    """Every page of ``tools/list`` (bounded: ``MAX_TOOL_PAGES`` pages, ``MAX_TOOLS_PER_SERVER`` tools)."""
    tools: list[types.Tool] = []
    cursor: str | None = None
    for _ in range(MAX_TOOL_PAGES):
        params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await session.list_tools(params=params)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor or len(tools) >= MAX_TOOLS_PER_SERVER:
            break
    truncated = bool(cursor) or len(tools) > MAX_TOOLS_PER_SERVER
    return tools[:MAX_TOOLS_PER_SERVER], truncated


@contextlib.asynccontextmanager
async def _http_transport(config: McpServerConfig) -> Any:
    from mcp.client.streamable_http import streamable_http_client

    from tools.mcp.http_limits import bounded_client

    assert config.url is not None
    client = bounded_client(dict(config.headers) or None)  # replies capped like stdio lines
    async with client, streamable_http_client(config.url, http_client=client) as streams:
        yield streams


def _connection_closed(exc: MCPError) -> bool:
    """The SDK's own "connection closed" outcome. Its code, -32000, is also the first of JSON-RPC's
    server-error codes, which servers use for their own failures: such an answer is the server's
    error (the connection is fine), not a closed connection to tear down and restart."""
    return exc.code == types.CONNECTION_CLOSED and exc.message == "Connection closed" and exc.data is None


def server_text(text: str, limit: int = MAX_SERVER_TEXT_CHARS) -> str:
    """A server's own error text as the model sees it: one line, control and format characters
    escaped (no terminal sequences, NULs or line breaks reach the model or a UI), at most ``limit``
    characters with the original length named."""
    flat = "".join(
        c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text[: limit * 2]
    )
    if len(text) <= limit and len(flat) <= limit:
        return flat
    return f"{flat[:limit]} …[{len(text)} characters in all]"


def _problems(exc: ValidationError) -> str:
    """``content: Input should be a valid list; …``: where and what, never the server's values."""
    parts = [
        f"{'.'.join(str(p) for p in err['loc']) or '(result)'}: {err['msg']}"
        for err in exc.errors(include_url=False, include_input=False)[:MAX_RESULT_PROBLEMS]
    ]
    text = " ".join("; ".join(parts).split())  # one line (a key may hold a newline)
    if len(text) > MAX_PROBLEMS_CHARS:
        text = text[:MAX_PROBLEMS_CHARS] + "…"
    more = exc.error_count() - len(parts)
    return text + (f" (and {more} more)" if more > 0 else "")


def _root_cause(exc: BaseException) -> BaseException:
    """The first real failure inside (nested) exception groups the SDK's task groups raise."""
    while isinstance(exc, BaseExceptionGroup):
        inner = [e for e in exc.exceptions if not isinstance(e, asyncio.CancelledError)]
        if not inner:
            return exc.exceptions[0]
        exc = inner[0]
    return exc


def _is_transport_error(exc: BaseException) -> bool:
    """httpx2 transport errors (connection refused, reset, read errors), without importing httpx2 eagerly."""
    return any(
        cls.__module__.startswith("httpx") and cls.__name__ == "TransportError" for cls in type(exc).__mro__
    )
