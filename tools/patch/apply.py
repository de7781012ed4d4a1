"""Locate every hunk, compute every file's new bytes, and hand one all-or-nothing commit to ``_fileio``.

Placement is strict — no fuzzy matching, ever:

- a unified hunk with line numbers applies at its stated line when its old lines (context and
  removals) match there exactly; otherwise only at the **one** place at or after the previous hunk
  where they match exactly (the offset is reported in metadata). Zero or several such places →
  the patch fails, naming the file, the hunk and the first mismatching line (expected vs found,
  with the differing character's code point);
- a hunk without line numbers (``@@`` alone, or the envelope format) must match exactly once at or
  after the previous hunk; an envelope ``@@ anchor`` first finds the anchor line (exact, or equal
  once surrounding whitespace is stripped — the anchor only locates, it is never changed) and
  then takes the first exact match starting at it; ``*** End of File`` pins the hunk to the end;
  a hunk with no old lines and no numbers appends at the end;
- hunks of one file must be in order and may not overlap;
- a search for a hunk tries only the positions of its rarest old line (an index built once per
  file), and every line compared while placing one patch's hunks — all files together — is
  counted: past ``MAX_COMPARED_LINES`` the patch fails (``invalid_argument``), nothing written.

One patch reads at most ``MAX_PATCH_READ_BYTES`` (64 MiB) of existing files in total — past it the
patch fails (``invalid_argument``), nothing written; whether a create or rename target already
exists is a stat, not a read.

Every hunk of every file is checked before anything is written; then ``_fileio.commit`` writes
all temp files and renames them together (rolling back on a failed rename).

Line endings: file lines are compared without their ending; context lines keep theirs; added
lines get the file's dominant ending (CRLF if it has more CRLF than LF), so CRLF files stay CRLF.
The last line's newline changes only when the hunk that reaches the end says so with
``\\ No newline at end of file`` on one side and not the other. Encoding follows ``_filetext``.

Paths: a section whose ``---`` and ``+++`` paths differ (and no git ``rename`` header) renames
when the old path exists; if only the new path exists it is an ordinary edit of that file (the
common ``file.orig`` → ``file`` form). With one section and a ``file_path`` that is neither header
path, the headers are only labels and ``file_path`` is the file.
"""

from __future__ import annotations

import itertools
from bisect import bisect_left
from dataclasses import dataclass, field
from typing import Any

from kernel.errors import InvalidArgument, NotFound, PermissionDenied, ToolError
from kernel.workspace import normalize_relative
from tools import _fileio
from tools._filetext import decode_bytes, encode_text
from tools._textdiag import describe_difference, explain_miss
from tools.patch.parse import FilePatch, Hunk

Line = tuple[str, str]  # (content without ending, ending: "\n" | "\r\n" | "")
MAX_COMPARED_LINES = 20_000_000  # file lines compared while placing one patch's hunks
MAX_PATCH_READ_BYTES = _fileio.MAX_FILE_BYTES  # existing file content one patch reads, all files


@dataclass(slots=True)
class Planned:
    action: str  # created | modified | deleted | renamed
    path: str  # the file after the patch (the deleted path for a delete)
    from_path: str | None
    changes: list[_fileio.Change]
    before_text: str
    after_text: str
    before_data: bytes | None
    after_data: bytes | None
    hunks: int = 0
    offsets: list[dict[str, Any]] = field(default_factory=list)


class HunkError(Exception):
    def __init__(self, number: int, hunk: Hunk, reason: str) -> None:
        super().__init__(f"hunk {number} ({hunk.header}): {reason}")


def split_lines(text: str) -> list[Line]:
    parts = text.split("\n")
    lines: list[Line] = [(p[:-1], "\r\n") if p.endswith("\r") else (p, "\n") for p in parts[:-1]]
    if parts[-1]:
        lines.append((parts[-1], ""))
    return lines


def join_lines(lines: list[Line]) -> str:
    return "".join(c + e for c, e in lines)


def _dominant_eol(lines: list[Line]) -> str:
    crlf = sum(1 for _, e in lines if e == "\r\n")
    lf = sum(1 for _, e in lines if e == "\n")
    return "\r\n" if crlf > lf else "\n"


class _OutOfLines(Exception):
    pass


class LineBudget:
    """Lines compared while placing one patch's hunks, across all its files (``MAX_COMPARED_LINES``)."""

    def __init__(self) -> None:
        self.left = MAX_COMPARED_LINES

    def charge(self, lines: int) -> None:
        if lines > self.left:
            self.left = 0
            raise _OutOfLines
        self.left -= lines


class _Reads:
    """What one patch may still read of existing files (``MAX_PATCH_READ_BYTES`` in total)."""

    def __init__(self) -> None:
        self.left = MAX_PATCH_READ_BYTES

    def require_existing(self, t: _fileio.Target) -> _fileio.FileState:
        state = _fileio.require_existing(t, limit=min(self.left, _fileio.MAX_FILE_BYTES))
        self.left -= state.size
        return state


class _Lines:
    """One file's lines, the budget they are compared under, and — built on first search — an index
    from each line the file's hunks expect to the positions it occurs at."""

    def __init__(self, orig: list[Line], hunks: list[Hunk], budget: LineBudget) -> None:
        self.orig = orig
        self.budget = budget
        self._hunks = hunks
        self._index: dict[str, list[int]] | None = None

    def index(self) -> dict[str, list[int]]:
        if self._index is None:
            wanted = {text for h in self._hunks for tag, text in h.lines if tag != "+"}
            index: dict[str, list[int]] = {}
            for pos, (content, _) in enumerate(self.orig):
                if content in wanted:
                    index.setdefault(content, []).append(pos)
            self._index = index
        return self._index

    def matches(self, pos: int, old: list[str]) -> bool:
        """``old`` is the file's text at line ``pos``; every line compared is charged."""
        orig = self.orig
        if pos < 0 or pos + len(old) > len(orig):
            return False
        affordable = min(len(old), self.budget.left)
        for k in range(affordable):
            if orig[pos + k][0] != old[k]:
                self.budget.charge(k + 1)
                return False
        self.budget.charge(len(old))  # raises when only part of it was affordable
        return True

    def find_all(self, old: list[str], start: int, limit: int = 50) -> list[int]:
        """Where ``old`` matches at or after ``start`` (ascending, at most ``limit``).

        Candidates come from the positions of the hunk's rarest line, not from every offset, so a
        file of one repeated line cannot make each hunk cost (file lines x hunk lines)."""
        start = max(0, start)
        index = self.index()
        rarest: tuple[int, int, list[int], int] | None = None  # (count, lo, positions, k)
        seen: set[str] = set()
        for k, line in enumerate(old):
            if line in seen:
                continue
            seen.add(line)
            positions = index.get(line, [])
            lo = bisect_left(positions, start + k)
            count = len(positions) - lo
            if rarest is None or count < rarest[0]:
                rarest = (count, lo, positions, k)
                if not count:
                    return []
        assert rarest is not None
        _, lo, positions, k = rarest
        found: list[int] = []
        for p in itertools.islice(positions, lo, None):
            if self.matches(p - k, old):
                found.append(p - k)
                if len(found) >= limit:
                    break
        return found


def _mismatch(orig: list[Line], pos: int, old: list[str]) -> str:
    for k, want in enumerate(old):
        if pos + k >= len(orig):
            return (
                f"the file has only {len(orig)} lines, but the hunk expects line {pos + k + 1} to be {want!r}"
            )
        have = orig[pos + k][0]
        if have != want:
            return (
                f"line {pos + k + 1} does not match: expected {want!r}, found {have!r} "
                f"({describe_difference(want, have)})"
            )
    return "context matches"  # pragma: no cover - only called after a failed match


def _place(lines: _Lines, h: Hunk, number: int, cursor: int) -> int:
    orig = lines.orig
    old = h.old_lines
    n = len(orig)
    if h.old_start is not None:
        stated = h.old_start - 1 if old else h.old_start
        if not old:
            if not cursor <= stated <= n:
                raise HunkError(
                    number,
                    h,
                    f"insertion point line {stated} is outside the file ({n} lines) or before the previous hunk",
                )
            return stated
        if stated >= cursor and lines.matches(stated, old):
            return stated
        found = lines.find_all(old, cursor)
        if len(found) == 1:
            return found[0]
        reason = _mismatch(orig, stated, old) if 0 <= stated else "invalid start line"
        where = (
            "the hunk's old lines occur nowhere else after the previous hunk"
            if not found
            else f"they occur {len(found)}{'+' if len(found) >= 50 else ''} times elsewhere "
            f"(lines {', '.join(str(p + 1) for p in found[:10])}), so the place is ambiguous; add context"
        )
        raise HunkError(number, h, f"{reason}; {where}")
    if h.at_eof:
        pos = n - len(old)
        if pos < cursor or not lines.matches(pos, old):
            raise HunkError(
                number,
                h,
                "'*** End of File' hunk does not match the end of the file: "
                + _mismatch(orig, max(pos, 0), old),
            )
        return pos
    start = cursor
    if h.anchor is not None:
        anchor = h.anchor.strip()
        idx = next(
            (k for k in range(cursor, n) if orig[k][0] == h.anchor or orig[k][0].strip() == anchor), None
        )
        if idx is None:
            raise HunkError(number, h, f"anchor line {h.anchor!r} not found after the previous hunk")
        if not old:
            return idx + 1
        found = lines.find_all(old, idx, limit=1)
        if found:
            return found[0]
        start = idx
    elif not old:
        return n
    found = lines.find_all(old, start)
    if len(found) == 1 and h.anchor is None:
        return found[0]
    if len(found) > 1:
        raise HunkError(
            number,
            h,
            f"the hunk's old lines occur {len(found)} times (lines {', '.join(str(p + 1) for p in found[:10])}); "
            "add more context lines or an '@@ <line above>' anchor so it matches once",
        )
    text = "\n".join(c for c, _ in orig) + "\n"
    needle = "\n".join(old) + "\n"
    raise HunkError(
        number,
        h,
        "the hunk's old lines were not found.\n"
        + explain_miss(needle, text, whole_lines=True, needle_label="the hunk"),
    )


def apply_hunks(
    text: str, hunks: list[Hunk], budget: LineBudget | None = None
) -> tuple[str, list[dict[str, Any]]]:
    """The patched text and the offsets used (``HunkError`` names the first hunk that fails)."""
    orig = split_lines(text)
    lines = _Lines(orig, hunks, budget or LineBudget())
    eol = _dominant_eol(orig)
    out: list[Line] = []
    offsets: list[dict[str, Any]] = []
    cursor = 0
    end_hunk: Hunk | None = None
    for number, h in enumerate(hunks, start=1):
        try:
            pos = _place(lines, h, number, cursor)
        except _OutOfLines:
            raise HunkError(
                number,
                h,
                f"placing this patch's hunks took more than {MAX_COMPARED_LINES:,} line comparisons; "
                "give hunks their line numbers or more distinctive context, or split the patch",
            ) from None
        if h.old_start is not None and h.old_lines and pos != h.old_start - 1:
            offsets.append(
                {
                    "hunk": number,
                    "stated_line": h.old_start,
                    "applied_line": pos + 1,
                    "offset": pos + 1 - h.old_start,
                }
            )
        out.extend(orig[cursor:pos])
        k = pos
        for tag, body in h.lines:
            if tag == " ":
                out.append(orig[k])
                k += 1
            elif tag == "-":
                k += 1
            else:
                out.append((body, eol))
        cursor = k
        end_hunk = h if k == len(orig) else None
    out.extend(orig[cursor:])
    if out and end_hunk is not None:
        had_final_newline = not orig or orig[-1][1] != ""
        if end_hunk.new_no_eol:
            final = ""
        elif end_hunk.old_no_eol or had_final_newline:
            final = eol
        else:
            final = ""
        out[-1] = (out[-1][0], final)
    out = [(c, e or eol) if i < len(out) - 1 else (c, e) for i, (c, e) in enumerate(out)]
    return join_lines(out), offsets


def _rel(path: str) -> str | None:
    """A header path's clean form for comparison (None when it could never be a workspace path)."""
    try:
        return normalize_relative(path)
    except ToolError:
        return None


def _resolve_paths(
    fp: FilePatch, ws: Any, default_path: str | None, single: bool, protect: bool
) -> tuple[str | None, str | None, bool]:
    """(source, destination, is_rename) for one section, per the module's path rules."""
    old, new = fp.old_path, fp.new_path
    if not fp.has_headers:
        if not default_path:
            raise InvalidArgument(
                "the diff has no ---/+++ file headers; pass file_path to say which file it changes"
            )
        return default_path, default_path, False
    if single and default_path and _rel(default_path) not in {_rel(p) for p in (old, new) if p is not None}:
        return (default_path if old is not None else None), (default_path if new is not None else None), False
    if old is not None and new is not None and _rel(old) != _rel(new):
        if fp.git_rename or _exists(ws, old, protect):
            return old, new, True
        if _exists(ws, new, protect):
            return new, new, False
        raise NotFound(f"File not found: {old} (nor {new})", path=old)
    return old, new, False


def _exists(ws: Any, path: str, protect: bool) -> bool:
    t = _fileio.target(ws, path, protect=protect)
    try:
        return _fileio.exists(t)
    finally:
        t.loc.close()


def plan(
    files: list[FilePatch], ws: Any, default_path: str | None, *, protect: bool = False
) -> list[Planned]:
    """Check every section and hunk and compute the commit; raise on the first failure.

    ``protect`` (governed origins): every path the patch touches — sources, destinations, renames,
    deletions — is refused inside git metadata before anything is read or written.
    """
    planned: list[Planned] = []
    budget = LineBudget()
    reads = _Reads()
    seen: set[str] = set()
    named: set[str] = set()  # every section's paths so far, normalized
    under: dict[str, str] = {}  # each directory above a path in ``named`` -> the first such path
    for fp in files:
        if protect:
            _refuse_git_metadata(ws, (fp.old_path, fp.new_path, default_path))
        src, dst, rename = _resolve_paths(fp, ws, default_path, len(files) == 1, protect)
        for rel in (_rel(p) for p in (src, dst) if p is not None):
            if rel:  # before any target is opened (``sub/x`` under a file ``sub`` is "not a directory")
                _claim_path(rel, named, under)
        src_t = _fileio.target(ws, src, protect=protect) if src is not None else None
        dst_t = _fileio.target(ws, dst, protect=protect) if dst is not None else None
        for t in {x.rel: x for x in (src_t, dst_t) if x is not None}.values():
            if t.rel in seen:
                raise InvalidArgument(
                    f"patch not applied (nothing was written): {t.rel} appears in more than one file section"
                )
            seen.add(t.rel)
        label = (dst_t or src_t).rel  # type: ignore[union-attr]
        try:
            planned.append(_plan_one(fp, src_t, dst_t, rename, budget, reads))
        except HunkError as exc:
            raise InvalidArgument(
                f"patch not applied (nothing was written): {label}: {exc}", path=label
            ) from None
    return planned


def _claim_path(rel: str, named: set[str], under: dict[str, str]) -> None:
    """Add a section's path to ``named`` (its directories to ``under``) — unless a path already
    named lies above it or inside it (``sub`` and ``sub/x``): every section path is a file, and one
    cannot also be the directory of another. The commit found that only as ``sub`` "created by
    someone else" (a version_conflict naming nobody); it is refused here, naming both, before this
    section's files are opened and before anything is written."""
    parts = rel.split("/")
    above = next((a for a in ("/".join(parts[:i]) for i in range(1, len(parts))) if a in named), None)
    file, inside = (above, rel) if above is not None else (rel, under.get(rel))
    if file is None or inside is None:
        named.add(rel)
        for i in range(1, len(parts)):
            under.setdefault("/".join(parts[:i]), rel)
        return
    raise InvalidArgument(
        f"patch not applied (nothing was written): the patch names both {file} and {inside} — "
        f"{file} cannot be a file and the directory holding {inside}; turning a file into a "
        "directory takes two patches (delete it, then create the files inside)",
        path=file,
    )


def _refuse_git_metadata(ws: Any, paths: tuple[str | None, ...]) -> None:
    """Every path a section names, labels included, is checked before the section is read."""
    for named in paths:
        if named is None:
            continue
        try:
            _fileio.target(ws, named, protect=True).loc.close()
        except PermissionDenied:
            raise
        except ToolError:
            continue  # not a writable workspace path: the section's own checks report it


def _plan_one(
    fp: FilePatch,
    src_t: _fileio.Target | None,
    dst_t: _fileio.Target | None,
    rename: bool,
    budget: LineBudget,
    reads: _Reads,
) -> Planned:
    if src_t is None:  # create
        assert dst_t is not None
        state = _fileio.FileState(exists=False)
        if _fileio.exists(dst_t):  # a stat: the bytes of a file we will not touch are not read
            raise InvalidArgument(
                f"patch not applied (nothing was written): cannot create {dst_t.rel}: it already exists"
            )
        after, offsets = apply_hunks("", fp.hunks, budget)
        data = encode_text(after, "utf-8", path=dst_t.rel)
        change = _fileio.Change(dst_t, state, data, mode=fp.new_mode)
        return Planned("created", dst_t.rel, None, [change], "", after, None, data, len(fp.hunks), offsets)
    src_state = reads.require_existing(src_t)
    decoded = decode_bytes(src_state.data)
    before = decoded.text
    after, offsets = apply_hunks(before, fp.hunks, budget) if fp.hunks else (before, [])
    if dst_t is None:  # delete
        if fp.check_delete and fp.hunks and after:
            raise InvalidArgument(
                f"patch not applied (nothing was written): the patch deletes {src_t.rel} "
                "but its hunks do not remove every line of it"
            )
        change = _fileio.Change(src_t, src_state, None)
        return Planned(
            "deleted", src_t.rel, None, [change], before, "", src_state.data, None, len(fp.hunks), offsets
        )
    data = src_state.data if after == before else decoded.encode(after, path=dst_t.rel)
    if rename:
        dst_state = _fileio.FileState(exists=False)
        if _fileio.exists(dst_t):  # a stat, as for a create
            raise InvalidArgument(
                f"patch not applied (nothing was written): cannot rename to {dst_t.rel}: it already exists"
            )
        changes = [
            _fileio.Change(dst_t, dst_state, data, mode=src_state.mode),
            _fileio.Change(src_t, src_state, None),
        ]
        return Planned(
            "renamed",
            dst_t.rel,
            src_t.rel,
            changes,
            before,
            after,
            src_state.data,
            data,
            len(fp.hunks),
            offsets,
        )
    change = _fileio.Change(src_t, src_state, data)
    return Planned(
        "modified", src_t.rel, None, [change], before, after, src_state.data, data, len(fp.hunks), offsets
    )
