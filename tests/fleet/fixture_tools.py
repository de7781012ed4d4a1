"""Test-only tools the fleet tests load on both sides through ``A3S_EXTRA_TOOLS`` (``Settings.extra_tools``).

- ``append_once``: the side effect of the kill test. Appends ``key`` as one line to a workspace file
  unless a line with that key is already there (its idempotency key), under ``flock``; it records
  every start in ``<path>.starts`` so the test can tell a job is in flight, and sleeps around the
  append so a kill lands before or after the side effect.
- ``nap``: sleeps (cancellable) and answers — jobs that are slow enough to be cancelled or to span a
  Redis restart.
- ``crash``: SIGKILLs its own process (a poison job).
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import signal

from pydantic import BaseModel, ConfigDict, Field

from kernel.capabilities import ToolCapabilities
from kernel.context import ToolContext
from kernel.result import ToolResult
from kernel.spec import ToolSpec


class AppendParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str
    key: str = Field(min_length=1)
    delay_ms: int = Field(default=0, ge=0, le=10_000)


def _append_line_once(path: str, key: str, started: str) -> bool:
    with open(started, "a") as log:
        log.write(key + "\n")
    with open(path, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        if key in f.read().splitlines():
            return False
        f.write(key + "\n")
        f.flush()
        os.fsync(f.fileno())
        return True


async def append_once(ctx: ToolContext, params: AppendParams) -> ToolResult:
    target = ctx.workspace.resolve(params.path)
    await asyncio.sleep(params.delay_ms / 2000)
    appended = await asyncio.to_thread(_append_line_once, str(target), params.key, str(target) + ".starts")
    await asyncio.sleep(params.delay_ms / 2000)
    return ToolResult.success(
        "append_once", f"{params.key} {'appended' if appended else 'already present'}", {"appended": appended}
    )


class NapParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ms: int = Field(ge=0, le=60_000)
    tag: str = ""


async def nap(ctx: ToolContext, params: NapParams) -> ToolResult:
    await asyncio.sleep(params.ms / 1000)
    return ToolResult.success("nap", f"napped {params.ms}ms {params.tag}".strip())


class CrashParams(BaseModel):
    model_config = ConfigDict(extra="forbid")


async def crash(ctx: ToolContext, params: CrashParams) -> ToolResult:
    os.kill(os.getpid(), signal.SIGKILL)
    return ToolResult.success("crash", "unreachable")


TOOLS = [
    ToolSpec(
        name="append_once",
        description="Append a key line to a file once (test tool).",
        params=AppendParams,
        run=append_once,
        capabilities=lambda _p: ToolCapabilities.conservative(),
        requires=frozenset({"write"}),
        subject=lambda p: p.path,
        path_fields=("path",),
    ),
    ToolSpec(
        name="nap",
        description="Sleep then answer (test tool).",
        params=NapParams,
        run=nap,
        capabilities=lambda _p: ToolCapabilities.parallel_safe_read(32),
    ),
    ToolSpec(
        name="crash", description="Kill the current process (test tool).", params=CrashParams, run=crash
    ),
]
