"""The ``download`` tool: an HTTP(S) resource into a writable local workspace (SPEC D-1…D-5, REFERENCE 4.6).

Invariants:

- Registered only for writable *local* workspaces; model-chosen calls are workspace mutations
  (permission, then confirmation — ``requires_confirmation`` is always true); host-direct calls
  are a privileged host decision. Writes need a session id.
- The URL is checked (shape, then the SSRF guard's literal check) before any request; a named
  target is checked (inside the workspace, not a directory, not clobbered without ``overwrite``)
  before any request too.
- Bytes go to ``.a3s-download-*.part`` beside the target (``staging.py``); the target changes only
  by atomic promotion after the whole body arrived, was synced and — with ``expected_sha256`` —
  verified. Cancel, timeout, over-``max_bytes``, a digest mismatch, server and transport errors
  all leave the target untouched and remove the temp file.
- ``timeout`` covers retries, hashing and promotion. Blocking work (fsync, hashing a parallel
  download) gets ``CANCEL_GRACE_S`` to notice a cancel before the call ends.
- Metadata and messages carry URL *anchors* only (no userinfo, query or fragment): signed query
  parameters are used for the request and never shown.
- Long downloads report progress as ``tool_output_delta`` events, at most one per
  ``PROGRESS_EVERY_S``.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, ConfigDict, Field

from kernel.capabilities import ToolCapabilities
from kernel.context import ToolContext
from kernel.errors import InvalidArgument, Timeout, ToolError
from kernel.result import ToolResult
from kernel.spec import ToolSpec
from tools import _fileio
from tools.download.names import infer_name
from tools.download.staging import Staging
from tools.download.transfer import Probe, Progress, Transfer, UnsafeRange, useful_connections
from tools.net import SafeUrl, parse_url, safe_http
from tools.net.urls import redact_url_arg

NAME = "download"
DEFAULT_MAX_BYTES = 536_870_912
HARD_MAX_BYTES = 8_589_934_592
DEFAULT_TIMEOUT_S = 300
HARD_TIMEOUT_S = 3600
MAX_CONNECTIONS = 4
PROGRESS_EVERY_S = 0.5
CANCEL_GRACE_S = 5.0
HASH_CHUNK_BYTES = 1 << 20

T = TypeVar("T")


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str = Field(
        min_length=1,
        max_length=8192,
        description="Public http(s) URL. Credentials in the URL are refused; the fragment is dropped.",
    )
    file_path: str | None = Field(
        default=None,
        min_length=1,
        max_length=4096,
        description="Workspace-relative target. Default: a safe name from Content-Disposition or the URL.",
    )
    overwrite: bool = Field(
        default=False, description="Replace an existing regular file once the new one is complete."
    )
    connections: int | None = Field(
        default=None, ge=1, le=MAX_CONNECTIONS, description="Range connections (1-4); adaptive when omitted."
    )
    max_bytes: int = Field(
        default=DEFAULT_MAX_BYTES, ge=1, le=HARD_MAX_BYTES, description="Refuse bodies larger than this."
    )
    timeout: int = Field(
        default=DEFAULT_TIMEOUT_S, ge=1, le=HARD_TIMEOUT_S, description="Seconds for the whole download."
    )
    expected_sha256: str | None = Field(
        default=None, pattern=r"^[A-Fa-f0-9]{64}$", description="Verify the body; a mismatch changes nothing."
    )


def capabilities(_params: Params) -> ToolCapabilities:
    return ToolCapabilities(cancel_safe=True, output_kind="mixed")


def _host(params: Params) -> str | None:
    try:
        return parse_url(params.url).host
    except ToolError:
        return None


async def _blocking(fn: Callable[[], T]) -> T:
    """Run blocking file work in a thread; on cancel, give it ``CANCEL_GRACE_S`` to finish first
    (its file descriptors must not be closed under it)."""
    fut = asyncio.get_running_loop().run_in_executor(None, fn)
    try:
        return await asyncio.shield(fut)
    except asyncio.CancelledError:
        await asyncio.wait([fut], timeout=CANCEL_GRACE_S)
        raise


def _file_sha256(fd: int, size: int, stop: threading.Event) -> str:
    digest = hashlib.sha256()
    offset = 0
    while offset < size:
        if stop.is_set():
            raise asyncio.CancelledError
        chunk = os.pread(fd, HASH_CHUNK_BYTES, offset)
        if not chunk:
            break
        digest.update(chunk)
        offset += len(chunk)
    return digest.hexdigest()


class _Run:
    """One download call: the staged target, the transfer and what metadata will report."""

    def __init__(self, ctx: ToolContext, params: Params, url: SafeUrl) -> None:
        self.ctx = ctx
        self.params = params
        self.url = url
        self.ws = _fileio.local_workspace(ctx)
        self.stage: Staging | None = (
            Staging(self.ws, params.file_path, protect=ctx.governed) if params.file_path else None
        )
        if self.stage is not None:
            self.stage.check_target(params.overwrite)
        self.expected = params.expected_sha256.lower() if params.expected_sha256 else None
        self.probe: Probe | None = None
        self.transfer: Transfer | None = None
        self.connections = 1
        self.notices: list[str] = []
        self._last_tick = ctx.clock.monotonic()
        self.progress = Progress(tick=self._tick)

    def _tick(self, progress: Progress) -> None:
        now = self.ctx.clock.monotonic()
        if now - self._last_tick >= PROGRESS_EVERY_S:
            self._last_tick = now
            self.ctx.emit_delta(
                {"download_progress": {"bytes": progress.done, "total_bytes": progress.total}}
            )

    async def on_probe(self, probe: Probe) -> str:
        self.probe = probe
        if probe.total is not None and probe.total > self.params.max_bytes:
            raise InvalidArgument(
                f"{probe.chain[-1].anchor} is {probe.total} bytes, more than max_bytes={self.params.max_bytes}"
            )
        if self.stage is None:
            name = infer_name(probe.chain[-1], probe.disposition)
            self.stage = Staging(self.ws, name, protect=self.ctx.governed)
            self.stage.check_target(self.params.overwrite)
        if self.stage.temp_name is None:
            self.stage.create_temp()
        assert self.transfer is not None
        self.transfer.attach(self.stage)
        await self.transfer.restart_from_zero()
        self.progress.total = probe.total
        can_split = probe.range_supported and probe.validator is not None and probe.total
        self.connections = useful_connections(self.params.connections, probe.total or 0) if can_split else 1
        return "parallel" if self.connections > 1 else "sequential"

    async def execute(self) -> ToolResult:
        http = safe_http(
            self.ctx,
            timeout=httpx.Timeout(30.0, read=60.0),
            max_connections=MAX_CONNECTIONS + 1,
        )
        transfer = self.transfer = Transfer(
            http,
            self.url,
            self.stage,
            max_bytes=self.params.max_bytes,
            progress=self.progress,
            now_ms=self.ctx.clock.now_ms,
            remaining_s=self.ctx.remaining_s,
            want_digest=self.expected is not None,
        )
        if self.stage is not None:
            transfer.attach(self.stage)
        async with http:
            strategy, streamed = await transfer.probe_and_maybe_stream(self.on_probe)
            probe, stage = self.probe, self.stage
            assert probe is not None and stage is not None
            hashed_inline = True
            if strategy == "parallel":
                assert probe.total is not None and probe.validator is not None
                try:
                    await transfer.parallel(probe.total, probe.validator, self.connections)
                    strategy, hashed_inline = "parallel_range", False
                except UnsafeRange as exc:
                    self.notices.append(
                        f"parallel Range download abandoned ({exc}); fell back to one response"
                    )
                    self.connections = 1
                    await transfer.restart_from_zero()
                    await transfer.sequential(False, None)
                    strategy = "sequential_fallback"
            elif not streamed:
                await transfer.sequential(probe.range_supported, probe.validator)
            assert transfer.writer is not None
            await transfer.writer.drain()
        size = self.progress.done
        if probe.total is not None and probe.status != 416 and size != probe.total:
            raise ToolError(f"download: expected {probe.total} bytes from {self.url.anchor}, got {size}")
        await _blocking(stage.sync)
        verified = await self._verify(stage, size, hashed_inline)
        overwritten = stage.promote(self.params.overwrite)
        meta: dict[str, Any] = {
            "file_path": stage.rel,
            "bytes": size,
            "content_type": probe.content_type,
            "strategy": strategy,
            "connections": self.connections,
            "range_supported": probe.range_supported,
            "overwritten": overwritten,
            "source_anchors": [self.url.anchor, transfer.final.anchor],
            "redirects": len(probe.chain) - 1,
            "requests": transfer.requests,
        }
        if verified is not None:
            meta["sha256"] = verified
        if self.notices:
            meta["notices"] = self.notices
        result = ToolResult.success(NAME, f"Downloaded {size} bytes to {stage.rel} using {strategy}", meta)
        result.trust = "external"
        return result

    async def _verify(self, stage: Staging, size: int, hashed_inline: bool) -> str | None:
        if self.expected is None:
            return None
        hasher = self.transfer.hasher if self.transfer is not None else None
        if hashed_inline and hasher is not None:
            actual = str(hasher.hexdigest())
        else:
            stop = threading.Event()
            try:
                actual = await _blocking(lambda: _file_sha256(stage.fd, size, stop))
            finally:
                stop.set()
        if actual != self.expected:
            raise ToolError(
                f"SHA-256 mismatch for {self.url.anchor}: expected {self.expected}, got {actual}; "
                f"{stage.rel} was not changed",
                expected_sha256=self.expected,
                actual_sha256=actual,
            )
        return actual


async def run(ctx: ToolContext, params: Params) -> ToolResult:
    url = parse_url(params.url)
    _fileio.require_session(ctx)
    safe_http(ctx).check(url)  # the literal SSRF checks, before the target is even touched
    job = _Run(ctx, params, url)
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        async with asyncio.timeout(params.timeout):
            return await job.execute()
    except TimeoutError:
        elapsed = int((loop.time() - started) * 1000)
        raise Timeout(
            f"download of {url.anchor} timed out after {params.timeout}s; nothing was written",
            op=NAME,
            duration_ms=elapsed,
        ) from None
    finally:
        if job.transfer is not None:
            job.transfer.close()  # waits for the chunk being written: no write outlives the fd
        if job.stage is not None:
            job.stage.discard()


TOOL = ToolSpec(
    name=NAME,
    description=(
        "Download an http(s) URL into the workspace. The file appears only when complete (and, with "
        "expected_sha256, verified); without overwrite=true an existing file is never replaced. Large "
        "files use up to 4 Range connections when the server supports them. Private and local network "
        "addresses are refused."
    ),
    params=Params,
    run=run,
    capabilities=capabilities,
    requires=frozenset({"write", "local"}),
    requires_confirmation=lambda _p: True,
    subject=_host,
    path_fields=("file_path",),
    trust="external",
    event_args=redact_url_arg,
    examples=({"url": "https://example.com/data.csv", "file_path": "data/data.csv"},),
    builtin=True,
)
