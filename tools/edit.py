"""The ``edit`` tool: exact string replacement in one file (SPEC B-3, B-5, B-6; REFERENCE §4.5).

Invariants:

- Matching is exact (``str.count``/``str.replace``, non-overlapping, left to right). No fuzzy
  placement: a miss fails with a diagnostic (closest lines, first differing character named by
  code point, the usual culprit — tabs/spaces, U+00A0, CRLF — said explicitly; ``_textdiag``).
- Counting rules, in this order: 0 matches → ``old_string not found``; ``expected_replacements``
  set and ≠ the count → ``Replacement count mismatch``; ``max_replacements`` set and < the count →
  ``exceeds max_replacements``; more than one match without ``replace_all`` (and without a
  matching ``expected_replacements``) → ``old_string found N times``. Every match is replaced
  when ``replace_all`` is true or ``expected_replacements`` equals the count.
- Line endings: in a CRLF-only file, the model's LF line breaks in ``old_string``/``new_string``
  become CRLF; in an LF-only file, CRLF become LF; in a mixed file the exact text is tried first,
  then its CRLF form, then its LF form. So a CRLF file stays CRLF.
- Encoding: UTF-8 with or without BOM, or latin-1 for other bytes (``tools/_filetext.py``); the
  BOM and every untouched byte are written back unchanged.
- The new size is computed from the count before the new text is built: a ``replace_all`` that
  would grow the file past ``_fileio.MAX_FILE_BYTES`` fails (``invalid_argument``) without
  allocating it, and nothing is written.
- ``dry_run`` computes everything a real edit does and returns the same metadata (``dry_run``
  aside) but writes nothing; it is declared read-only (``parallel_safe_read(16)``, diff output).
- A real edit is compare-and-swap: if the file changed between our read and the rename,
  ``version_conflict`` ("Concurrent modification detected … Re-read the file") and nothing is
  written. Any failure leaves the file byte-identical.
"""

from __future__ import annotations

import asyncio

from pydantic import BaseModel, ConfigDict, Field

from kernel.capabilities import ToolCapabilities
from kernel.context import ToolContext
from kernel.errors import InvalidArgument, NotFound
from kernel.result import ToolResult
from kernel.spec import ToolSpec
from tools import _fileio
from tools._filetext import change_metadata, decode_bytes, eol_style, to_crlf, to_lf
from tools._textdiag import explain_miss

NAME = "edit"
MAX_LISTED_MATCH_LINES = 10


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid")

    file_path: str = Field(
        min_length=1, max_length=4096, description="Workspace-relative path of the file to edit."
    )
    old_string: str = Field(
        min_length=1, description="The exact text to replace (whitespace and line breaks matter)."
    )
    new_string: str = Field(description="The replacement text.")
    replace_all: bool = Field(
        default=False, description="Replace every occurrence instead of requiring exactly one."
    )
    dry_run: bool = Field(default=False, description="Compute and show the change without writing it.")
    expected_replacements: int | None = Field(
        default=None,
        ge=1,
        description="Fail unless exactly this many occurrences are found (e.g. from a dry run).",
    )
    max_replacements: int | None = Field(
        default=None, ge=1, description="Fail if more than this many occurrences would be replaced."
    )


def capabilities(params: Params) -> ToolCapabilities:
    if params.dry_run:
        return ToolCapabilities.parallel_safe_read(16).with_output("diff")
    return ToolCapabilities.conservative().with_output("diff")


def _candidates(text: str, old: str, new: str) -> list[tuple[str, str]]:
    """(old, new) forms to try, in order, so the file's line endings are kept."""
    style = eol_style(text)
    if style == "crlf":
        return [(to_crlf(old), to_crlf(new))]
    if style == "lf":
        return [(to_lf(old), to_lf(new))]
    if style == "mixed":
        forms = [(old, new), (to_crlf(old), to_crlf(new)), (to_lf(old), to_lf(new))]
        return list(dict.fromkeys(forms))
    return [(old, new)]


def _encoded_len(s: str, encoding: str) -> int:
    """Bytes ``s`` takes in the file: latin-1 is one byte per character (an unencodable one fails
    later, when the text is encoded); UTF-8 is stateless, so a replacement's size is exact."""
    return len(s) if encoding == "latin-1" else len(s.encode("utf-8", "surrogatepass"))


def _match_lines(text: str, needle: str) -> list[int]:
    lines, start = [], 0
    while len(lines) < MAX_LISTED_MATCH_LINES:
        idx = text.find(needle, start)
        if idx < 0:
            break
        lines.append(text.count("\n", 0, idx) + 1)
        start = idx + len(needle)
    return lines


def _run_sync(ctx: ToolContext, params: Params) -> ToolResult:
    ws = _fileio.local_workspace(ctx)
    t = _fileio.target(ws, params.file_path, protect=ctx.governed)
    if not params.dry_run:
        _fileio.require_session(ctx)
    state = _fileio.read_state(t)
    if not state.exists:
        raise NotFound(f"File not found: {t.rel}", path=t.rel)
    decoded = decode_bytes(state.data)
    text = decoded.text
    if params.old_string == params.new_string:
        raise InvalidArgument("old_string and new_string are identical; there is nothing to change")

    old, new, count = params.old_string, params.new_string, 0
    for old_form, new_form in _candidates(text, params.old_string, params.new_string):
        count = text.count(old_form)
        if count:
            old, new = old_form, new_form
            break
    counts = {
        "replacement_count": count,
        "expected_replacements": params.expected_replacements,
        "max_replacements": params.max_replacements,
    }
    if count == 0:
        raise NotFound(
            f"old_string not found in {t.rel}.\n{explain_miss(params.old_string, text)}".rstrip(), path=t.rel
        )
    if params.expected_replacements is not None and count != params.expected_replacements:
        return ToolResult.failure(
            NAME,
            InvalidArgument(
                f"Replacement count mismatch in {t.rel}: expected {params.expected_replacements} "
                f"replacement(s) but found {count} occurrence(s) of old_string; nothing was written.",
                **counts,
            ),
            {"file_path": t.rel, "dry_run": params.dry_run, **counts},
        )
    if params.max_replacements is not None and count > params.max_replacements:
        return ToolResult.failure(
            NAME,
            InvalidArgument(
                f"{count} occurrence(s) of old_string in {t.rel} exceeds max_replacements="
                f"{params.max_replacements}; nothing was written.",
                **counts,
            ),
            {"file_path": t.rel, "dry_run": params.dry_run, **counts},
        )
    if count > 1 and not params.replace_all and params.expected_replacements != count:
        where = ", ".join(str(n) for n in _match_lines(text, old))
        raise InvalidArgument(
            f"old_string found {count} times in {t.rel} (at lines {where}{', …' if count > MAX_LISTED_MATCH_LINES else ''}). "
            "Use replace_all=true to replace every occurrence, set expected_replacements, or add surrounding "
            "context to old_string so it matches exactly once.",
            **counts,
        )

    # The size follows from the count: refuse before the new text exists, not after.
    delta = _encoded_len(new, decoded.encoding) - _encoded_len(old, decoded.encoding)
    after_bytes = len(state.data) + count * delta
    if after_bytes > _fileio.MAX_FILE_BYTES:
        raise InvalidArgument(
            f"replacing {count} occurrence(s) would make {t.rel} {after_bytes} bytes; write, edit and "
            f"patch take files up to {_fileio.MAX_FILE_BYTES >> 20} MiB. Nothing was written.",
            **counts,
        )
    after = text.replace(old, new)
    after_data = decoded.encode(after, path=t.rel)
    meta = change_metadata(t.rel, text, after, state.data, after_data)
    meta.update(dry_run=params.dry_run, encoding=decoded.encoding, line_endings=eol_style(text), **counts)
    diff = meta["diff"] or "(diff omitted: the file is too large)"
    if params.dry_run:
        output = f"Dry run: would replace {count} occurrence(s) in {t.rel}; nothing was written\n\n{diff}"
        return ToolResult.success(NAME, output, meta)
    _fileio.commit(
        [_fileio.Change(target=t, expected=state, data=after_data)], cancelled=ctx.cancelled.is_set
    )
    return ToolResult.success(NAME, f"Replaced {count} occurrence(s) in {t.rel}\n\n{diff}", meta)


async def run(ctx: ToolContext, params: Params) -> ToolResult:
    # File I/O runs in a thread; the commit re-checks ctx.cancelled right before renaming.
    return await asyncio.to_thread(_run_sync, ctx, params)


TOOL = ToolSpec(
    name=NAME,
    description=(
        "Replace exact text in a file. `old_string` must match the file exactly (including indentation "
        "and whitespace) and, unless `replace_all` is true, exactly once. Use `dry_run: true` to preview "
        "the diff and the occurrence count, then apply with `expected_replacements` set to that count. "
        "Line endings and encoding of the file are preserved. On a miss the error shows the closest "
        "lines and the first differing character."
    ),
    params=Params,
    run=run,
    capabilities=capabilities,
    requires=frozenset({"read", "write"}),
    subject=lambda p: p.file_path,
    subject_kind="path",
    path_fields=("file_path",),
    examples=(
        {"file_path": "src/app.py", "old_string": "DEBUG = True", "new_string": "DEBUG = False"},
        {
            "file_path": "src/app.py",
            "old_string": "foo(",
            "new_string": "bar(",
            "replace_all": True,
            "dry_run": True,
        },
    ),
    builtin=True,
)
