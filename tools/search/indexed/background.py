"""Keeping an index fresh from a host process: one background updater per index directory (SPEC Q-8).

The ``indexed`` mode never blocks a query on a build: the first query of a missing index starts a
build here and waits briefly (``first_query_wait_s``), later queries start an incremental update
when the last one finished more than ``refresh_interval_s`` ago, and hits found stale are queued
for a targeted refresh. Invariants:

- one updater per index directory per process, shared by every session of the process (the index
  belongs to the workspace, not to a session); it opens its own workspace view (a read-only
  ``LocalWorkspace`` or its own ``GitTreeWorkspace``), so a session closing its workspace never
  pulls files from under a build;
- across processes the index's write lock decides: an updater that finds another writer at work
  gives up at once (``busy``) — readers still read the last commit;
- the worker thread never raises: failures are recorded in ``status()['error']``;
- at interpreter exit every updater is asked to stop (it commits what it has) and joined briefly.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import threading
import time
from typing import Any

from kernel.workspace import LocalWorkspace, Workspace
from tools.search.indexed import store
from tools.search.indexed.build import UpdateReport, update_index

log = logging.getLogger(__name__)
EXIT_JOIN_S = 5.0
MAX_QUEUED_PATHS = 10_000


class Updater:
    def __init__(self, location: store.IndexLocation, workspace: Workspace) -> None:
        self.location = location
        self._workspace = workspace
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._full = False  # a full update is requested
        self._paths: set[str] = set()
        self.last_full_done: float | None = None  # monotonic time the last full update ended
        self.last_report: UpdateReport | None = None
        self.error: str | None = None
        self.busy = False  # the last attempt found another writer

    def request(self, paths: list[str] | None = None) -> None:
        """Queue a full update (``paths`` None) or a refresh of these files; start the worker."""
        with self._lock:
            if self._stop.is_set():
                return
            if paths is None:
                self._full = True
            elif len(self._paths) < MAX_QUEUED_PATHS:
                self._paths.update(paths)
            else:
                self._full = True
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="a3s-index-update", daemon=True)
                self._thread.start()

    def refresh_if_older(self, interval_s: float) -> None:
        """A full update unless one ended less than ``interval_s`` ago (or one is running)."""
        with self._lock:
            running = self._thread is not None and self._thread.is_alive()
            recent = self.last_full_done is not None and time.monotonic() - self.last_full_done < interval_s
        if not running and not recent:
            self.request()

    @property
    def running(self) -> bool:
        with self._lock:
            return self._thread is not None and self._thread.is_alive()

    def wait(self, timeout_s: float) -> bool:
        """Block until idle or ``timeout_s``; True when idle."""
        with self._lock:
            thread = self._thread
        if thread is None:
            return True
        thread.join(max(0.0, timeout_s))
        return not thread.is_alive()

    def stop(self, join_s: float = EXIT_JOIN_S) -> None:
        self._stop.set()
        with self._lock:
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(join_s)

    def _take(self) -> tuple[bool, list[str]] | None:
        with self._lock:
            if self._stop.is_set() or (not self._full and not self._paths):
                self._thread = None if threading.current_thread() is self._thread else self._thread
                return None
            full, paths = self._full, sorted(self._paths)
            self._full = False
            self._paths.clear()
            return full, paths

    def _run(self) -> None:
        while True:
            job = self._take()
            if job is None:
                return
            full, paths = job
            try:
                report = update_index(
                    self._workspace,
                    paths=None if full else paths,
                    should_stop=self._stop.is_set,
                    location=self.location,
                )
                with self._lock:
                    self.last_report = report
                    self.error = None
                    self.busy = False
                    if full:
                        self.last_full_done = time.monotonic()
            except store.IndexBusy:
                with self._lock:
                    self.busy = True
                    if full:
                        self.last_full_done = time.monotonic()  # the other writer is on it
                return
            except BaseException as exc:  # a build must never take its host down; report it
                log.warning("index update of %s failed: %s", self.location.key, exc, exc_info=True)
                with self._lock:
                    self.error = f"{type(exc).__name__}: {exc}"
                    if full:
                        self.last_full_done = time.monotonic()
                return


_UPDATERS: dict[str, Updater] = {}
_UPDATERS_LOCK = threading.Lock()


def _own_view(ws: Workspace, location: store.IndexLocation) -> Workspace:
    if location.kind == "git":
        from kernel.gittree import GitTreeWorkspace

        return GitTreeWorkspace(ws.repo_path, ws.commit_id)  # type: ignore[attr-defined]
    return LocalWorkspace(location.key, writable=False, exec_=False)


def updater_for(ws: Workspace, location: store.IndexLocation) -> Updater:
    key = f"{location.kind}:{location.key}"
    with _UPDATERS_LOCK:
        upd = _UPDATERS.get(key)
        if upd is None:
            upd = _UPDATERS[key] = Updater(location, _own_view(ws, location))
        return upd


def status_of(ws: Workspace, location: store.IndexLocation) -> dict[str, Any]:
    """Readiness of the workspace's index as a query reports it (``metadata.index``)."""
    directory = location.existing()
    with _UPDATERS_LOCK:
        upd = _UPDATERS.get(f"{location.kind}:{location.key}")
    summary = store.read_summary(directory) if directory is not None else None
    progress = store.read_progress(directory) if directory is not None else None
    updating = progress is not None or (upd is not None and upd.running)
    complete = bool(summary and summary.get("complete") and not summary.get("stale"))
    if directory is None or summary is None:
        state = "building" if updating else "missing"
    elif updating:
        state = "updating" if complete else "building"
    else:
        state = "ready" if complete else "partial"
    out: dict[str, Any] = {
        "state": state,
        "ready": state in ("ready", "updating"),
        "indexed_files": int(summary.get("files", 0)) if summary else 0,
        "indexed_chunks": int(summary.get("chunks", 0)) if summary else 0,
        "pending_files": (
            max(0, int(progress.get("total_files", 0)) - int(progress.get("done_files", 0)))
            if progress
            else 0
        ),
        "committed_at": summary.get("committed_at") if summary else None,
        "location": location.kind,
        "directory": str(directory) if directory is not None else None,
    }
    if location.kind == "git":
        out["tree"] = location.key
    if upd is not None and upd.error:
        out["error"] = upd.error
    return out


def stop_all() -> None:
    with _UPDATERS_LOCK:
        updaters = list(_UPDATERS.values())
    for upd in updaters:
        upd._stop.set()
    for upd in updaters:
        with contextlib.suppress(Exception):
            upd.stop(EXIT_JOIN_S)


atexit.register(stop_all)
