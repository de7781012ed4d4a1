"""The pure-Python grep engine: works over the Workspace protocol alone (no local root needed).

It walks with ``ignore.walk`` (ripgrep's filters), reads each file through ``open_file`` (the first
block decides binary, text over ``MAX_READ_BYTES`` is refused: ``_protocol_reader``), and finds
matching lines with one whole-text search per matching line — RE2 over the UTF-8 text
(``linear_regex``: linear time, so the deadline holds for any pattern), Python ``re`` only for the
few patterns RE2 cannot spell exactly; the scan checks the deadline between searches too: ``^``/``$`` are line anchors
(``re.MULTILINE``), and a match that spans a line end (``\\s``, ``[^x]`` or ``(?s).`` can cross one
in whole-text mode) is re-checked line by line, so the result is exactly "lines the pattern
matches", ripgrep's definition. Decoding follows ripgrep: a UTF-8 BOM is dropped, a UTF-16 BOM
means UTF-16, invalid UTF-8 becomes U+FFFD; a NUL byte anywhere marks the file binary (skipped).
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Callable, Iterator
from typing import Any

from kernel.workspace import MAX_READ_BYTES, Workspace, check_read_size
from tools.search.dialect import required_literal
from tools.search.grep import ContentSink, GrepQuery, Guard, Line, ScanResult, context_lines, read_failed
from tools.search.grep_local import HEAD_BYTES, UTF16_BOMS, beneath_of, is_local, read_local, walk_local
from tools.search.ignore import IgnoreRules, WalkReport, walk
from tools.search.linear_regex import compile_linear

UTF8_BOM = b"\xef\xbb\xbf"


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


def split_lines(text: str) -> list[str]:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


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
        matcher: Any = linear if linear is not None else compile_python(q)
        literal = required_literal(q.dialect.python, q.case_sensitive)
        needle = literal.encode("utf-8") if literal else None
        result = ScanResult()
        read = _local_reader(ws) if is_local(ws) else _protocol_reader(ws)
        for path in self._files(ws, q, guard, result):
            guard.check()
            with _one_big_file(guard) if _is_big(ws, path) else contextlib.nullcontext():
                self._scan_file(path, read, matcher, linear is not None, needle, q, guard, sink, result)
        return result

    def _scan_file(
        self,
        path: str,
        read: Callable[[str], bytes | None],
        matcher: Any,
        linear: bool,
        needle: bytes | None,
        q: GrepQuery,
        guard: Guard,
        sink: ContentSink | None,
        result: ScanResult,
    ) -> None:
        try:
            data = read(path)
        except Exception as exc:
            if read_failed(exc):
                result.failed_reads += 1
                return
            raise
        if data is None:
            return  # binary (seen in its first block)
        if needle is not None and needle not in data and data[:2] not in UTF16_BOMS:
            return  # cannot match: skip decoding (a UTF-16 file is checked after decoding)
        text = decode_text(data)
        if text is None:
            return
        hay: Any = text.encode("utf-8", "surrogatepass") if linear else text
        starts = match_line_starts(hay, matcher, guard.check)
        hits = matching_lines(hay, matcher, guard.check) if starts is None else None
        n_hits = len(starts) if starts is not None else len(hits or ())
        if not n_hits:
            return
        result.counts[path] = n_hits
        if sink is not None and sink.wants(path):
            if hits is None:
                hits = line_indexes(hay, starts or [])
            lines: list[Line] = context_lines(split_lines(text), hits, q.context)
            sink.add(path, lines)

    def counts(self, ws: Workspace, q: GrepQuery, guard: Guard) -> ScanResult:
        return self._scan(ws, q, guard, None)

    def content(self, ws: Workspace, q: GrepQuery, sink: ContentSink, guard: Guard) -> ScanResult:
        return self._scan(ws, q, guard, sink)


# A file is matched whole: its bytes, its text (up to 4 bytes a character) and RE2's UTF-8 copy —
# ~6x a 59 MiB file. Concurrent greps (a model's ``batch``, other sessions of a worker) hold one
# such file at a time per process, not one each; the engine is GIL-bound, so this costs no speed.
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


def _protocol_reader(ws: Workspace) -> Callable[[str], bytes | None]:
    """Reads for a non-local workspace (git tree, object store), bounded like ``read_local``: the
    first block decides binary (the rest never read: a 4 GiB blob of zeros costs 64 KiB), and a
    text file over ``MAX_READ_BYTES`` is refused before it is read (a failed read, K-8)."""
    opener = getattr(ws, "open_file", None)

    def read(path: str) -> bytes | None:
        if not callable(opener):
            return ws.read_bytes(path)  # bounded by MAX_READ_BYTES itself
        with opener(path) as fh:
            head = fh.read(HEAD_BYTES)
            if b"\x00" in head and head[:2] not in UTF16_BOMS:
                return None
            if len(head) < HEAD_BYTES:
                return bytes(head)
            check_read_size(path, getattr(fh, "size", 0))
            data = head + fh.read(MAX_READ_BYTES + 1 - len(head))
            check_read_size(path, len(data))
            return bytes(data)

    return read


def _local_reader(ws: Workspace) -> Callable[[str], bytes | None]:
    beneath = beneath_of(ws)
    return lambda path: read_local(beneath, path)
