"""Getting the bytes: probe, parallel Range segments, sequential stream (SPEC D-4, REFERENCE 4.6).

- **Probe**: one ``GET`` with ``Range: bytes=0-0``. A ``206`` whose ``Content-Range`` is exactly
  ``bytes 0-0/N`` means Range support and a total of N; the validator is a strong ``ETag`` (weak
  ones do not count) or ``Last-Modified``. A ``200`` means no Range support — its body *is* the
  download, so no second request is made.
- **Parallel**: only with Range support, a validator, a known size and more than one useful
  connection. Each segment is ``GET Range: bytes=a-b`` with ``If-Range: <validator>``; the answer
  must be ``206`` with ``Content-Range: bytes a-b/N`` exactly and exactly ``b-a+1`` body bytes,
  written at its offset. Anything else — a ``200`` (the resource changed), another range, another
  total, more or fewer bytes — is unsafe: the whole transfer falls back to one sequential response
  (``sequential_fallback``), as does a transport failure that outlived its retries.
- **Sequential**: one response streamed in order, hashed on the way when a digest is expected. A
  broken stream resumes with ``Range``/``If-Range`` when that is safe, else starts over.
- Bulk bodies go straight from the socket to the file (``pump.py``) when the transport can hand
  them over raw (a plain direct connection, ``Content-Length``); otherwise they stream through
  httpx and the background ``Writer``. Both paths apply the same checks and errors.
- Retries are bounded (``MAX_ATTEMPTS`` per request) for transport failures, 408/5xx and 429
  (honouring ``Retry-After`` when it fits the deadline). Every byte count is checked against
  ``max_bytes`` both as declared and as streamed. Bodies are read raw (``Accept-Encoding:
  identity``): the file gets the bytes the server stored, like curl.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hashlib
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx

from kernel.errors import InvalidArgument, RateLimited, ToolError, Transport
from tools.download.pump import STATS, THREAD_PREFIX, Pump, run_pump
from tools.download.staging import Staging
from tools.download.writer import Writer
from tools.net import Fetched, ProxyAuthFailed, SafeHttp, SafeUrl, map_http_error, status_error
from tools.net.sockets import RawBody

OP = "download"
MAX_ATTEMPTS = 3
RETRY_DELAYS_S = (0.25, 1.0)
MAX_RETRY_WAIT_S = 30.0
MIN_SEGMENT_BYTES = 1 << 20
MAX_PUMPS = 4  # one per Range connection
DEFAULT_READ_TIMEOUT_S = 60.0
_CONTENT_RANGE = re.compile(r"^bytes (\d+)-(\d+)/(\d+|\*)$")

T = TypeVar("T")


class UnsafeRange(Exception):
    """A segment answer that cannot be trusted: fall back to one sequential response."""


@dataclass
class Probe:
    chain: list[SafeUrl]
    status: int
    range_supported: bool = False
    total: int | None = None
    validator: str | None = None
    content_type: str | None = None
    disposition: str | None = None


@dataclass
class Progress:
    """Bytes on disk so far; ``tick`` is called after every write (it throttles itself)."""

    total: int | None = None
    done: int = 0
    tick: Callable[[Progress], None] = field(default=lambda _p: None)

    def add(self, n: int) -> None:
        self.done += n
        self.tick(self)


def parse_content_range(value: str | None) -> tuple[int, int, int | None] | None:
    m = _CONTENT_RANGE.match((value or "").strip())
    if not m:
        return None
    start, end = int(m.group(1)), int(m.group(2))
    total = None if m.group(3) == "*" else int(m.group(3))
    if end < start or (total is not None and end >= total):
        return None
    return start, end, total


def validator_of(headers: httpx.Headers) -> str | None:
    etag = headers.get("etag")
    if etag and not etag.startswith("W/"):
        return etag
    return headers.get("last-modified")


class Transfer:
    def __init__(
        self,
        http: SafeHttp,
        url: SafeUrl,
        stage: Staging | None,
        *,
        max_bytes: int,
        progress: Progress,
        now_ms: Callable[[], int],
        remaining_s: Callable[[], float],
        want_digest: bool,
    ) -> None:
        self.http = http
        self.url = url
        self.stage = stage
        self.max_bytes = max_bytes
        self.progress = progress
        self.now_ms = now_ms
        self.remaining_s = remaining_s
        self.hasher: Any = hashlib.sha256() if want_digest else None
        self.final: SafeUrl = url
        self.requests = 0
        self.writer: Writer | None = None
        self.read_timeout = http.timeout.read or DEFAULT_READ_TIMEOUT_S
        self._pumps: concurrent.futures.ThreadPoolExecutor | None = None
        self._live: set[Pump] = set()

    def attach(self, stage: Staging) -> None:
        """Stage the bytes into ``stage`` (through a background writer thread)."""
        if self.stage is not stage or self.writer is None:
            if self.writer is not None:
                self.writer.close()
            self.stage = stage
            self.writer = Writer(stage)

    def close(self) -> None:
        """Stop and wait for every thread that writes to the temp file (before its fd is closed)."""
        for pump in list(self._live):
            pump.body.stop()
        if self._pumps is not None:
            self._pumps.shutdown(wait=True)
        if self.writer is not None:
            self.writer.close()

    def _pump_pool(self) -> concurrent.futures.ThreadPoolExecutor:
        if self._pumps is None:
            self._pumps = concurrent.futures.ThreadPoolExecutor(MAX_PUMPS, thread_name_prefix=THREAD_PREFIX)
        return self._pumps

    # ---- requests with bounded retries ----------------------------------------------------

    async def _retrying(self, attempt: Callable[[], Awaitable[T]]) -> T:
        for n in range(MAX_ATTEMPTS):
            try:
                return await attempt()
            except ProxyAuthFailed:  # a refusal, not a glitch: retrying cannot help
                raise
            except (Transport, RateLimited) as exc:
                if n + 1 >= MAX_ATTEMPTS:
                    raise
                delay = RETRY_DELAYS_S[min(n, len(RETRY_DELAYS_S) - 1)]
                if isinstance(exc, RateLimited):
                    wait_ms = exc.data.get("retry_after_ms")
                    delay = max(delay, (wait_ms or 0) / 1000)
                if delay > min(MAX_RETRY_WAIT_S, self.remaining_s()):
                    raise
                await asyncio.sleep(delay)
        raise AssertionError("unreachable")

    def _check_status(self, got: Fetched, ok: tuple[int, ...]) -> None:
        status = got.response.status_code
        if status not in ok:
            raise status_error(OP, status, got.response.headers, got.url.anchor, self.now_ms())

    def _check_declared(self, got: Fetched) -> None:
        declared = got.response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_bytes:
            raise InvalidArgument(
                f"{got.url.anchor} is {int(declared)} bytes, more than max_bytes={self.max_bytes}"
            )

    # ---- probe --------------------------------------------------------------------------

    async def probe_and_maybe_stream(self, on_probe: Callable[[Probe], Awaitable[str]]) -> tuple[str, bool]:
        """Probe; ``on_probe`` decides (and stages the target): ``(decision, body_already_streamed)``.

        When the probe answers ``200`` with the whole body, that body is streamed right away.
        """

        async def attempt() -> tuple[str, bool]:
            headers = {"Range": "bytes=0-0", "Accept-Encoding": "identity"}
            async with self.http.open(self.url, headers=headers, op=OP, raw_body=True) as got:
                self.requests += 1
                self._check_status(got, (200, 206, 416))
                probe = self._probe_of(got)
                self.final = got.url
                decision = await on_probe(probe)
                if probe.status == 200 and decision == "sequential":
                    self._check_declared(got)
                    await self._consume(got, 0, None)
                    return decision, True
                return decision, False

        return await self._retrying(attempt)

    def _probe_of(self, got: Fetched) -> Probe:
        headers = got.response.headers
        probe = Probe(
            chain=got.chain,
            status=got.response.status_code,
            content_type=headers.get("content-type"),
            disposition=headers.get("content-disposition"),
        )
        if probe.status == 206:
            parsed = parse_content_range(headers.get("content-range"))
            if parsed is not None and parsed[:2] == (0, 0) and parsed[2] is not None:
                probe.range_supported = True
                probe.total = parsed[2]
                probe.validator = validator_of(headers)
        elif probe.status == 416:
            unsatisfied = (headers.get("content-range") or "").strip()
            if unsatisfied == "bytes */0":
                probe.total = 0
        else:
            declared = headers.get("content-length", "")
            probe.total = int(declared) if declared.isdigit() else None
        return probe

    # ---- sequential -----------------------------------------------------------------------

    async def sequential(self, range_ok: bool, validator: str | None) -> None:
        """One response from byte 0 (resuming with Range after a broken stream when safe)."""
        assert self.stage is not None
        position = 0
        for n in range(MAX_ATTEMPTS):
            headers = {"Accept-Encoding": "identity"}
            resume = position > 0 and range_ok and validator is not None
            if resume:
                headers.update({"Range": f"bytes={position}-", "If-Range": str(validator)})
            elif position:
                await self.restart_from_zero()
                position = 0
            try:
                async with self.http.open(self.url, headers=headers, op=OP, raw_body=True) as got:
                    self.requests += 1
                    self.final = got.url
                    self._check_status(got, (200, 206) if resume else (200,))
                    if got.response.status_code == 206:
                        parsed = parse_content_range(got.response.headers.get("content-range"))
                        if parsed is None or parsed[0] != position:
                            raise UnsafeRange("resumed response does not start where the file ends")
                    elif position:
                        await self.restart_from_zero()
                        position = 0
                    self._check_declared(got)
                    await self._consume(got, position, None)
                    return
            except ProxyAuthFailed:  # a refusal, not a glitch: retrying cannot help
                raise
            except (Transport, RateLimited, UnsafeRange) as exc:
                position = self.progress.done
                if isinstance(exc, UnsafeRange):
                    range_ok = False
                if n + 1 >= MAX_ATTEMPTS or (isinstance(exc, RateLimited) and not self._can_wait(exc)):
                    if isinstance(exc, UnsafeRange):
                        raise ToolError(f"{OP}: {self.url.anchor}: {exc}") from None
                    raise
                await asyncio.sleep(RETRY_DELAYS_S[min(n, len(RETRY_DELAYS_S) - 1)])

    def _can_wait(self, exc: RateLimited) -> bool:
        wait_ms = exc.data.get("retry_after_ms") or 0
        return wait_ms / 1000 <= min(MAX_RETRY_WAIT_S, self.remaining_s())

    async def restart_from_zero(self) -> None:
        """Empty the temp file, the byte count and the running digest (after pending writes)."""
        if self.writer is not None:
            with contextlib.suppress(Exception):
                await self.writer.drain()
        if self.stage is not None and self.stage.fd >= 0:
            self.stage.reset()
        self.progress.done = 0
        if self.hasher is not None:
            self.hasher = hashlib.sha256()

    async def _consume(
        self, got: Fetched, offset: int, length: int | None, written: list[int] | None = None
    ) -> int:
        """Stream ``got``'s body to ``offset``; with ``length``, exactly that many bytes.

        ``written`` (a one-item counter) keeps the bytes already on disk when the stream breaks.
        Only an in-order body (no ``length``: the sequential response) feeds the running digest;
        Range segments are hashed from the file afterwards.
        """
        assert self.stage is not None and self.writer is not None
        count = written if written is not None else [0]
        start = count[0]
        hasher = self.hasher if length is None else None
        raw = got.take_raw_body()
        if raw is not None:
            return await self._pump(got, raw, offset, length, count, hasher)
        try:
            async for chunk in got.response.aiter_raw():
                done = count[0] - start
                if length is not None and done + len(chunk) > length:
                    raise UnsafeRange(f"segment at {offset} sent more than the {length} bytes asked for")
                if offset + done + len(chunk) > self.max_bytes:
                    raise InvalidArgument(
                        f"{got.url.anchor} sent more than max_bytes={self.max_bytes}; download stopped"
                    )
                await self.writer.write(chunk, offset + done, hasher)
                count[0] += len(chunk)
                self.progress.add(len(chunk))
        except (httpx.HTTPError, httpx.StreamError) as exc:
            raise map_http_error(exc, OP, got.url.anchor, str(got.url.url)) from None
        done = count[0] - start
        if length is not None and done != length:
            raise UnsafeRange(f"segment at {offset} ended after {done} of {length} bytes")
        return done

    async def _pump(
        self, got: Fetched, raw: RawBody, offset: int, length: int | None, count: list[int], hasher: Any
    ) -> int:
        """``_consume`` for a body taken raw: the same checks, done before the first byte is read."""
        assert self.stage is not None and self.writer is not None
        if length is not None and raw.length != length:
            raise UnsafeRange(f"segment at {offset} declares {raw.length} bytes, not the {length} asked for")
        if offset + raw.length > self.max_bytes:
            raise InvalidArgument(
                f"{got.url.anchor} sends more than max_bytes={self.max_bytes}; download stopped"
            )
        await self.writer.drain()  # earlier chunks (and their hashing) come first
        start = count[0]

        def on_progress(n: int) -> None:
            count[0] += n
            self.progress.add(n)

        pump = Pump(raw, self.stage.fd, offset, hasher, self.read_timeout)
        self._live.add(pump)
        STATS["bodies"] += 1
        try:
            await run_pump(self._pump_pool(), pump, on_progress, OP, got.url.anchor)
        finally:
            self._live.discard(pump)
        return count[0] - start

    # ---- parallel ---------------------------------------------------------------------------

    async def parallel(self, total: int, validator: str, connections: int) -> None:
        """Every segment concurrently; ``UnsafeRange`` when the caller must fall back."""
        self.progress.done = 0
        try:
            async with asyncio.TaskGroup() as group:
                for start, end in split(total, connections):
                    group.create_task(self._segment(start, end, total, validator))
        except BaseExceptionGroup as group_error:
            errors = list(group_error.exceptions)
            unsafe = [e for e in errors if isinstance(e, UnsafeRange)]
            if unsafe:
                raise UnsafeRange(str(unsafe[0])) from None
            typed = [e for e in errors if isinstance(e, ToolError)]
            if typed:
                raise typed[0] from None
            raise

    async def _segment(self, start: int, end: int, total: int, validator: str) -> None:
        written = [0]
        for n in range(MAX_ATTEMPTS):
            a = start + written[0]
            headers = {"Range": f"bytes={a}-{end}", "If-Range": validator, "Accept-Encoding": "identity"}
            try:
                async with self.http.open(self.url, headers=headers, op=OP, raw_body=True) as got:
                    self.requests += 1
                    if got.response.status_code == 200:
                        raise UnsafeRange("the server answered a Range request with the whole resource")
                    self._check_status(got, (206,))
                    parsed = parse_content_range(got.response.headers.get("content-range"))
                    if parsed != (a, end, total):
                        raise UnsafeRange(
                            f"asked for bytes {a}-{end}/{total}, got Content-Range "
                            f"{got.response.headers.get('content-range')!r}"
                        )
                    declared = got.response.headers.get("content-length", "")
                    if declared.isdigit() and int(declared) != end - a + 1:
                        raise UnsafeRange(f"segment {a}-{end} declares {declared} bytes")
                    await self._consume(got, a, end - a + 1, written)
                    return
            except ProxyAuthFailed:  # a refusal, not a glitch: retrying cannot help
                raise
            except (Transport, RateLimited) as exc:
                if n + 1 >= MAX_ATTEMPTS or (isinstance(exc, RateLimited) and not self._can_wait(exc)):
                    raise UnsafeRange(f"segment {a}-{end} failed: {exc}") from None
                await asyncio.sleep(RETRY_DELAYS_S[min(n, len(RETRY_DELAYS_S) - 1)])


def split(total: int, connections: int) -> list[tuple[int, int]]:
    """``connections`` contiguous inclusive byte ranges covering ``[0, total)``."""
    size = -(-total // connections)
    return [(a, min(a + size, total) - 1) for a in range(0, total, size)]


def useful_connections(requested: int | None, total: int) -> int:
    """How many Range connections make sense (adaptive when the caller did not say)."""
    if requested is None:
        requested = 1 if total < 16 * MIN_SEGMENT_BYTES else 4
    return max(1, min(requested, total // MIN_SEGMENT_BYTES))
