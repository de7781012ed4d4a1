"""Build or update a workspace's persistent index, incrementally (SPEC Q-8).

``update_index(ws)`` holds the write lock for its whole run and:

1. lists the visible files (``files.list_files``) — or only the given ``paths`` for a targeted
   refresh — and compares them with the manifest: a file whose size and mtime are those recorded
   is unchanged without being read (git's stat shortcut; a file recorded while its mtime was
   within ``RACY_NS`` of the scan's start is always re-read, so an edit inside one timestamp tick
   is not missed); files the manifest knows but the listing lacks are removed;
2. reads every other file, keyed by content digest: same digest → unchanged (only its stat is
   refreshed); else its old chunks are deleted by ``path`` term and its new chunks added, in the
   same commit, so a reader sees one version of a file or the other, never both or half;
3. commits every ``COMMIT_BYTES`` of new text or ``COMMIT_SECONDS`` (readers see a big build
   grow: partial readiness) and at the end, writing the manifest after each commit.

A stop request (``should_stop``) or a crash loses at most the work since the last commit; the
next update resumes from the manifest. No total-size cap: files over ``MAX_FILE_BYTES`` (8 MiB)
are skipped and counted (``oversized``), binary files (a NUL byte) likewise (``binary``).
"""

from __future__ import annotations

import contextlib
import hashlib
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernel.workspace import Workspace
from tools.search.grep_py import UTF8_BOM, decode_text
from tools.search.indexed import schema as sch
from tools.search.indexed import store
from tools.search.indexed.files import Listed, Reader, Unreadable, list_files, stat_file

MAX_FILE_BYTES = 8 * 1024 * 1024
COMMIT_BYTES = 64 * 1024 * 1024
COMMIT_SECONDS = 5.0
RACY_NS = 2_000_000_000  # mtime granularity allowance (coarse filesystems tick in seconds)
WRITER_HEAP_BYTES = 128_000_000
WRITER_THREADS = 1  # Python tokenizes on one core while tantivy indexes on the other
PROGRESS_EVERY_S = 0.5

Progress = Callable[[int, int, int], None]  # (files done, files to read, bytes read)


@dataclass(slots=True)
class UpdateReport:
    indexed_files: int = 0  # read and (re-)indexed
    unchanged_files: int = 0  # same stat, or same digest
    removed_files: int = 0
    skipped: dict[str, int] = field(default_factory=lambda: {"binary": 0, "oversized": 0, "unreadable": 0})
    added_chunks: int = 0
    chunks: int = 0  # chunk documents in the index afterwards
    files: int = 0  # files in the index afterwards
    bytes_read: int = 0
    seconds: float = 0.0
    commits: int = 0
    complete: bool = False  # False when stopped early (the next update resumes)
    directory: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "indexed_files": self.indexed_files,
            "unchanged_files": self.unchanged_files,
            "removed_files": self.removed_files,
            "skipped_files": dict(self.skipped),
            "chunks": self.chunks,
            "added_chunks": self.added_chunks,
            "files": self.files,
            "bytes_read": self.bytes_read,
            "seconds": round(self.seconds, 3),
            "commits": self.commits,
            "complete": self.complete,
            "directory": self.directory,
        }


def digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def open_index(directory: Path, *, create: bool) -> Any:
    """The tantivy index in ``directory/fts``. With ``create`` (the writer, lock held) a missing
    index is created and one of another schema version (``store.schema_current``) rebuilt."""
    import tantivy

    fts = directory / store.FTS_DIR
    if not create:
        return tantivy.Index.open(str(fts))
    if fts.exists() and not store.schema_current(directory):
        shutil.rmtree(fts)
    fts.mkdir(mode=store.DIR_MODE, exist_ok=True)
    index = tantivy.Index(sch.build_schema(), path=str(fts), reuse=True)
    store.mark_schema(directory)
    return index


def recover_manifest(index: Any) -> store.Manifest:
    """The manifest rebuilt from the index itself (after a writer died between commit and manifest).

    Sizes and mtimes are unknown (-1), so the next update re-reads every file once and keeps those
    whose digest matches.
    """
    import tantivy

    index.reload()
    searcher = index.searcher()
    everything = tantivy.Query.all_query()
    chunks = dict(searcher.terms_with_prefix(sch.F_PATH, "", filter_query=everything))
    files: dict[str, store.FileRecord] = {}
    for term, count in searcher.terms_with_prefix(sch.F_FKEY, "", filter_query=everything):
        if count <= 0:
            continue
        path, _, dig = term.partition("\x00")
        files[path] = store.FileRecord(dig, -1, -1, int(chunks.get(path, 0)))
    return store.Manifest(files=files)


class _Build:
    def __init__(
        self, ws: Workspace, directory: Path, report: UpdateReport, progress: Progress | None
    ) -> None:
        self.ws = ws
        self.directory = directory
        self.report = report
        self.progress = progress
        self.index = open_index(directory, create=True)
        self.manifest = store.read_manifest(directory) or recover_manifest(self.index)
        self.writer = self.index.writer(heap_size=WRITER_HEAP_BYTES, num_threads=WRITER_THREADS)
        self.pending: dict[str, store.FileRecord | None] = {}
        self.dirty = False  # documents added or deleted since the last commit
        self.pending_bytes = 0
        self.last_commit = time.monotonic()
        self.started_ns = time.time_ns()
        self.tokens = sch.JoinedTokens()
        self.last_progress = 0.0

    # --- the plan --------------------------------------------------------------------------------

    def unchanged_by_stat(self, listed: Listed) -> bool:
        old = self.manifest.files.get(listed.path)
        return old is not None and old.size == listed.size and old.mtime_ns == listed.mtime_ns >= 0

    def _stamp(self, mtime_ns: int) -> int:
        """The mtime to record: -1 (re-read next time) when it is too close to this scan's start."""
        return -1 if mtime_ns >= self.started_ns - RACY_NS else mtime_ns

    # --- changes ---------------------------------------------------------------------------------

    def remove(self, path: str) -> None:
        old = self.manifest.files.get(path)
        if old is not None and old.chunks:
            self.writer.delete_documents_by_term(sch.F_PATH, path)
            self.dirty = True
        self.pending[path] = None
        self.report.removed_files += 1

    def skip(self, path: str, reason: str, size: int, mtime_ns: int) -> None:
        old = self.manifest.files.get(path)
        if old is not None and old.chunks:
            self.writer.delete_documents_by_term(sch.F_PATH, path)
            self.dirty = True
        self.pending[path] = store.FileRecord("", size, self._stamp(mtime_ns), 0, reason)
        self.report.skipped[reason] += 1

    def visit(self, reader: Reader, path: str) -> None:
        try:
            data, size, mtime_ns = reader.read(path, MAX_FILE_BYTES)
        except FileNotFoundError:
            if path in self.manifest.files:
                self.remove(path)
            return
        except Unreadable:
            self.skip(path, "unreadable", -1, -1)
            return
        self.report.bytes_read += len(data)
        if len(data) > MAX_FILE_BYTES:
            self.skip(path, "oversized", size, mtime_ns)
            return
        dig = digest(data)
        old = self.manifest.files.get(path)
        if old is not None and old.digest == dig and not old.skipped:
            self.pending[path] = store.FileRecord(dig, size, self._stamp(mtime_ns), old.chunks)
            self.report.unchanged_files += 1
            return
        text = decode_text(data)
        if text is None:
            self.skip(path, "binary", size, mtime_ns)
            return
        raw = data if not data.startswith(UTF8_BOM) and data[:2] not in (b"\xff\xfe", b"\xfe\xff") else None
        bodies = sch.chunk_bodies(text, raw, self.tokens)
        self.tokens.trim()
        if old is not None and old.chunks:
            self.writer.delete_documents_by_term(sch.F_PATH, path)
        self._add(path, dig, bodies)
        self.dirty = True
        self.pending[path] = store.FileRecord(dig, size, self._stamp(mtime_ns), len(bodies))
        self.pending_bytes += len(data)
        self.report.indexed_files += 1
        self.report.added_chunks += len(bodies)

    def _add(self, path: str, dig: str, bodies: list[tuple[int, int, str]]) -> None:
        import tantivy

        dirs = sch.ancestors(path)
        for i, (start, end, body) in enumerate(bodies):
            doc = tantivy.Document()
            doc.add_text(sch.F_PATH, path)
            for d in dirs:
                doc.add_text(sch.F_DIR, d)
            doc.add_text(sch.F_DIGEST, dig)
            if i == 0:
                doc.add_text(sch.F_FKEY, f"{path}\x00{dig}")
            doc.add_unsigned(sch.F_START, start)
            doc.add_unsigned(sch.F_END, end)
            doc.add_text(sch.F_BODY, body)
            self.writer.add_document(doc)

    # --- commits ---------------------------------------------------------------------------------

    def maybe_commit(self) -> None:
        if self.pending_bytes >= COMMIT_BYTES or (
            self.pending and time.monotonic() - self.last_commit >= COMMIT_SECONDS
        ):
            self.commit(complete=False)

    def commit(self, *, complete: bool) -> None:
        if self.dirty or store.index_opstamp(self.directory) != self.manifest.opstamp:
            self.writer.commit()
            self.report.commits += 1
            self.dirty = False
        for path, rec in self.pending.items():
            if rec is None:
                self.manifest.files.pop(path, None)
            else:
                self.manifest.files[path] = rec
        self.pending.clear()
        self.pending_bytes = 0
        self.last_commit = time.monotonic()
        self.manifest.opstamp = store.index_opstamp(self.directory) or 0
        self.manifest.built_at_ns = self.started_ns
        self.manifest.complete = complete
        store.write_manifest(self.directory, self.manifest)

    def tick(self, done: int, total: int) -> None:
        now = time.monotonic()
        if self.progress is not None:
            self.progress(done, total, self.report.bytes_read)
        if now - self.last_progress >= PROGRESS_EVERY_S or done == total:
            self.last_progress = now
            with contextlib.suppress(OSError):
                store.write_progress(
                    self.directory,
                    {"done_files": done, "total_files": total, "indexed_files": len(self.manifest.files)},
                )

    def finish(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.garbage_collect_files()
        self.writer.wait_merging_threads()


def update_index(
    ws: Workspace,
    *,
    paths: list[str] | None = None,
    progress: Progress | None = None,
    should_stop: Callable[[], bool] | None = None,
    wait_lock_s: float = 0.0,
    location: store.IndexLocation | None = None,
) -> UpdateReport:
    """Bring the workspace's index up to date (or only ``paths``); see the module docstring.

    ``store.IndexBusy`` when another writer holds the lock beyond ``wait_lock_s``.
    """
    stop = should_stop or (lambda: False)
    started = time.monotonic()
    loc = location or store.locate(ws)
    directory = loc.for_writing()
    report = UpdateReport(directory=str(directory))
    with store.write_lock(directory, wait_s=wait_lock_s, should_stop=stop):
        build = _Build(ws, directory, report, progress)
        try:
            manifest = build.manifest
            if paths is None and loc.kind == "git" and manifest.complete:
                todo: list[str] = []  # a tree never changes: a finished index is final
                report.unchanged_files = len(manifest.files)
            elif paths is None:
                listing = list_files(ws, stop)
                if stop():
                    build.commit(complete=False)
                    return _done(report, build, started)
                for gone in sorted(set(manifest.files) - set(listing)):
                    build.remove(gone)
                todo = sorted(p for p, item in listing.items() if not build.unchanged_by_stat(item))
                report.unchanged_files = len(listing) - len(todo)
            else:
                todo = []
                for p in sorted(set(paths)):
                    now = stat_file(ws, p)
                    if now is None:
                        if p in manifest.files:
                            build.remove(p)
                    elif build.unchanged_by_stat(now):
                        report.unchanged_files += 1
                    else:
                        todo.append(p)
            stopped = False
            with Reader(ws) as reader:
                for i, path in enumerate(todo):
                    if stop():
                        stopped = True
                        break
                    build.visit(reader, path)
                    build.maybe_commit()
                    build.tick(i + 1, len(todo))
            complete = not stopped and (paths is None or manifest.complete)
            build.commit(complete=complete)
            build.tick(len(todo), len(todo))
            return _done(report, build, started)
        finally:
            build.finish()


def _done(report: UpdateReport, build: _Build, started: float) -> UpdateReport:
    report.complete = build.manifest.complete
    report.files = build.manifest.indexed_files
    report.chunks = build.manifest.chunks
    report.seconds = time.monotonic() - started
    return report
