"""Parse the ``patch`` tool's ``diff`` text into file sections and hunks (pure; no I/O).

Two input formats:

1. **Unified diff**, one or many files, with or without git headers. ``--- /dev/null`` creates,
   ``+++ /dev/null`` deletes, ``rename from``/``rename to`` (git) or differing ``---``/``+++``
   paths rename (see ``apply.py`` for how a differing pair is read). ``a/``/``b/`` prefixes are
   stripped after ``diff --git``, and otherwise when both sides carry them (or the other side is
   ``/dev/null``). Text after a tab in a ``---``/``+++`` line (a timestamp) is ignored; git's
   quoted paths are unquoted. Hunks without file headers belong to the ``file_path`` parameter.
   Hunk header numbers above ``MAX_HUNK_LINE_NUMBER`` are refused (``invalid_argument``). Hunk
   header counts are advisory: the body decides how many lines a hunk has (a blank line in a
   body is an empty context line while the header says lines remain, or when more body follows).
2. **apply_patch envelope** (OpenAI-style): ``*** Begin Patch`` … ``*** End Patch`` with
   ``*** Add File: p`` (``+`` lines), ``*** Delete File: p``, ``*** Update File: p`` (optional
   ``*** Move to: q``) and ``@@ [anchor]`` hunks, ``*** End of File`` pinning a hunk to the end.

At most ``MAX_PATCH_FILES`` file sections: one more fails the parse (``invalid_argument``), so
the permission gate, which asks about every path a patch names, never sees the list.

Every patch line has one trailing ``\\r`` removed, so a diff carried with CRLF line breaks reads
the same as with LF; line endings of the target file are handled in ``apply.py``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from kernel.errors import InvalidArgument, Unsupported

DEV_NULL = "/dev/null"
MAX_DIFF_CHARS = 16 * 1024 * 1024
MAX_PATCH_FILES = 256  # file sections per patch: each is a permission question and an open file
# A file write/edit/patch take (64 MiB) has fewer lines than this; a bigger number is a mistake or
# an attack (int() of a 5,000-digit string raises ValueError; a huge count keeps a hunk open).
MAX_HUNK_LINE_NUMBER = 1 << 31
_HUNK_RE = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@ ?(.*)$")


@dataclass(slots=True)
class Hunk:
    header: str
    lines: list[tuple[str, str]] = field(default_factory=list)  # (tag ' '|'-'|'+', text)
    old_start: int | None = None  # 1-based as written; None when the format has no line numbers
    old_len: int | None = None
    new_len: int | None = None
    old_no_eol: bool = False  # "\ No newline at end of file" after an old-side line
    new_no_eol: bool = False
    anchor: str | None = None  # envelope "@@ text": a line the hunk comes after
    at_eof: bool = False  # envelope "*** End of File"

    @property
    def old_lines(self) -> list[str]:
        return [text for tag, text in self.lines if tag != "+"]

    @property
    def new_lines(self) -> list[str]:
        return [text for tag, text in self.lines if tag != "-"]


@dataclass(slots=True)
class FilePatch:
    """One file section. ``old_path`` None = create; ``new_path`` None = delete."""

    old_path: str | None
    new_path: str | None
    hunks: list[Hunk] = field(default_factory=list)
    has_headers: bool = True  # False: bare hunks for the ``file_path`` parameter
    git_rename: bool = False
    new_mode: int | None = None
    check_delete: bool = True  # unified deletes must remove every line; envelope deletes need not


@dataclass(slots=True)
class ParsedPatch:
    format: str  # "unified" | "envelope"
    files: list[FilePatch]


def parse_patch(text: str) -> ParsedPatch:
    if len(text) > MAX_DIFF_CHARS:
        raise InvalidArgument(f"diff is larger than {MAX_DIFF_CHARS} characters")
    lines = [ln[:-1] if ln.endswith("\r") else ln for ln in text.split("\n")]
    lines = _strip_fences(lines)
    first = next((ln for ln in lines if ln.strip()), "")
    if first.strip() == "*** Begin Patch":
        return ParsedPatch("envelope", _parse_envelope(lines))
    files = _parse_unified(lines)
    if not files:
        raise InvalidArgument(
            "diff contains no file changes (expected unified diff hunks or a *** Begin Patch envelope)"
        )
    return ParsedPatch("unified", files)


def _add_file(files: list[FilePatch], section: FilePatch) -> None:
    if len(files) >= MAX_PATCH_FILES:
        raise InvalidArgument(
            f"the patch has more than {MAX_PATCH_FILES} file sections; split it into several patches"
        )
    files.append(section)


def _strip_fences(lines: list[str]) -> list[str]:
    # Indices, then one slice: trimming a list one blank line at a time is quadratic.
    end = len(lines)
    while end and not lines[end - 1].strip():
        end -= 1
    start = 0
    while start < end and not lines[start].strip():
        start += 1
    lines = lines[start:end]
    if len(lines) >= 2 and lines[0].startswith("```") and lines[-1].strip() == "```":
        lines = lines[1:-1]
    return lines


# ---------------------------------------------------------------- unified


def _parse_unified(lines: list[str]) -> list[FilePatch]:
    files: list[FilePatch] = []
    cur: FilePatch | None = None
    in_git_header = False
    i, n = 0, len(lines)
    while i < n:
        line = lines[i]
        if line.startswith("diff --git "):
            old, new = _git_header_paths(line[len("diff --git ") :])
            cur = FilePatch(old_path=old, new_path=new)
            _add_file(files, cur)
            in_git_header = True
            i += 1
            continue
        if line.startswith("--- ") and i + 1 < n and lines[i + 1].startswith("+++ "):
            old, new = _pair_paths(line[4:], lines[i + 1][4:], git=in_git_header)
            if cur is not None and in_git_header:
                if not cur.git_rename:  # ---/+++ are authoritative, except over rename from/to
                    cur.old_path, cur.new_path = old, new
            else:
                cur = FilePatch(old_path=old, new_path=new)
                _add_file(files, cur)
            in_git_header = False
            i += 2
            continue
        if line.startswith("@@"):
            if cur is None:
                cur = FilePatch(old_path=None, new_path=None, has_headers=False)
                _add_file(files, cur)
            in_git_header = False
            hunk, i = _parse_hunk(lines, i)
            cur.hunks.append(hunk)
            continue
        if line.startswith("GIT binary patch") or (
            line.startswith("Binary files ") and line.endswith(" differ")
        ):
            raise Unsupported("binary patches are not supported; use `write` for binary content")
        if in_git_header and cur is not None:
            _git_extended(cur, line)
        i += 1  # anything else between sections (commit text, index lines) is ignored, as git does
    return files


def _git_extended(cur: FilePatch, line: str) -> None:
    if line.startswith("rename from "):
        cur.old_path = _unquote(line[len("rename from ") :])
        cur.git_rename = True
    elif line.startswith("rename to "):
        cur.new_path = _unquote(line[len("rename to ") :])
        cur.git_rename = True
    elif line.startswith("new file mode "):
        cur.old_path = None
        cur.new_mode = 0o755 if line.strip().endswith("755") else None
    elif line.startswith("deleted file mode "):
        cur.new_path = None
    elif line.startswith(("copy from ", "copy to ")):
        raise Unsupported(
            "git copy patches are not supported; create the copy with an explicit --- /dev/null section"
        )


def _parse_hunk(lines: list[str], i: int) -> tuple[Hunk, int]:
    header = lines[i]
    m = _HUNK_RE.match(header)
    hunk = Hunk(header=header)
    if m:
        old_start, old_len, _new_start, new_len = (_line_number(header, g) for g in m.groups()[:4])
        hunk.old_start = old_start
        hunk.old_len = old_len if old_len is not None else 1
        hunk.new_len = new_len if new_len is not None else 1
    elif header.strip() != "@@" and not header.startswith("@@ @@"):
        raise InvalidArgument(f"malformed hunk header: {header!r} (expected '@@ -a,b +c,d @@')")
    old_seen = new_seen = 0
    i += 1
    n = len(lines)
    while i < n:
        line = lines[i]
        counts_open = hunk.old_len is not None and (old_seen < hunk.old_len or new_seen < (hunk.new_len or 0))
        if line.startswith("@@") or line.startswith("diff --git "):
            break
        if line.startswith("--- ") and not counts_open and i + 1 < n and lines[i + 1].startswith("+++ "):
            break
        if line.startswith("\\"):
            prev = hunk.lines[-1][0] if hunk.lines else " "
            if prev in " -":
                hunk.old_no_eol = True
            if prev in " +":
                hunk.new_no_eol = True
            i += 1
            continue
        if line == "":
            if counts_open:
                hunk.lines.append((" ", ""))
                old_seen += 1
                new_seen += 1
                i += 1
                continue
            # Every blank of a run gets the same answer (does body follow the run?): look once, so
            # a patch of mostly blank lines parses in linear time.
            end = _blank_run_end(lines, i)
            if not _body_at(lines, end):
                break
            hunk.lines.extend([(" ", "")] * (end - i))
            old_seen += end - i
            new_seen += end - i
            i = end
            continue
        tag = line[0]
        if tag not in " -+":
            break
        hunk.lines.append((tag, line[1:]))
        old_seen += tag != "+"
        new_seen += tag != "-"
        i += 1
    if not hunk.lines:
        raise InvalidArgument(f"hunk {header!r} has no lines")
    return hunk, i


def _line_number(header: str, digits: str | None) -> int | None:
    """A hunk header number, refused (``invalid_argument``) past ``MAX_HUNK_LINE_NUMBER``."""
    if digits is None:
        return None
    significant = digits.lstrip("0")
    if len(significant) > len(str(MAX_HUNK_LINE_NUMBER)) or int(digits) > MAX_HUNK_LINE_NUMBER:
        raise InvalidArgument(
            f"hunk header {header[:80]!r}: line numbers and counts must be at most {MAX_HUNK_LINE_NUMBER}"
        )
    return int(digits)


def _blank_run_end(lines: list[str], j: int) -> int:
    """The first index at or after ``j`` whose line is not empty."""
    while j < len(lines) and lines[j] == "":
        j += 1
    return j


def _body_at(lines: list[str], j: int) -> bool:
    """Line ``j`` continues a hunk body (and does not start a new ``---``/``+++`` section)."""
    return (
        j < len(lines)
        and lines[j][:1] in (" ", "-", "+", "\\")
        and not (lines[j].startswith("--- ") and j + 1 < len(lines) and lines[j + 1].startswith("+++ "))
    )


def _git_header_paths(rest: str) -> tuple[str | None, str | None]:
    if rest.startswith('"'):
        end = rest.find('"', 1)
        while end > 0 and rest[end - 1] == "\\":
            end = rest.find('"', end + 1)
        old_raw, new_raw = rest[: end + 1], rest[end + 1 :].strip()
    else:
        idx = rest.find(" b/")
        if idx < 0:
            parts = rest.split(" ", 1)
            old_raw, new_raw = parts[0], parts[1] if len(parts) > 1 else parts[0]
        else:
            old_raw, new_raw = rest[:idx], rest[idx + 1 :]
    return _strip_prefix(_unquote(old_raw), "a/"), _strip_prefix(_unquote(new_raw), "b/")


def _pair_paths(old_raw: str, new_raw: str, *, git: bool) -> tuple[str | None, str | None]:
    old = _header_path(old_raw)
    new = _header_path(new_raw)
    old_ok = old is None or old.startswith("a/")
    new_ok = new is None or new.startswith("b/")
    if git or (old_ok and new_ok and not (old is None and new is None)):
        old = _strip_prefix(old, "a/")
        new = _strip_prefix(new, "b/")
    return old, new


def _header_path(raw: str) -> str | None:
    raw = raw.split("\t", 1)[0].rstrip()
    path = _unquote(raw)
    return None if path == DEV_NULL else path


def _strip_prefix(path: str | None, prefix: str) -> str | None:
    if path is None or path == DEV_NULL:
        return None
    return path[len(prefix) :] if path.startswith(prefix) else path


def _unquote(raw: str) -> str:
    raw = raw.strip()
    if len(raw) >= 2 and raw[0] == '"' and raw[-1] == '"':
        body = raw[1:-1]
        try:
            return (
                body.encode("latin-1", "backslashreplace")
                .decode("unicode_escape")
                .encode("latin-1")
                .decode("utf-8")
            )
        except (UnicodeError, ValueError):
            return body
    return raw


# ---------------------------------------------------------------- envelope


def _parse_envelope(lines: list[str]) -> list[FilePatch]:
    files: list[FilePatch] = []
    cur: FilePatch | None = None
    hunk: Hunk | None = None
    i = next(k for k, ln in enumerate(lines) if ln.strip()) + 1
    for lineno in range(i, len(lines)):
        line = lines[lineno]
        stripped = line.strip()
        if stripped == "*** End Patch":
            break  # a missing '*** End Patch' is tolerated: models often drop it
        if line.startswith("*** Add File: "):
            cur = FilePatch(old_path=None, new_path=line[len("*** Add File: ") :].strip())
            hunk = Hunk(header="*** Add File", old_start=0, old_len=0)
            cur.hunks.append(hunk)
            _add_file(files, cur)
        elif line.startswith("*** Delete File: "):
            cur = FilePatch(
                old_path=line[len("*** Delete File: ") :].strip(), new_path=None, check_delete=False
            )
            _add_file(files, cur)
            hunk = None
        elif line.startswith("*** Update File: "):
            path = line[len("*** Update File: ") :].strip()
            cur = FilePatch(old_path=path, new_path=path)
            _add_file(files, cur)
            hunk = None
        elif line.startswith("*** Move to: "):
            if cur is None or cur.old_path is None or cur.hunks:
                raise InvalidArgument(
                    f"envelope line {lineno + 1}: '*** Move to:' must follow '*** Update File:'"
                )
            cur.new_path = line[len("*** Move to: ") :].strip()
        elif stripped == "*** End of File":
            if hunk is None:
                raise InvalidArgument(f"envelope line {lineno + 1}: '*** End of File' outside a hunk")
            hunk.at_eof = True
        elif line.startswith("@@"):
            if cur is None or cur.old_path is None or cur.new_path is None:
                raise InvalidArgument(
                    f"envelope line {lineno + 1}: '@@' outside an '*** Update File:' section"
                )
            anchor = line[2:].strip()
            hunk = Hunk(header=line, anchor=anchor or None)
            cur.hunks.append(hunk)
        elif cur is not None and cur.old_path is None:  # Add File body
            if not line.startswith("+"):
                raise InvalidArgument(
                    f"envelope line {lineno + 1}: lines of an '*** Add File:' section must start with '+'"
                )
            assert hunk is not None
            hunk.lines.append(("+", line[1:]))
        elif cur is not None and cur.new_path is not None and (line[:1] in (" ", "-", "+") or line == ""):
            if hunk is None:  # the first hunk may omit its '@@' line
                hunk = Hunk(header="@@")
                cur.hunks.append(hunk)
            hunk.lines.append((line[0], line[1:]) if line else (" ", ""))
        elif stripped:
            raise InvalidArgument(f"envelope line {lineno + 1}: unexpected line {line[:120]!r}")
    for f in files:
        for h in f.hunks:
            # Blank lines before the next section are separators, not empty context lines.
            while len(h.lines) > 1 and h.lines[-1] == (" ", "") and h.header != "*** Add File":
                h.lines.pop()
            if h.header != "*** Add File" and not h.lines:
                raise InvalidArgument(f"envelope: empty hunk {h.header!r} in {f.old_path}")
    if not files:
        raise InvalidArgument("envelope contains no '*** Add/Update/Delete File:' section")
    return files
