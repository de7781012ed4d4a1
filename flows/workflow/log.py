"""Append-only workflow logs: the ``EventLog`` protocol and the embedded file log (F-3, F-7).

``FileEventLog(root)`` keeps one JSON-lines file per run at ``<root>/.a3s/workflow/<run_id>.jsonl``:

- the run id is checked (``events.check_run_id``) before it names anything;
- ``.a3s`` and ``.a3s/workflow`` must be real directories: they are opened one component at a time
  with ``O_NOFOLLOW`` (``kernel.statedir.open_state_dir``) and the log is opened relative to their
  descriptor, so a symlink planted at either (or at the log itself) is refused
  (``permission_denied``, reason ``state_dir_not_a_directory``), never followed — the log can never
  be written outside the workspace;
- the log must be a regular file; events are written as whole lines followed by ``fsync`` before
  they are acknowledged (events submitted while a write is in flight share the next write and
  fsync — group commit; the directory is fsynced when the log is created), so an acknowledged event
  survives a crash of the process or the machine;
- a torn last line (a crash in the middle of a write) is cut off before the next append; reading
  skips it;
- a log holds at most ``MAX_LOG_BYTES``: an append that would pass it fails
  (``budget_exhausted{resource: "workflow_history"}``) and a longer log is never read whole;
- one driver per run at a time: ``open_for_run`` takes an exclusive ``flock`` on the log for as long
  as the run is driven; a second driver of the same run id is refused (``version_conflict``), and
  ``a3s-fleet workflow status`` reports a run whose log is locked as running.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import json
import os
import stat
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

from flows.workflow.events import check_run_id
from kernel.errors import BudgetExhausted, InvalidArgument, NotFound, PermissionDenied, VersionConflict
from kernel.statedir import open_state_dir

LOG_DIR = (".a3s", "workflow")
MAX_LOG_LINE_BYTES = 2 * 1024 * 1024
# One run's whole history. Read whole (and parsed) on every resume and status; each step's output
# is in it (up to ~100 KiB text + 256 KiB metadata), so without a cap a run of 10 000 steps, or
# many re-runs under new queries, grew it by GBs — on disk, and in memory when read back.
MAX_LOG_BYTES = 256 * 1024 * 1024
LOCK_ATTEMPTS = 100
LOCK_RETRY_S = 0.02


class EventLog(Protocol):
    """Where one run's history lives (a file embedded, a Redis stream on a fleet).

    ``submit`` queues an envelope *now* (so the log's order is the order of the calls) and returns
    an awaitable that resolves once the envelope is durable; envelopes submitted while a write is in
    flight are written together (group commit: one fsync / one round trip for many events).
    """

    async def load(self) -> list[dict[str, Any]]: ...

    def submit(self, envelope: dict[str, Any]) -> Awaitable[None]: ...

    async def close(self) -> None: ...


class GroupCommit:
    """Ordered group commit for a log: ``submit`` queues, one flusher writes whole batches in order."""

    def __init__(self, write: Callable[[list[dict[str, Any]]], Awaitable[None]]) -> None:
        self._write = write
        self._queue: list[tuple[dict[str, Any], asyncio.Future[None]]] = []
        self._flusher: asyncio.Task[None] | None = None

    def submit(self, envelope: dict[str, Any]) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.append((envelope, fut))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.ensure_future(self._flush())
        return fut

    async def _flush(self) -> None:
        while self._queue:
            batch, self._queue = self._queue, []
            try:
                await self._write([env for env, _ in batch])
            except BaseException as exc:
                for _, fut in batch:
                    if not fut.done():
                        fut.set_exception(exc if isinstance(exc, Exception) else RuntimeError(str(exc)))
                if not isinstance(exc, Exception):
                    raise
                continue
            for _, fut in batch:
                if not fut.done():
                    fut.set_result(None)

    async def drain(self) -> None:
        if self._flusher is not None:
            await asyncio.gather(self._flusher, return_exceptions=True)


class EventLogs(Protocol):
    """Opens the log of a run for driving (exclusive) or for reading."""

    async def open_for_run(self, run_id: str) -> EventLog: ...

    async def read(self, run_id: str) -> list[dict[str, Any]]: ...

    async def running(self, run_id: str) -> bool: ...

    def location(self, run_id: str) -> str: ...


class FileEventLogs:
    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def location(self, run_id: str) -> str:
        return str(self.root.joinpath(*LOG_DIR, f"{check_run_id(run_id)}.jsonl"))

    def _open_log(self, run_id: str, *, create: bool) -> int:
        name = f"{check_run_id(run_id)}.jsonl"
        try:
            # .a3s and .a3s/workflow: one component at a time, O_NOFOLLOW (kernel.statedir).
            state = open_state_dir(self.root, LOG_DIR[1], create=create)
        except FileNotFoundError:
            raise NotFound(f"no workflow run {run_id} in {self.root}", path=run_id) from None
        with state:
            dir_fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=state.fd)
        try:
            flags = os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | (os.O_CREAT if create else 0)
            try:
                fd = os.open(name, flags, 0o644, dir_fd=dir_fd)
            except FileNotFoundError:
                raise NotFound(f"no workflow run {run_id} in {self.root}", path=run_id) from None
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise PermissionDenied(
                        f"{'/'.join(LOG_DIR)}/{name} is a symlink; a3s-fleet never follows its state "
                        "directory through a symlink (remove it and retry)",
                        reason="state_dir_not_a_directory",
                        path=name,
                    ) from None
                raise
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                raise InvalidArgument(f"workflow log {name} is not a regular file")
            os.set_blocking(fd, True)
            if create:
                os.fsync(dir_fd)
            return fd
        finally:
            os.close(dir_fd)

    async def open_for_run(self, run_id: str) -> FileEventLog:
        fd = self._open_log(run_id, create=True)
        # A process forking at this moment (any subprocess start) holds a copy of the descriptor —
        # and so the lock — until it execs (O_CLOEXEC): retry briefly before calling it a conflict.
        for attempt in range(LOCK_ATTEMPTS):
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if attempt + 1 == LOCK_ATTEMPTS:
                    os.close(fd)
                    raise VersionConflict(
                        f"workflow run {run_id} is being driven by another process", path=run_id
                    ) from None
                await asyncio.sleep(LOCK_RETRY_S)
        _cut_torn_tail(fd)
        return FileEventLog(fd, os.fstat(fd).st_size)

    async def read(self, run_id: str) -> list[dict[str, Any]]:
        fd = self._open_log(run_id, create=False)
        try:
            return _read_lines(fd)
        finally:
            os.close(fd)

    async def running(self, run_id: str) -> bool:
        try:
            fd = self._open_log(run_id, create=False)
        except NotFound:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        return False


class FileEventLog:
    """One run's log, held open (and locked) while the run is driven."""

    def __init__(self, fd: int, size: int = 0) -> None:
        self._fd = fd
        self._size = size  # the file's length: this driver is its only writer (flock)
        self._commits = GroupCommit(self._write)

    async def load(self) -> list[dict[str, Any]]:
        return _read_lines(self._fd)

    def submit(self, envelope: dict[str, Any]) -> Awaitable[None]:
        return self._commits.submit(envelope)

    async def _write(self, envelopes: list[dict[str, Any]]) -> None:
        lines = []
        for env in envelopes:
            line = (json.dumps(env, separators=(",", ":"), ensure_ascii=False) + "\n").encode(
                "utf-8", "surrogatepass"
            )
            if len(line) > MAX_LOG_LINE_BYTES:
                raise InvalidArgument(f"workflow event is {len(line)} bytes, over {MAX_LOG_LINE_BYTES}")
            lines.append(line)
        data = b"".join(lines)
        if self._size + len(data) > MAX_LOG_BYTES:
            raise history_full(self._size + len(data))
        await asyncio.to_thread(_append_lines, self._fd, data)  # one write + fsync, off the loop
        self._size += len(data)

    async def close(self) -> None:
        await self._commits.drain()
        if self._fd >= 0:
            os.close(self._fd)  # releases the flock
            self._fd = -1


def _append_lines(fd: int, data: bytes) -> None:
    os.lseek(fd, 0, os.SEEK_END)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.fsync(fd)


def history_full(size: int) -> BudgetExhausted:
    return BudgetExhausted(
        f"workflow history would be {size} bytes, over {MAX_LOG_BYTES}: start a new run id, and keep "
        "steps' outputs small (return references, not raw output)",
        resource="workflow_history",
        reason="max_history_bytes",
    )


def _read_lines(fd: int) -> list[dict[str, Any]]:
    size = os.fstat(fd).st_size
    if size > MAX_LOG_BYTES:
        raise history_full(size)  # never read whole into memory
    data = os.pread(fd, size, 0)
    out: list[dict[str, Any]] = []
    for raw in data.split(b"\n"):
        if not raw.strip():
            continue
        try:
            item = json.loads(raw)
        except ValueError:
            continue  # a torn line: skipped on read, cut before the next append
        if isinstance(item, dict):
            out.append(item)
    return out


def _cut_torn_tail(fd: int) -> None:
    size = os.fstat(fd).st_size
    if size == 0:
        return
    tail = os.pread(fd, min(size, MAX_LOG_LINE_BYTES + 1), max(0, size - MAX_LOG_LINE_BYTES - 1))
    if tail.endswith(b"\n"):
        return
    cut = tail.rfind(b"\n")
    keep = size - len(tail) + cut + 1 if cut >= 0 else 0
    os.ftruncate(fd, keep)
    os.fsync(fd)
