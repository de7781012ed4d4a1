"""``read``: numbered lines of one file, or a bounded batch of files (SPEC B-1, B-4; REFERENCE 4.2).

Single file: ``file_path`` + ``offset`` (lines to skip) + ``limit`` (≤ 2000, larger values clamped).
Lines render as ``{n:>6}\\t{line}``, each cut UTF-8-safely at 2000 bytes; the response also stops
before ~96 KiB so the continuation offset is exact rather than left to projection.

Batch: ``files=[{path, offset?, limit?}]`` shares one ``max_output_bytes`` budget that covers
headers, error segments and the continuation footer. Request order is kept, one unreadable file
never drops the others, and ``metadata.batch.continuation`` passed back as ``files`` resumes exactly
where the response stopped without repeating a line.

Work is bounded as well as output: one call scans at most ``MAX_SCAN_BYTES`` (256 MiB) for line
ends, across all files of a batch — a sparse or all-zero file made in the sandbox costs no disk, but
counting its lines was a pass over every byte (64 GiB: 100 s of a core). Past the cap:

- the window was already collected: it is returned as usual with an exact ``next_offset``;
  ``total_lines`` is None (unknown);
- the offset lies beyond the cap: ``invalid_argument`` naming the limit and ``bash``;
- the cap fell inside the window (a huge line): the lines before it are returned (a line already
  longer than 2000 bytes shown cut, as always); nothing after it is within reach, so
  ``next_offset`` is None and ``eof`` false.

Each case adds ``metadata.scan = {truncated: true, scanned_bytes, max_scan_bytes}`` and a footer
line that says what happened. In a batch, a file met after the cap was spent (by earlier files)
goes to the continuation unchanged, and so does one whose window the cap cut short when earlier
files had spent part of it: the next call gives it the whole cap. Only a file that got the whole cap
and still could not reach its offset becomes an error segment; every call makes progress, since
its first file always gets the whole cap.

Blocking work stays off the event loop: on a non-local workspace (a ``git:`` view: libgit2 lookups,
and a 1-64 MiB blob's id check is a full inflate) opening and scanning a file run together in a
worker thread that stops with the call (``tools._offthread.stoppable``); a directory's ``open`` is
non-blocking, and only its scans over ``INLINE_SCAN_BYTES`` go to a worker.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
from collections.abc import Callable
from typing import Any, BinaryIO

from kernel.capabilities import ToolCapabilities
from kernel.context import ToolContext
from kernel.errors import Cancelled, InvalidArgument, ToolError
from kernel.result import ToolResult
from kernel.spec import DeferredParams, ToolSpec
from kernel.workspace import Workspace
from tools._linewindow import Window, read_window, render_line
from tools._offthread import stoppable
from tools.read_args import (
    MAX_LIMIT_LINES,
    FileArgs,
    ReadArgs,
    quick_params,
    request_json,
)

MAX_LINE_BYTES = 2000
MAX_SINGLE_OUTPUT_BYTES = 98_304
DEFAULT_BATCH_OUTPUT_BYTES = 65_536
INLINE_SCAN_BYTES = 1 << 20  # larger files are scanned in a worker thread
# The bytes one call may scan for line ends, shared by every file of a batch (~1 s of one core
# here): a sparse 64 GiB file costs no disk but kept a core busy for minutes (module docstring).
MAX_SCAN_BYTES = 256 * 1024 * 1024
MAX_IMAGE_BYTES = 20 * 1024 * 1024
IMAGE_TYPES = {
    "jpg": "image/jpeg",
    "jpeg": "image/jpeg",
    "png": "image/png",
    "gif": "image/gif",
    "webp": "image/webp",
}


def __getattr__(name: str) -> Any:
    """``Params`` and ``FileRequest``, the pydantic models, imported on first use."""
    if name in ("Params", "FileRequest"):
        from tools import read_params

        return getattr(read_params, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def capabilities(_params: ReadArgs) -> ToolCapabilities:
    return ToolCapabilities.read_only_paginated(16)


def subject(params: ReadArgs) -> list[str]:
    """Every path the call reads (the kernel resolves each; every one must pass the rules)."""
    if params.file_path is not None:
        return [params.file_path]
    return [f.path for f in params.files or []]


async def run(ctx: ToolContext, params: ReadArgs) -> ToolResult:
    if params.files is not None:
        return await _read_batch(ctx, params.files, params.max_output_bytes or DEFAULT_BATCH_OUTPUT_BYTES)
    assert params.file_path is not None
    return await _read_single(ctx, params.file_path, params.offset, params.limit)


# ---- single file ------------------------------------------------------------------------------


async def _window(
    ctx: ToolContext, path: str, offset: int, limit: int, budget: int, scan: int = MAX_SCAN_BYTES
) -> Window:
    """Lines ``offset .. offset+limit`` of ``path`` (as many as ``budget`` bytes can show) and its
    total line count, streamed, scanning at most ``scan`` bytes (module docstring)."""
    if "local" not in ctx.workspace.capabilities:
        # Opening a git blob is libgit2 lookups and, for 1-64 MiB, a full inflate + id check
        # (~0.2 s for 60 MiB): on the loop it stalled every other call and session. All of it
        # runs in a worker thread, stopped with the call (deadline, cancel, closed session).
        ws = ctx.workspace
        return await stoppable(
            ctx.cancelled, lambda stopped: _window_of(ws, path, offset, limit, budget, scan, stopped)
        )
    opener = getattr(ctx.workspace, "open_file", None)
    if not callable(opener):  # a workspace without streams: read_bytes bounds it (MAX_READ_BYTES)
        blob = io.BytesIO(ctx.workspace.read_bytes(path))
        return read_window(blob, offset, limit, budget, max_scan_bytes=scan)
    # Every workspace kind streams (a git blob or a stored object too): never a whole file in memory.
    # A directory's open is non-blocking (O_NONBLOCK, regular files only): only big scans leave the loop.
    fh = opener(path)
    try:
        if _size(fh) <= INLINE_SCAN_BYTES:
            return read_window(fh, offset, limit, budget, max_scan_bytes=scan)
        return await asyncio.to_thread(read_window, fh, offset, limit, budget, ctx.cancelled.is_set, scan)
    finally:
        fh.close()


def _window_of(
    ws: Workspace,
    path: str,
    offset: int,
    limit: int,
    budget: int,
    scan: int,
    stopped: Callable[[], bool],
) -> Window:
    """``_window`` for a non-local workspace, in a worker thread: open (or load) and scan."""
    if stopped():
        raise Cancelled("read cancelled", op="read")
    opener = getattr(ws, "open_file", None)
    fh: BinaryIO = opener(path) if callable(opener) else io.BytesIO(ws.read_bytes(path))
    try:
        return read_window(fh, offset, limit, budget, stopped, scan)
    finally:
        fh.close()


def _size(fh: Any) -> int:
    """A stream's file size: ``size`` of a git blob or stored object, else ``fstat``."""
    size = getattr(fh, "size", None)
    return size if isinstance(size, int) else os.fstat(fh.fileno()).st_size


def _unreachable(path: str, offset: int) -> InvalidArgument:
    return InvalidArgument(
        f"Offset {offset} of {path} is beyond what read scans in one call ({_mib(MAX_SCAN_BYTES)} of the "
        "file; line ends are found by scanning from the start): read it with bash "
        "(e.g. sed -n, tail, split)"
    )


def _mib(n: int) -> str:
    return f"{n // (1024 * 1024)} MiB"


def _scan_meta(win: Window) -> dict[str, Any]:
    return {"truncated": True, "scanned_bytes": win.scanned_bytes, "max_scan_bytes": MAX_SCAN_BYTES}


def _scan_note(win: Window, first_missing: int) -> str:
    """The footer of a window whose scan stopped at the cap (``first_missing``: 0-based line)."""
    if win.complete:
        return (
            f"... (more lines available; continue with offset={first_missing}. Total line count unknown: "
            f"read scans at most {_mib(MAX_SCAN_BYTES)} per call)\n"
        )
    return (
        f"... (read stopped after scanning {_mib(MAX_SCAN_BYTES)} of this file, inside line "
        f"{win.stop_line + 1}; the rest is beyond read's reach: use bash, e.g. tail -c or split)\n"
    )


async def _read_single(ctx: ToolContext, path: str, offset: int | None, limit: int | None) -> ToolResult:
    ext = path.rsplit(".", 1)[-1].lower() if "." in path else ""
    if ext in IMAGE_TYPES:
        return _read_image(ctx, path, IMAGE_TYPES[ext], offset, limit)
    offset = offset or 0
    requested = limit or MAX_LIMIT_LINES
    applied = min(requested, MAX_LIMIT_LINES)
    win = await _window(ctx, path, offset, applied, MAX_SINGLE_OUTPUT_BYTES)
    total = win.total
    if win.stopped and (not win.reached or not (win.lines or win.complete)):
        raise _unreachable(path, offset)
    if total is not None and offset > total:
        raise InvalidArgument(f"Offset {offset} exceeds file length ({total} lines)")
    parts: list[str] = []
    size = 0
    end = offset
    for k, text in enumerate(win.lines):
        i = offset + k
        rendered = render_line(i + 1, text, win.cut[k])
        if size + len(rendered.encode("utf-8")) > MAX_SINGLE_OUTPUT_BYTES and parts:
            break
        parts.append(rendered)
        size += len(rendered.encode("utf-8"))
        end = i + 1
    eof = total is not None and end >= total
    next_offset: int | None = None if eof else end
    if win.stopped:
        if end < offset + len(win.lines):
            win.complete = True  # the output budget ended the window before the scan stopped it
        parts.append(_scan_note(win, end))
        if not win.complete:
            next_offset = None  # the next line starts past the scan cap: no call can reach it
    elif offset == total:
        parts = [f"(end of file: offset {offset} equals file length)\n"]
    elif not eof:
        parts.append(f"... (more lines available; continue with offset={end})\n")
    output = "".join(parts)
    meta: dict[str, Any] = {
        "source_anchors": [path],
        "range": {
            "offset": offset,
            "requested_limit": requested,
            "applied_limit": applied,
            "returned_lines": end - offset,
            "next_offset": next_offset,
            "eof": eof,
            "total_lines": total,
            "limit_clamped": requested > MAX_LIMIT_LINES,
            "output_bytes": len(output.encode("utf-8")),
        },
    }
    if win.stopped:
        meta["scan"] = _scan_meta(win)
    return ToolResult.success("read", output, meta)


def _read_image(ctx: ToolContext, path: str, media: str, offset: int | None, limit: int | None) -> ToolResult:
    if offset is not None or limit is not None:
        raise InvalidArgument("offset and limit are not supported for images")
    if ctx.workspace.root is None:
        raise InvalidArgument("images can only be read from a local workspace")
    opener = getattr(ctx.workspace, "open_file", None)
    if callable(opener):
        with opener(path) as fh:
            size = os.fstat(fh.fileno()).st_size
            if size > MAX_IMAGE_BYTES:
                raise InvalidArgument(
                    f"{path} is {size} bytes; images are read up to {MAX_IMAGE_BYTES} bytes"
                )
            data = fh.read(MAX_IMAGE_BYTES + 1)
    else:
        data = ctx.workspace.read_bytes(path)
    if len(data) > MAX_IMAGE_BYTES:
        raise InvalidArgument(
            f"{path} is larger than {MAX_IMAGE_BYTES} bytes; images are read up to that size"
        )
    uri = ctx.artifacts.put("read", data)
    meta = {
        "source_anchors": [path],
        "attachment": {"media_type": media, "bytes": len(data), "artifact_uri": uri},
    }
    return ToolResult.success("read", f"[Image: {media} ({len(data)} bytes)]", meta)


# ---- batch ------------------------------------------------------------------------------------


async def _read_batch(ctx: ToolContext, files: list[FileArgs], budget: int) -> ToolResult:
    paths = [f.path for f in files]
    if len(set(paths)) != len(paths):
        raise InvalidArgument("Duplicate path in files")
    n = len(files)
    segments: list[str] = []
    used = 0
    completed = successful = failed = returned_lines = 0
    continuation: list[dict[str, Any]] = []
    file_meta: list[dict[str, Any]] = []

    def footer(cont: list[dict[str, Any]], done: int) -> str:
        if not cont:
            return f"(Complete: all {n} file(s) processed.)\n"
        return f"(Partial: {done} of {n} file(s) processed. Continue with files={json.dumps(cont, ensure_ascii=False)})\n"

    def rest(i: int) -> list[dict[str, Any]]:
        return [request_json(f) for f in files[i:]]

    def size(s: str) -> int:
        return len(s.encode("utf-8"))

    scanned = 0  # bytes scanned by this call so far, against MAX_SCAN_BYTES (module docstring)
    scan_stopped = False
    for i, item in enumerate(files):
        header = f"=== {item.path} ===\n"
        limit = item.limit or MAX_LIMIT_LINES
        scan_left = MAX_SCAN_BYTES - scanned
        if scan_left <= 0:  # earlier files spent the cap: the next call scans this one afresh
            continuation = rest(i)
            break
        try:
            win = await _window(ctx, item.path, item.offset, limit, max(budget - used, 0), scan_left)
            scanned += win.scanned_bytes
            if win.stopped:
                scan_stopped = True
                if not win.complete and scan_left < MAX_SCAN_BYTES:
                    # Earlier files spent part of the cap: the next call gives this one all of it.
                    continuation = rest(i)
                    break
                if not win.reached or not (win.lines or win.complete):
                    raise _unreachable(item.path, item.offset)
            elif win.total is not None and item.offset > win.total:
                raise InvalidArgument(f"Offset {item.offset} exceeds file length ({win.total} lines)")
        except ToolError as err:
            seg = f"{header}ERROR: {err.message}\n\n"
            if used + size(seg) + size(footer(rest(i + 1), completed + 1)) > budget:
                continuation = rest(i)
                break
            segments.append(seg)
            used += size(seg)
            completed += 1
            failed += 1
            file_meta.append(
                {"path": item.path, "success": False, "error": err.message, "error_kind": err.to_kind()}
            )
            continue
        total = win.total
        # Only the kept lines are rendered: keeping stopped where the budget ran out, so a window
        # that was cut short can never pass the "fits whole" check below.
        rendered = [render_line(item.offset + k + 1, t, win.cut[k]) for k, t in enumerate(win.lines)]
        sizes = [size(r) for r in rendered]
        if total is None:  # the scan stopped at the cap (module docstring)
            stop = item.offset + len(rendered)
            more_note = _scan_note(win, stop)
        else:
            stop = min(total, item.offset + limit)
            more_note = "" if stop >= total else f"... (more lines available; continue with offset={stop})\n"
            if item.offset == total:
                more_note = f"(end of file: offset {item.offset} equals file length)\n"
        full = size(header) + sum(sizes) + size(more_note) + 1
        if used + full + size(footer(rest(i + 1), completed + 1)) <= budget:
            segments.append(header + "".join(rendered) + more_note + "\n")
            used += full
            completed += 1
            successful += 1
            returned_lines += len(rendered)
            file_meta.append(
                {
                    "path": item.path,
                    "success": True,
                    "returned_lines": len(rendered),
                    "total_lines": total,
                    **({"scan": _scan_meta(win)} if win.stopped else {}),
                }
            )
            continue

        # Partial: the largest prefix of lines that fits together with the continuation footer.
        def cont_after(k: int, item: FileArgs = item, i: int = i, limit: int = limit) -> list[dict[str, Any]]:
            return [{"path": item.path, "offset": item.offset + k, "limit": limit - k}, *rest(i + 1)]

        prefix = [0]
        for s in sizes:
            prefix.append(prefix[-1] + s)
        lo, hi = 0, len(rendered)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if used + size(header) + prefix[mid] + 1 + size(footer(cont_after(mid), completed)) <= budget:
                lo = mid
            else:
                hi = mid - 1
        k = lo
        if k == 0:
            if not segments:
                raise InvalidArgument(
                    f"max_output_bytes={budget} is too small to return one line of {item.path} plus the continuation"
                )
            continuation = rest(i)
            break
        segments.append(header + "".join(rendered[:k]) + "\n")
        used += size(header) + prefix[k] + 1
        returned_lines += k
        successful += 1
        file_meta.append(
            {
                "path": item.path,
                "success": True,
                "returned_lines": k,
                "total_lines": total,
                "partial": True,
                **({"scan": _scan_meta(win)} if win.stopped else {}),
            }
        )
        continuation = cont_after(k)
        break

    truncated = bool(continuation)
    segments.append(footer(continuation, completed))
    output = "".join(segments)
    if successful == 0 and not truncated:
        status = "failed"
    elif truncated:
        status = "partial"
    elif failed:
        status = "partial_failure"
    else:
        status = "complete"
    meta: dict[str, Any] = {
        "source_anchors": [f["path"] for f in file_meta if f["success"]],
        "files": file_meta,
        "batch": {
            "status": status,
            "requested_files": n,
            "successful_files": successful,
            "failed_files": failed,
            "completed_files": completed,
            "returned_lines": returned_lines,
            "max_output_bytes": budget,
            "output_bytes": size(output),
            "truncated": truncated,
            "continuation": continuation,
        },
    }
    if scan_stopped or (continuation and scanned >= MAX_SCAN_BYTES):
        meta["scan"] = {"truncated": True, "scanned_bytes": scanned, "max_scan_bytes": MAX_SCAN_BYTES}
    if status == "failed":
        return ToolResult(
            name="read",
            output=output,
            exit_code=1,
            metadata=meta,
            error_kind={"type": "partial_failure", "failed": failed, "total": n},
        )
    return ToolResult.success("read", output, meta)


TOOL = ToolSpec(
    name="read",
    description=(
        "Read a workspace file as numbered lines (file_path, offset, limit ≤ 2000), or several files in one "
        "bounded response (files=[{path, offset?, limit?}], max_output_bytes). Follow the continuation in the "
        "footer to read more."
    ),
    params=DeferredParams("tools.read_params:Params", quick_params),
    run=run,
    capabilities=capabilities,
    requires=frozenset({"read"}),
    subject=subject,
    subject_kind="path",
    path_fields=("file_path",),
    examples=(
        {"file_path": "src/main.py"},
        {"files": [{"path": "a.py"}, {"path": "b.py", "offset": 100, "limit": 50}]},
    ),
)
