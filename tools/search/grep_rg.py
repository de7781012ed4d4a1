"""The ripgrep grep engine: ``rg`` on a local workspace root, output bounded as it is read.

ripgrep runs with ``cwd`` = the workspace root and relative paths, ``--no-config`` and the flags
that make its file selection equal to ``ignore.py``'s (``--no-require-git --no-ignore-global
--no-ignore-exclude``, ``--no-ignore-parent`` at the root, ``-g !.git -g !.a3s``). Counting modes
use ``--count --null`` (ripgrep then drops any file holding a NUL byte); content uses ``--json``,
whose ``end`` record names binary files so they are dropped too. ``include`` becomes a ``-g``
override and its results are re-checked against the ignore rules, because ripgrep lets an override
whitelist ignored and hidden files. The process runs in its own process group and is killed on
timeout, cancellation, or when its output passes ``MAX_RG_OUTPUT_BYTES`` (then ``truncated``).
"""

from __future__ import annotations

import base64
import json
import os
import selectors
import signal
import subprocess
from collections.abc import Callable
from typing import Any

from kernel.errors import InvalidArgument, Transport
from kernel.workspace import Workspace
from tools.search.grep import ContentSink, GrepQuery, Guard, Line, ScanResult, filter_result

MAX_RG_OUTPUT_BYTES = 512 * 1024 * 1024
MAX_STDERR_BYTES = 64 * 1024
READ_CHUNK_BYTES = 256 * 1024
POLL_INTERVAL_S = 0.05
_GLOB_SPECIAL = set("\\*?[]{}!,")


def glob_escape(text: str) -> str:
    return "".join("\\" + c if c in _GLOB_SPECIAL else c for c in text)


class RipgrepEngine:
    name = "rg"

    def __init__(self, binary: str, *, read_parents: bool) -> None:
        self.binary = binary
        self.read_parents = read_parents

    def argv(self, q: GrepQuery, extra: list[str]) -> list[str]:
        args = [
            self.binary,
            "--no-config",
            "--no-require-git",
            "--no-ignore-global",
            "--no-ignore-exclude",
            "--ignore-case" if not q.case_sensitive else "--case-sensitive",
        ]
        if not self.read_parents:
            args.append("--no-ignore-parent")
        if q.include is not None:
            src = q.include.source
            if "/" in src.rstrip("/") and q.base:
                src = "/" + glob_escape(q.base) + "/" + src.lstrip("/")
            args += ["-g", src]
        args += ["-g", "!.git", "-g", "!.a3s", *extra, "--regexp", q.dialect.rust, "--", q.base or "."]
        return args

    # -- counting modes -----------------------------------------------------------------------

    def counts(self, ws: Workspace, q: GrepQuery, guard: Guard) -> ScanResult:
        result = ScanResult()
        keep = filter_result(ws, q, None)

        def on_line(line: bytes) -> None:
            path_b, _, count_b = line.rpartition(b"\x00")
            if not path_b:
                return
            path = _clean(os.fsdecode(path_b))
            if keep(path):
                result.counts[path] = int(count_b)

        self._run(ws, self.argv(q, ["--count", "--null"]), guard, on_line, result)
        return result

    # -- content ------------------------------------------------------------------------------

    def content(self, ws: Workspace, q: GrepQuery, sink: ContentSink, guard: Guard) -> ScanResult:
        result = ScanResult()
        keep = filter_result(ws, q, None)
        state: dict[str, Any] = {"path": None, "skip": True, "lines": []}

        def on_line(line: bytes) -> None:
            if line.startswith(b'{"type":"match"') or line.startswith(b'{"type":"context"'):
                if state["skip"]:
                    return
                data = json.loads(line)["data"]
                lines: list[Line] = state["lines"]
                is_match = line[9] == 0x6D  # b'{"type":"m…'
                lines.append((data["line_number"], is_match, _text(data["lines"])))
                return
            if line.startswith(b'{"type":"begin"'):
                path = _clean(_text(json.loads(line)["data"]["path"], raw_path=True))
                ok = keep(path)
                state["path"] = path if ok else None
                state["skip"] = not ok or not sink.wants(path)
                state["lines"] = []
                return
            if line.startswith(b'{"type":"end"'):
                path = state["path"]
                if path is None:
                    return
                data = json.loads(line)["data"]
                if data.get("binary_offset") is not None:
                    return
                matched = int(data["stats"]["matched_lines"])
                if matched:
                    result.counts[path] = matched
                    if not state["skip"]:
                        sink.add(path, state["lines"])
                state["path"] = None
                state["lines"] = []

        extra = ["--json"] + (["--context", str(q.context)] if q.context else [])
        self._run(ws, self.argv(q, extra), guard, on_line, result)
        return result

    # -- process ------------------------------------------------------------------------------

    def _run(
        self,
        ws: Workspace,
        argv: list[str],
        guard: Guard,
        on_line: Callable[[bytes], None],
        result: ScanResult,
    ) -> None:
        assert ws.root is not None
        guard.check()
        try:
            proc = subprocess.Popen(
                argv,
                cwd=ws.root,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                env={"PATH": os.environ.get("PATH", ""), "LC_ALL": "C.UTF-8"},
            )
        except OSError as exc:
            raise Transport(f"could not start ripgrep: {exc}", op="search.grep") from exc
        assert proc.stdout is not None and proc.stderr is not None
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ, "out")
        sel.register(proc.stderr, selectors.EVENT_READ, "err")
        out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
        pending = b""
        stderr = bytearray()
        read_total = 0
        open_streams = 2
        try:
            while open_streams:
                if guard.stop:
                    _kill(proc)
                    guard.check()
                for key, _ in sel.select(POLL_INTERVAL_S):
                    fd = out_fd if key.data == "out" else err_fd
                    chunk = os.read(fd, READ_CHUNK_BYTES)
                    if not chunk:
                        sel.unregister(key.fileobj)
                        open_streams -= 1
                        continue
                    if key.data == "err":
                        if len(stderr) < MAX_STDERR_BYTES:
                            stderr += chunk
                        continue
                    read_total += len(chunk)
                    if read_total > MAX_RG_OUTPUT_BYTES:
                        result.truncated = True
                        _kill(proc)
                        open_streams = 0
                        break
                    pending += chunk
                    if b"\n" not in chunk:
                        continue
                    *lines, pending = pending.split(b"\n")
                    for line in lines:
                        on_line(line)
            if pending and not result.truncated:
                on_line(pending)
        finally:
            sel.close()
            if proc.poll() is None and (result.truncated or guard.stop):
                _kill(proc)
            code = proc.wait()
            proc.stdout.close()
            proc.stderr.close()
        guard.check()
        err = stderr.decode("utf-8", "replace")
        if code == 2 and (
            "regex parse error" in err or "error parsing" in err or "not allowed in a regex" in err
        ):
            raise InvalidArgument(f"invalid regex: {err.strip()}")
        if code not in (0, 1, 2) and not result.truncated:
            raise Transport(f"ripgrep failed with exit code {code}: {err.strip()[:500]}", op="search.grep")
        result.failed_reads += sum(
            1 for ln in err.splitlines() if "os error" in ln or "Permission denied" in ln
        )


def _kill(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _clean(path: str) -> str:
    return path[2:] if path.startswith("./") else path


def _text(obj: dict[str, Any], raw_path: bool = False) -> str:
    """ripgrep's ``{"text": …}`` or ``{"bytes": base64}``; line text loses its line end."""
    if "text" in obj:
        text = obj["text"]
    else:
        raw = base64.b64decode(obj["bytes"])
        text = os.fsdecode(raw) if raw_path else raw.decode("utf-8", "replace")
    if raw_path:
        return text
    if text.endswith("\n"):
        text = text[:-1]
    if text.endswith("\r"):
        text = text[:-1]
    return text
