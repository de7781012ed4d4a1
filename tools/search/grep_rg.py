"""The ripgrep grep engine: ``rg`` on a local workspace root, output bounded as it is read.

ripgrep runs with ``cwd`` = the workspace root and relative paths, ``--no-config`` and the flags
that make its file selection equal to ``ignore.py``'s (``--no-require-git --no-ignore-global
--no-ignore-exclude``, ``--no-ignore-parent`` at the root, ``-g !.git -g !.a3s``). Counting modes
use ``--count --null`` (ripgrep then drops any file holding a NUL byte). Content uses the plain
``--heading --null`` format (a quarter of ``--json``'s bytes), parsed per file block: totals from
the block bytes, text only for the blocks the collector can still show, and a block ending in
ripgrep's binary-file warning is dropped as ``--count`` drops it. ``include`` becomes a ``-g``
override and its results are re-checked against the ignore rules, because ripgrep lets an override
whitelist ignored and hidden files. The process runs in its own process group and is killed on
timeout, cancellation, or when its output passes ``MAX_RG_OUTPUT_BYTES`` (then ``truncated``); it is
started through ``tools._proc.spawn``, so it also dies with this process.
"""

from __future__ import annotations

import os
import re
import resource
import selectors
import signal
from collections.abc import Callable

from kernel.errors import BudgetExhausted, InvalidArgument, Transport
from kernel.workspace import Workspace
from tools._proc import spawn
from tools.search.grep import ContentSink, GrepQuery, Guard, Line, ScanResult, filter_result

MAX_RG_OUTPUT_BYTES = 512 * 1024 * 1024
MAX_STDERR_BYTES = 64 * 1024
# ripgrep's data segment (heap; file mappings do not count): generous for any real ignore file
# and line, and far below the host's memory.
RG_DATA_LIMIT_BYTES = 1024 * 1024 * 1024
READ_CHUNK_BYTES = 256 * 1024
POLL_INTERVAL_S = 0.05
_MATCH_PREFIX_RE = re.compile(rb"^[0-9]+:", re.MULTILINE)
_LINE_RE = re.compile(rb"^([0-9]+)([:-])(.*)$", re.MULTILINE)
_BINARY_WARNING = b": WARNING: stopped searching binary file"
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
        carry = [b""]  # the start of a path holding a newline (a record is ``path NUL count``)

        def on_line(line: bytes) -> None:
            if b"\x00" not in line:
                carry[0] += line + b"\n"
                return
            path_b, _, count_b = (carry[0] + line).rpartition(b"\x00")
            carry[0] = b""
            if not path_b:
                return
            path = _clean(os.fsdecode(path_b))
            if keep(path):
                result.counts[path] = int(count_b)

        self._run(ws, self.argv(q, ["--count", "--null"]), guard, on_line, result)
        return result

    # -- content ------------------------------------------------------------------------------

    def content(self, ws: Workspace, q: GrepQuery, sink: ContentSink, guard: Guard) -> ScanResult:
        """One scan in ripgrep's plain ``--heading --null`` format, parsed per file block.

        A block is ``path NUL`` then ``N:text`` (match) / ``N-text`` (context) / ``--`` lines, and
        blocks are separated by an empty line (no numbered line is ever empty). Totals come from the
        block bytes alone (line count, or a prefix regex with context); only the blocks of files the
        sink still wants are split into lines and decoded. A block ending in ripgrep's "stopped
        searching binary file" warning is a binary file and is dropped, as ``--count`` drops it.
        """
        result = ScanResult()
        keep = filter_result(ws, q, None)
        count_matches = _MATCH_PREFIX_RE.findall if q.context else None

        def on_block(path_b: bytes, block: bytes) -> None:
            # ``block`` holds the file's lines, each ending in a newline.
            last = block[block.rfind(b"\n", 0, len(block) - 1) + 1 :]
            if last.startswith(path_b + _BINARY_WARNING):
                return
            path = _clean(os.fsdecode(path_b))
            if not keep(path):
                return
            matched = len(count_matches(block)) if count_matches else block.count(b"\n")
            if not matched:
                return
            result.counts[path] = matched
            if sink.wants(path):
                sink.add(path, _block_lines(block))

        blocks = _BlockReader(on_block)
        extra = ["--line-number", "--heading", "--null", "--with-filename", "--color", "never"]
        extra += ["--context", str(q.context)] if q.context else []
        self._run_raw(ws, self.argv(q, extra), guard, blocks.feed, result)
        if not result.truncated:
            blocks.finish()
        return result

    # -- process ------------------------------------------------------------------------------

    def _run(
        self,
        ws: Workspace,
        argv: list[str],
        guard: Guard,
        on_line: Callable[[bytes], None],
        result: ScanResult,
        sep: bytes = b"\n",
    ) -> None:
        """Run ripgrep, handing each stdout record (a line, or ``sep``-terminated) to ``on_line``."""
        pending = [b""]

        def feed(chunk: bytes) -> None:
            data = pending[0] + chunk
            if sep not in chunk:
                pending[0] = data
                return
            *lines, pending[0] = data.split(sep)
            for line in lines:
                on_line(line)

        self._run_raw(ws, argv, guard, feed, result)
        if pending[0] and not result.truncated:
            on_line(pending[0])

    def _run_raw(
        self,
        ws: Workspace,
        argv: list[str],
        guard: Guard,
        on_data: Callable[[bytes], None],
        result: ScanResult,
    ) -> None:
        """Run ripgrep in its own process group, handing stdout chunks to ``on_data`` as they come."""
        assert ws.root is not None
        guard.check()
        try:
            # Tied to this process (tools/_proc.py): a killed worker leaves no ripgrep behind.
            # Capped memory: rg parses each ignore file whole, ~40x its size (a sparse 3 GiB
            # `.gitignore` a sandboxed command made drove rg to 24 GiB and the OOM killer).
            proc = spawn(
                argv,
                cwd=ws.root,
                env={"PATH": os.environ.get("PATH", ""), "LC_ALL": "C.UTF-8"},
                rlimits={resource.RLIMIT_DATA: RG_DATA_LIMIT_BYTES},
            )
        except OSError as exc:
            raise Transport(f"could not start ripgrep: {exc}", op="search.grep") from exc
        assert proc.stdout is not None and proc.stderr is not None
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ, "out")
        sel.register(proc.stderr, selectors.EVENT_READ, "err")
        out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
        stderr = bytearray()
        read_total = 0
        open_streams = 2
        try:
            while open_streams:
                if guard.stop:
                    proc.kill()
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
                        proc.kill()
                        open_streams = 0
                        break
                    on_data(chunk)
        finally:
            sel.close()
            if proc.poll() is None and (result.truncated or guard.stop):
                proc.kill()
            code = proc.wait()
            proc.close()
        guard.check()
        err = stderr.decode("utf-8", "replace")
        if code == 2 and (
            "regex parse error" in err or "error parsing" in err or "not allowed in a regex" in err
        ):
            raise InvalidArgument(f"invalid regex: {err.strip()}")
        if code not in (0, 1, 2) and not result.truncated:
            if code == -signal.SIGABRT or "memory allocation" in err:
                raise BudgetExhausted(
                    f"ripgrep stopped at its memory limit ({RG_DATA_LIMIT_BYTES >> 20} MiB): an ignore "
                    "file (.gitignore, .ignore, .rgignore) or a line many MiB long under the searched "
                    "path needs more; remove it or narrow the path",
                    resource="memory",
                    reason="ripgrep_memory_limit",
                )
            raise Transport(f"ripgrep failed with exit code {code}: {err.strip()[:500]}", op="search.grep")
        result.failed_reads += sum(
            1 for ln in err.splitlines() if "os error" in ln or "Permission denied" in ln
        )


class _BlockReader:
    """Cuts ``--heading --null`` output into (path bytes, block bytes) as chunks arrive.

    The path runs to its NUL (a path may hold newlines, never NUL); the block then runs to the
    first empty line, or to the end of the output for the last block.
    """

    def __init__(self, on_block: Callable[[bytes, bytes], None]) -> None:
        self.on_block = on_block
        self.buf = b""

    def feed(self, chunk: bytes) -> None:
        buf = self.buf + chunk if self.buf else chunk
        pos = 0
        while True:
            nul = buf.find(b"\x00", pos)
            if nul < 0:
                break
            end = buf.find(b"\n\n", nul + 1)
            if end < 0:
                break
            self.on_block(buf[pos:nul], buf[nul + 1 : end + 1])
            pos = end + 2
        self.buf = buf[pos:]

    def finish(self) -> None:
        buf, self.buf = self.buf, b""
        nul = buf.find(b"\x00")
        if nul >= 0:
            block = buf[nul + 1 :]
            self.on_block(buf[:nul], block if block.endswith(b"\n") else block + b"\n")


def _block_lines(block: bytes) -> list[Line]:
    """The numbered lines of one block; text decoded as ripgrep's JSON would give it, CR dropped."""
    out: list[Line] = []
    for num, sep, raw in _LINE_RE.findall(block):
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        out.append((int(num), sep == b":", raw.decode("utf-8", "replace")))
    return out


def _clean(path: str) -> str:
    return path[2:] if path.startswith("./") else path
