"""The stdio transport for MCP servers: a child process tied to ours, bounded messages (SPEC K-6, M-1).

Why not the SDK's ``stdio_client``: it spawns with ``anyio.open_process`` (a new session, killed as
a group on a clean exit, but orphaned when this process dies by SIGKILL), and it buffers a line
without bound. Here the server is started by ``tools._proc.spawn`` — the helper every tool that
runs programs uses — so when this process dies, or lets the server go, the server and everything it
started die too; and each JSON-RPC line is capped at ``MAX_MESSAGE_BYTES`` (a longer one ends the
connection with a clear reason instead of growing memory). The server's stderr is drained all the
time (a full pipe would block it) and its last ``STDERR_TAIL_BYTES`` are kept for error messages.

The context manager yields the ``(read_stream, write_stream)`` pair ``mcp.ClientSession`` takes,
exactly like the SDK transport: newline-delimited JSON-RPC, parse errors delivered as exceptions
(``MalformedMessage``, with a bounded excerpt of the line).
Leaving it closes stdin, gives the server ``STOP_GRACE_S`` to exit, then kills its whole tree.
``StdioLink`` reports what happened (exit code, stderr tail, why the stream ended).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import anyio
import mcp_types as types
from mcp.client.stdio import get_default_environment
from mcp.shared.message import SessionMessage

from tools import _proc
from tools.mcp.config import McpServerConfig
from tools.mcp.guard import MalformedMessage

MAX_MESSAGE_BYTES = 32 * 1024 * 1024
STDERR_TAIL_BYTES = 4096
STOP_GRACE_S = 1.0
FINISH_WAIT_S = 2.0


@dataclass
class StdioLink:
    """What the transport observed; read by the connection to explain a failure."""

    pid: int | None = None
    returncode: int | None = None
    ended: str | None = None  # why the read side ended early ("message too large", …)
    stderr: bytearray = field(default_factory=bytearray)
    eof: asyncio.Event = field(default_factory=asyncio.Event)

    def stderr_tail(self, limit: int = 1024) -> str:
        text = bytes(self.stderr[-limit:]).decode("utf-8", "replace").strip()
        return " ".join(text.split())


def server_environment(config: McpServerConfig) -> dict[str, str]:
    """The SDK's safe inherited variables (HOME, PATH, …) plus the server's own ``env``.

    Nothing else of this process's environment reaches the server: keys for model providers or
    the broker stay here unless the config names them.
    """
    env = get_default_environment()
    env.update(dict(config.env))
    return env


@contextlib.asynccontextmanager
async def tied_stdio_client(config: McpServerConfig, link: StdioLink) -> AsyncIterator[tuple[Any, Any]]:
    assert config.command is not None
    loop = asyncio.get_running_loop()
    argv = [config.command, *config.args]
    proc = _proc.spawn(
        argv,
        cwd=config.cwd,
        env=server_environment(config),
        stdin=_proc.PIPE,
        stdout=_proc.PIPE,
        stderr=_proc.PIPE,
        new_session=True,
    )
    link.pid = proc.pid
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    tasks: list[asyncio.Task[None]] = []
    transports: list[asyncio.BaseTransport] = []
    try:
        reader = asyncio.StreamReader(limit=MAX_MESSAGE_BYTES, loop=loop)
        rt, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader, loop=loop), proc.stdout
        )
        transports.append(rt)
        err_reader = asyncio.StreamReader(limit=MAX_MESSAGE_BYTES, loop=loop)
        et, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(err_reader, loop=loop), proc.stderr
        )
        transports.append(et)
        wt, wp = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, proc.stdin)
        transports.append(wt)
        writer = asyncio.StreamWriter(wt, wp, None, loop)

        to_session, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](16)
        write_stream, from_session = anyio.create_memory_object_stream[SessionMessage](16)

        async def read_stdout() -> None:
            try:
                async with to_session:
                    while True:
                        try:
                            line = await reader.readuntil(b"\n")
                        except asyncio.IncompleteReadError as exc:
                            if exc.partial.strip():
                                await _deliver(to_session, exc.partial)
                            break
                        except asyncio.LimitOverrunError:
                            link.ended = f"the server sent a message larger than {MAX_MESSAGE_BYTES} bytes"
                            break
                        except (ConnectionError, OSError) as exc:
                            link.ended = f"reading its output failed: {exc}"
                            break
                        if line.strip() and not await _deliver(to_session, line):
                            break
            finally:
                link.eof.set()  # whatever ended the reading: the connection is over

        async def read_stderr() -> None:
            while chunk := await err_reader.read(65536):
                link.stderr += chunk
                if len(link.stderr) > 2 * STDERR_TAIL_BYTES:
                    del link.stderr[:-STDERR_TAIL_BYTES]

        async def write_stdin() -> None:
            async with from_session:
                async for message in from_session:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    writer.write(data.encode("utf-8") + b"\n")
                    await writer.drain()

        async def guarded(coro: Any) -> None:
            with contextlib.suppress(
                ConnectionError, OSError, anyio.ClosedResourceError, anyio.BrokenResourceError
            ):
                await coro

        tasks = [
            asyncio.create_task(guarded(read_stdout())),
            asyncio.create_task(guarded(read_stderr())),
            asyncio.create_task(guarded(write_stdin())),
        ]
        async with read_stream, write_stream:
            yield read_stream, write_stream
    finally:
        # Shielded: a cancelled caller must still leave no process and no pipe behind.
        await asyncio.shield(_stop(proc, link, tasks, transports))


async def _deliver(stream: Any, line: bytes) -> bool:
    """Parse one line; a parse error is delivered as an exception (the SDK's contract), one that
    carries a bounded excerpt of the line (``tools.mcp.guard`` ends the connection on it)."""
    try:
        item: SessionMessage | Exception = SessionMessage(
            types.jsonrpc_message_adapter.validate_json(line, by_name=False)
        )
    except ValueError:
        item = MalformedMessage(line, "not a JSON-RPC message")
    try:
        await stream.send(item)
    except (anyio.ClosedResourceError, anyio.BrokenResourceError):
        return False
    return True


async def _stop(
    proc: _proc.Child,
    link: StdioLink,
    tasks: list[asyncio.Task[None]],
    transports: list[asyncio.BaseTransport],
) -> None:
    """Close stdin, let the server exit within the grace period, then kill its whole tree."""
    for transport in transports[2:]:  # the stdin pipe: EOF asks a well-behaved server to exit
        transport.close()
    with contextlib.suppress(TimeoutError):  # a server that exits closes its output
        await asyncio.wait_for(link.eof.wait(), STOP_GRACE_S)
    proc.kill()  # the process group now, and (through the supervisor) every descendant
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
    for transport in transports:
        transport.close()
    await asyncio.to_thread(proc.wait_finished, FINISH_WAIT_S)
    link.returncode = proc.poll()
    proc.close()


def describe_exit(link: StdioLink) -> str:
    """``exit code N`` / ``killed by signal N`` / ``still running``, plus the stderr tail."""
    code = link.returncode
    if code is None:
        text = "its output ended"
    elif code < 0:
        text = f"killed by signal {-code}"
    else:
        text = f"exit code {code}"
    if link.ended:
        text = f"{link.ended}; {text}"
    tail = link.stderr_tail()
    return f"{text}; stderr: {tail}" if tail else text


def program_problem(config: McpServerConfig, exc: OSError) -> str:
    """A clear reason a stdio server could not be spawned."""
    if isinstance(exc, FileNotFoundError):
        where = f" (cwd {config.cwd})" if config.cwd and not os.path.isdir(config.cwd) else ""
        return f"command {config.command!r} not found{where}"
    if isinstance(exc, PermissionError):
        return f"command {config.command!r} is not executable"
    return f"cannot start {config.command!r}: {exc.strerror or exc}"
