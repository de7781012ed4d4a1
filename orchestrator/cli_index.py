"""The persistent search index on the ``a3s-fleet`` command line (SPEC Q-8).

    a3s-fleet index build  [--workspace DIR|git:REPO@REV] [--json] [--wait S]
    a3s-fleet index status [--workspace DIR|git:REPO@REV] [--json]

``build`` creates or incrementally updates the workspace's index in the foreground (a progress bar
on a terminal) and prints ``indexed_files``, ``unchanged_files``, ``removed_files``, ``chunks``
and ``seconds`` (plus skipped files and where the index lives). When another process is writing
the index it waits up to ``--wait`` seconds for the lock (default 60), then fails with one line.
Ctrl-C stops it after committing what is done (the next build resumes).

``status`` shows where the index is, its size on disk, what it holds and how fresh it is: files
added, changed or removed since its last commit (judged by size and mtime, nothing is read), or
for a git tree that it is complete. Heavy modules (tantivy, the tool stack) load inside the
commands only, so ``a3s-fleet --help`` stays fast.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

import click

DEFAULT_LOCK_WAIT_S = 60.0


def _workspace(name: str) -> Any:
    from kernel.workspace_names import open_workspace

    return open_workspace(name)


def _one_line(fn: Any) -> Any:
    from orchestrator.cli import _one_line_errors

    return _one_line_errors(fn)


@click.group("index")
def index_group() -> None:
    """Build, update and inspect the persistent search index (search mode 'indexed')."""


@index_group.command("build")
@click.option("--workspace", "-w", default=".", show_default=True, help="Directory or git:REPO@REV.")
@click.option("--json", "as_json", is_flag=True, help="Print the counts as one JSON object.")
@click.option(
    "--wait", "wait_s", type=click.FloatRange(0), default=DEFAULT_LOCK_WAIT_S, show_default=True,
    help="Seconds to wait for another process that is writing the index.",
)  # fmt: skip
def build_cmd(workspace: str, as_json: bool, wait_s: float) -> None:
    """Build or incrementally update WORKSPACE's index, in the foreground."""
    _one_line(_build)(workspace, as_json, wait_s)


def _build(workspace: str, as_json: bool, wait_s: float) -> None:
    from kernel.errors import Unsupported
    from tools.search.indexed import store
    from tools.search.indexed.build import update_index
    from tools.search.indexed.mode import tantivy_available

    if not tantivy_available():
        raise Unsupported("the tantivy package is not installed (pip install tantivy==0.27.0)")
    ws = _workspace(workspace)
    stop = threading.Event()
    bar: Any = None
    tty = sys.stderr.isatty() and not as_json

    def progress(done: int, total: int, nbytes: int) -> None:
        nonlocal bar
        if not tty or total == 0:
            return
        if bar is None:
            bar = click.progressbar(length=total, label="indexing", file=sys.stderr, show_pos=True)
            bar.__enter__()
        bar.update(done - bar.pos)

    try:
        report = update_index(ws, progress=progress, should_stop=stop.is_set, wait_lock_s=wait_s)
    except store.IndexBusy as exc:
        raise Unsupported(f"{exc} (waited {wait_s:g} s; try again or pass --wait)") from None
    except KeyboardInterrupt:
        stop.set()
        raise
    finally:
        if bar is not None:
            bar.__exit__(None, None, None)
    data = report.to_json()
    if as_json:
        click.echo(json.dumps(data))
        return
    click.echo(
        f"indexed_files {data['indexed_files']}  unchanged_files {data['unchanged_files']}"
        f"  removed_files {data['removed_files']}  chunks {data['chunks']}  seconds {data['seconds']:.2f}"
    )
    skipped = {k: v for k, v in data["skipped_files"].items() if v}
    if skipped:
        click.echo("skipped " + ", ".join(f"{k} {v}" for k, v in skipped.items()))
    state = "complete" if data["complete"] else "stopped early (run build again to finish)"
    click.echo(f"index: {data['directory']} ({data['files']} files, {state})")


@index_group.command("status")
@click.option("--workspace", "-w", default=".", show_default=True, help="Directory or git:REPO@REV.")
@click.option("--json", "as_json", is_flag=True, help="Print the status as one JSON object.")
def status_cmd(workspace: str, as_json: bool) -> None:
    """Show where WORKSPACE's index is, its size and its freshness."""
    _one_line(_status)(workspace, as_json)


def _status(workspace: str, as_json: bool) -> None:
    from tools.search.indexed.status import index_report

    data = index_report(_workspace(workspace))
    if as_json:
        click.echo(json.dumps(data))
        return
    if not data["exists"]:
        click.echo(f"no index yet for {data['workspace']} (would live in {data['directory']});")
        click.echo("build it with: a3s-fleet index build")
        return
    age = time.time() - data["committed_at"] if data.get("committed_at") else None
    click.echo(f"index: {data['directory']} ({data['size_bytes'] / 2**20:.1f} MiB on disk)")
    click.echo(
        f"holds {data['files']} files, {data['chunks']} chunks"
        + (f"; last commit {age:.0f} s ago" if age is not None else "")
        + ("" if data["complete"] else "; the last build stopped early")
    )
    if data.get("writer"):
        w = data["writer"]
        click.echo(
            f"being updated now by pid {w.get('pid')} ({w.get('done_files')}/{w.get('total_files')} files)"
        )
    fresh = data["freshness"]
    if fresh.get("tree"):
        click.echo(f"git tree {fresh['tree']}: content never changes")
    elif fresh["fresh"]:
        click.echo("fresh: no file added, changed or removed since the last commit")
    else:
        click.echo(
            f"stale: {fresh['added']} added, {fresh['changed']} changed, {fresh['removed']} removed"
            " since the last commit (a3s-fleet index build updates it)"
        )


def register(main: click.Group) -> None:
    main.add_command(index_group)
