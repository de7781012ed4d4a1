"""Which files of a git diff get a patch: the per-file byte and line limits of the ``git`` tool's diff.

libgit2 builds a file's *whole* patch in memory (both sides, xdiff's per-line records, one
``git_diff_line`` per line, the text) before a page keeps ``max_bytes`` of it. Measured on libgit2
1.9: about the sides' bytes plus ~110 bytes per line, so a model's ``yes a | head -c 400M > big.txt``
(below libgit2's own 512 MiB "binary by size" threshold) took the host process to 18.7 GiB for one
``git diff``. So a file is judged from its delta before any patch is built:

- a side over ``MAX_DIFF_FILE_BYTES`` → omitted. Sizes come from the delta (the work tree's
  ``lstat``) or, for a blob, from the object database's header (no inflate of the content);
- a side over ``LINE_CHECK_FROM_BYTES`` is read once (≤ ``MAX_DIFF_FILE_BYTES``) to count its
  lines; over ``MAX_DIFF_FILE_LINES`` → omitted. Smaller sides cannot hold that many lines.

An omitted file keeps a ``diff --git`` header and a one-line note (sizes, the limit, where to look
instead) in the patch stream, so paging stays exact; its additions/deletions are unknown (None).
Every other file's patch is exactly what it was. A work-tree file that grows between the delta and
its patch is not re-judged: libgit2 maps only the size the delta recorded (an empty file re-reads
its size, the one gap left).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass

import pygit2
from pygit2.enums import DiffFlag, FileMode

from kernel.errors import Cancelled, Timeout, ToolError
from kernel.workspace import LocalWorkspace, Workspace

MAX_DIFF_FILE_BYTES = 8 * 1024 * 1024  # either side: ~80 pages of the largest diff page (100 KiB)
MAX_DIFF_FILE_LINES = 100_000  # either side: per-line records cost ~110 bytes a line while building
LINE_CHECK_FROM_BYTES = MAX_DIFF_FILE_LINES  # a side this small has at most this many lines
READ_CHUNK_BYTES = 1024 * 1024


@dataclass(frozen=True)
class Judgement:
    """One file's sides in bytes (0 = absent or empty, None = unknown) and why its patch is omitted, if it is."""

    before_bytes: int | None
    after_bytes: int | None
    reason: str | None = None

    @property
    def omitted(self) -> bool:
        return self.reason is not None


def human_bytes(n: int) -> str:
    if n >= 1024 * 1024:
        return f"{n / (1024 * 1024):.1f} MiB"
    if n >= 1024:
        return f"{n / 1024:.1f} KiB"
    return f"{n} bytes"


class DiffJudge:
    """Judges the deltas of one diff. ``workdir_new``: the new side of every delta is the work tree."""

    def __init__(
        self,
        repo: pygit2.Repository,
        workspace: Workspace,
        *,
        workdir_new: bool,
        check: Callable[[], None] = lambda: None,
    ) -> None:
        self._check = check  # raises once the call is out of time or cancelled
        self._repo = repo
        self._odb = repo.odb
        self._workspace = workspace
        self._workdir_new = workdir_new

    def judge(self, delta: pygit2.DiffDelta) -> Judgement:
        before = self._size(delta.old_file)
        after = self._size(delta.new_file)
        for side, size in (("old", before), ("new", after)):
            if size is not None and size > MAX_DIFF_FILE_BYTES:
                return Judgement(
                    before,
                    after,
                    f"the {side} side is {human_bytes(size)}, over the {human_bytes(MAX_DIFF_FILE_BYTES)} "
                    "per-file limit of this tool's diff",
                )
        for side, size, file in (("old", before, delta.old_file), ("new", after, delta.new_file)):
            if size is None or size <= LINE_CHECK_FROM_BYTES:
                continue
            workdir = side == "new" and self._workdir_new
            try:
                over = self._over_line_limit(file, workdir=workdir)
            except (Timeout, Cancelled):
                raise  # the call's own end, not this file's
            except (ToolError, OSError, KeyError, ValueError, pygit2.GitError) as exc:
                return Judgement(
                    before, after, f"the {side} side could not be read to count its lines ({exc})"
                )
            if over:
                return Judgement(
                    before,
                    after,
                    f"the {side} side has more than {MAX_DIFF_FILE_LINES:,} lines, over the per-file "
                    "line limit of this tool's diff",
                )
        return Judgement(before, after)

    def _size(self, file: pygit2.DiffFile) -> int | None:
        flags = file.flags
        if not flags & DiffFlag.EXISTS:
            return 0
        if file.mode == FileMode.COMMIT:
            return 0  # a submodule's commit id: its patch is one line
        if flags & DiffFlag.VALID_SIZE:
            return int(file.size)
        if flags & DiffFlag.VALID_ID:
            try:
                return int(self._odb.read_header(file.id)[1])  # header only: the blob is not inflated
            except (KeyError, ValueError, pygit2.GitError):
                return None  # missing: libgit2 fails (or shows it empty) as it always did
        return None

    def _over_line_limit(self, file: pygit2.DiffFile, *, workdir: bool) -> bool:
        if not workdir:
            blob = self._repo[file.id]  # at most MAX_DIFF_FILE_BYTES: its header said so
            if not isinstance(blob, pygit2.Blob):
                raise ValueError(f"{file.id} is not a blob")
            return _lines(blob.data) > MAX_DIFF_FILE_LINES
        if not isinstance(self._workspace, LocalWorkspace):
            raise ToolError(f"{self._workspace.name} gives no file access")
        # Through the workspace resolver, no symlink followed, never more than the byte limit.
        lines = 0
        with self._workspace.open_file(file.path, follow_symlinks=False) as fh:
            left, last = MAX_DIFF_FILE_BYTES + 1, b"\n"
            while left > 0 and (chunk := fh.read(min(READ_CHUNK_BYTES, left))):
                self._check()  # per MiB read: a slow file system cannot hold the call past its deadline
                lines += chunk.count(b"\n")
                left -= len(chunk)
                last = chunk[-1:]
                if lines > MAX_DIFF_FILE_LINES:
                    return True
            if left <= 0:
                return True  # grew past the byte limit since the delta: over either way
        return lines + (last != b"\n") > MAX_DIFF_FILE_LINES


def _lines(data: bytes) -> int:
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def omission_block(delta: pygit2.DiffDelta, judged: Judgement, *, bash_rev: str | None) -> bytes:
    """What stands in the patch stream for an omitted file: git's header line and one note.

    ``bash_rev``: the revision a working-tree diff compares with, when the workspace offers bash
    (where ``git diff`` runs sandboxed); None on a read-only ``git:`` view.
    """
    old, new = delta.old_file.path, delta.new_file.path
    status = delta.status_char()
    sizes = (
        f"old {_side(delta.old_file, judged.before_bytes)}, new {_side(delta.new_file, judged.after_bytes)}"
    )
    if status == "?":
        hint = "the file is untracked: read it in pages with `read`"
    elif bash_rev is not None:
        quoted = shlex.quote(new)
        hint = (
            f"in bash, `git diff --numstat {bash_rev} -- {quoted}` counts its changed lines and "
            f"`git diff {bash_rev} -- {quoted} | head -n 200` shows its start"
        )
    elif status != "D":
        hint = "read the new side in pages with `read`"
    else:
        hint = "the file was deleted"
    note = f"diff --git a/{old} b/{new}\n(diff omitted: {judged.reason}; {sizes}; {hint})\n"
    return note.encode("utf-8", "surrogateescape")


def _side(file: pygit2.DiffFile, size: int | None) -> str:
    if not file.flags & DiffFlag.EXISTS:
        return "absent"
    if size is None:
        return "size unknown"
    if size < 1024:
        return human_bytes(size)
    return f"{human_bytes(size)} ({size} bytes)"
