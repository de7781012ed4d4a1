"""The pure-Python grep engine: works over the Workspace protocol alone (no local root needed).

It walks with ``ignore.walk`` (ripgrep's filters), reads each file block by block through
``open_file`` (the first block decides binary, text over ``MAX_READ_BYTES`` is refused:
``_protocol_reader``), and matches it in runs of whole lines of about 1 MiB (``grep_stream``), so a
grep holds a few MiB whatever the file's size (one line is still matched whole). In each run it
finds matching lines with one whole-text search per matching line — RE2 over the UTF-8 text
(``linear_regex``: linear time, so the deadline holds for any pattern), Python ``re`` only for the
few patterns RE2 cannot spell exactly; the scan checks the deadline between searches too: ``^``/``$``
are line anchors (``re.MULTILINE``), and a match that spans a line end (``\\s``, ``[^x]`` or ``(?s).``
can cross one in whole-text mode) is re-checked line by line, so the result is exactly "lines the
pattern matches", ripgrep's definition — and the same for any cut of the file into runs. Context
lines come from ``grep_window`` across runs. Decoding follows ripgrep: a UTF-8 BOM is dropped, a
UTF-16 BOM means UTF-16, invalid UTF-8 becomes U+FFFD; a NUL byte anywhere marks the file binary
(skipped).
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import Any

from kernel.errors import InvalidArgument
from kernel.workspace import MAX_READ_BYTES, Workspace, check_read_size
from tools.search import grep_stream
from tools.search.dialect import required_literal
from tools.search.grep import ContentSink, GrepQuery, Guard, ScanResult, read_failed
from tools.search.grep_local import HEAD_BYTES, beneath_of, is_local, local_blocks, walk_local
from tools.search.grep_stream import UTF8_BOM, TextChunks, line_local
from tools.search.grep_window import LineWindow
from tools.search.ignore import IgnoreRules, WalkReport, walk
from tools.search.linear_regex import compile_linear


def decode_text(data: bytes) -> str | None:
    """The searchable text of a file, or None when it is binary."""
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        text = data.decode("utf-16", "replace")
        return None if "\x00" in text else text
    if b"\x00" in data:
        return None
    if data.startswith(UTF8_BOM):
        data = data[3:]
    return data.decode("utf-8", "replace")


def compile_python(q: GrepQuery) -> re.Pattern[str]:
    flags = re.MULTILINE | (0 if q.case_sensitive else re.IGNORECASE)
    return re.compile(q.dialect.python, flags)


CHECK_EVERY = 256  # searches between deadline checks inside one file


def matching_lines(text: Any, rx: Any, check: Callable[[], None] | None = None) -> list[int]:
    """0-based indexes of the lines of ``text`` (str, or UTF-8 bytes for RE2) that ``rx`` matches."""
    nl: Any = "\n" if isinstance(text, str) else b"\n"
    out: list[int] = []
    n = len(text)
    ends_open = n == 0 or text[-1:] == nl  # position n then starts no line
    pos = 0
    line = 0
    counted = 0  # text[:counted] has been counted into `line`
    search = rx.search
    count = text.count
    find = text.find
    tick = 0
    while pos <= n:
        tick += 1
        if check is not None and tick % CHECK_EVERY == 0:
            check()
        m = search(text, pos)
        if m is None:
            break
        s, e = m.span()
        if s == n and ends_open:
            break
        line += count(nl, counted, s)
        counted = s
        spanned = count(nl, s, e)
        if not spanned:
            out.append(line)
            nxt = find(nl, s)
            if nxt < 0:
                break
            line += 1
            counted = pos = nxt + 1
            continue
        # The match crossed a line end: check each spanned line on its own.
        start = text.rfind(nl, 0, s) + 1
        for k in range(spanned + 1):
            stop = find(nl, start)
            stop = n if stop < 0 else stop
            if start == n and ends_open:
                break
            if search(text[start:stop]) is not None:
                out.append(line + k)
            start = stop + 1
        line += spanned + 1
        counted = pos = start
        if start > n:
            break
    return out


def match_line_starts(text: Any, rx: Any, check: Callable[[], None] | None = None) -> list[int] | None:
    """Offsets of the first match on each matching line (ascending), or None when a match crossed a
    line end (then only ``matching_lines`` gives the exact answer).

    Same searches as ``matching_lines`` (each from the start of the line after the last hit), minus
    the line counting: callers that need line numbers count newlines only for the files they show.
    """
    sep: Any = "\n" if isinstance(text, str) else b"\n"
    out: list[int] = []
    n = len(text)
    ends_open = n == 0 or text[-1:] == sep
    search = rx.search
    find = text.find
    pos = 0
    tick = 0
    while pos <= n:
        tick += 1
        if check is not None and tick % CHECK_EVERY == 0:
            check()
        m = search(text, pos)
        if m is None:
            break
        s, e = m.span()
        if s == n and ends_open:
            break
        nl = find(sep, s)
        if nl < 0:
            nl = n
        if e > nl:
            return None
        out.append(s)
        pos = nl + 1
    return out


def line_indexes(text: Any, starts: list[int]) -> list[int]:
    """0-based line index of each offset in ``starts`` (ascending)."""
    nl: Any = "\n" if isinstance(text, str) else b"\n"
    out: list[int] = []
    count = text.count
    line = 0
    prev = 0
    for s in starts:
        line += count(nl, prev, s)
        prev = s
        out.append(line)
    return out


class PythonEngine:
    name = "python"

    def _files(self, ws: Workspace, q: GrepQuery, guard: Guard, result: ScanResult) -> list[str]:
        if q.base_is_file:
            return [q.base]
        rules = IgnoreRules(ws)
        if is_local(ws):
            found = walk_local(ws, q.base, rules, lambda: guard.stop)
            paths = [p for p in found if q.included(p)] if q.include is not None else found
        else:
            report = WalkReport()
            paths = [
                e.path for e in walk(ws, q.base, rules, lambda: guard.stop, report) if q.included(e.path)
            ]
            result.truncated = result.truncated or report.truncated
        guard.check()
        paths.sort()
        return paths

    def _scan(self, ws: Workspace, q: GrepQuery, guard: Guard, sink: ContentSink | None) -> ScanResult:
        linear = compile_linear(q.dialect.rust, q.case_sensitive)
        if linear is None:
            # Python ``re`` backtracks holding the GIL, and no deadline stops one match: on a line
            # of 40 'a's, (?:[a\W]+)+b would stop every session of the process for days.
            raise InvalidArgument(
                f"regex {q.dialect.source!r} has no linear-time form here (a \\W or \\S inside a negated "
                "class, a repetition count over 1000, or a pattern too large for RE2), and this "
                "workspace is searched by the Python engine, which could backtrack without bound; "
                "rewrite it without those (e.g. x{2000} as (?:x{1000}){2})",
                reason="regex_not_linear",
            )
        matcher: Any = linear
        literal = required_literal(q.dialect.python, q.case_sensitive)
        needle = literal.encode("utf-8") if literal else None
        find = _Find(matcher, linear is not None, needle, not line_local(q.dialect.python))
        result = ScanResult()
        read = _local_reader(ws) if is_local(ws) else _protocol_reader(ws)
        for path in self._files(ws, q, guard, result):
            guard.check()
            with _one_big_file(guard) if _is_big(ws, path) else contextlib.nullcontext():
                self._scan_file(path, read, find, q, guard, sink, result)
        return result

    def _scan_file(
        self,
        path: str,
        read: Callable[[str], Generator[bytes]],
        find: _Find,
        q: GrepQuery,
        guard: Guard,
        sink: ContentSink | None,
        result: ScanResult,
    ) -> None:
        window = LineWindow(q.context, path, sink.budget) if sink is not None and sink.wants(path) else None
        try:
            with contextlib.closing(read(path)) as blocks:
                text = TextChunks(blocks, find.linear, find.needle, find.whole)
                n_hits = _search_runs(text, find.matcher, guard, window)
        except Exception as exc:
            if read_failed(exc):
                result.failed_reads += 1
                return
            raise
        if text.binary or not n_hits or not text.file_may_match():
            return  # a binary file (a NUL in some block) shows nothing, whatever was found before
        result.counts[path] = n_hits
        if sink is not None and window is not None:
            sink.add(path, window.lines)

    def counts(self, ws: Workspace, q: GrepQuery, guard: Guard) -> ScanResult:
        return self._scan(ws, q, guard, None)

    def content(self, ws: Workspace, q: GrepQuery, sink: ContentSink, guard: Guard) -> ScanResult:
        return self._scan(ws, q, guard, sink)


@dataclass(frozen=True, slots=True)
class _Find:
    """What one query searches with."""

    matcher: Any
    linear: bool  # RE2 over UTF-8 bytes; else Python ``re`` over str
    needle: bytes | None  # the required literal's bytes (a run without them cannot match)
    whole: bool  # the pattern is not line-local: the file is matched as one run


def _search_runs(text: TextChunks, matcher: Any, guard: Guard, window: LineWindow | None) -> int:
    """Matching lines of the file, run by run; ``window`` (when the file's lines can show) is fed
    every run until its output budget is full, with the run's matching lines numbered file-wide."""
    n_hits = 0
    base = 0
    for run in text:
        guard.check()
        hay = run.hay
        starts: list[int] | None = []
        hits: list[int] | None = None
        if run.may_match:
            starts = match_line_starts(hay, matcher, guard.check)
            hits = matching_lines(hay, matcher, guard.check) if starts is None else None
            n_hits += len(starts) if starts is not None else len(hits or ())
        if window is not None and not window.full:
            local = hits if hits is not None else line_indexes(hay, starts or [])
            base += window.feed(base, hay, [base + h for h in local])
    return n_hits


# A file is matched in runs of lines (``grep_stream``), but one line is matched whole — its bytes, its
# text (up to 4 bytes a character) and RE2's UTF-8 copy, ~6x a line of up to 64 MiB — and so is a
# file under a pattern that is not line-local. Concurrent greps (a model's ``batch``, other sessions
# of a worker) hold one such file at a time per process; the engine is GIL-bound: no speed is lost.
BIG_FILE_BYTES = 4 * 1024 * 1024
_BIG_FILE_LOCK = threading.Lock()
_LOCK_POLL_S = 0.05


def _is_big(ws: Workspace, path: str) -> bool:
    """Whether ``path`` is over ``BIG_FILE_BYTES`` now (a file that grows after this is still cut at
    ``MAX_READ_BYTES`` by its read); unknown sizes count as small, the read then says what is wrong."""
    try:
        return ws.stat(path).size > BIG_FILE_BYTES
    except Exception:
        return False


@contextlib.contextmanager
def _one_big_file(guard: Guard) -> Iterator[None]:
    """Hold the process's big-file slot, waiting no longer than the call's deadline or cancel."""
    while not _BIG_FILE_LOCK.acquire(timeout=_LOCK_POLL_S):
        guard.check()
    try:
        yield
    finally:
        _BIG_FILE_LOCK.release()


def _protocol_reader(ws: Workspace) -> Callable[[str], Generator[bytes]]:
    """Reads for a non-local workspace (git tree, object store), bounded like ``local_blocks``: the
    first block decides binary (the rest never read: a 4 GiB blob of zeros costs 64 KiB), a text
    file over ``MAX_READ_BYTES`` is refused before it is read on (a failed read, K-8), and the rest
    comes ``BLOCK_BYTES`` at a time."""
    opener = getattr(ws, "open_file", None)

    def read(path: str) -> Generator[bytes]:
        if not callable(opener):
            yield ws.read_bytes(path)  # bounded by MAX_READ_BYTES itself, but held whole
            return
        with opener(path) as fh:
            head = bytes(fh.read(HEAD_BYTES))
            yield head
            if len(head) < HEAD_BYTES:
                return
            check_read_size(path, getattr(fh, "size", 0))
            total = len(head)
            while total <= MAX_READ_BYTES:
                block = bytes(fh.read(min(grep_stream.BLOCK_BYTES, MAX_READ_BYTES + 1 - total)))
                if not block:
                    break
                total += len(block)
                yield block
            check_read_size(path, total)

    return read


def _local_reader(ws: Workspace) -> Callable[[str], Generator[bytes]]:
    beneath = beneath_of(ws)
    return lambda path: local_blocks(beneath, path, grep_stream.BLOCK_BYTES)
