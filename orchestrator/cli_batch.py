"""``a3s-fleet batch``: batch agent jobs from a JSONL file (SPEC A-5, A-4; issue 9 item 4).

    a3s-fleet batch JOBS.jsonl --out RESULTS.jsonl [--model M] [--workspace DIR] [--concurrency N]
                               [--broker URL] [--allow RULE]… [--deny RULE]…

The whole job file is checked first (one error naming the line, nothing runs). Each finished job is
appended to RESULTS at once; a rerun skips every id whose latest result succeeded. On a terminal a
live bar on stderr shows done, failed, running, rate and ETA; otherwise one summary line at the end.
Exit status: 0 every job succeeded, 1 some job failed, 2 a usage or setup error, 130 interrupted.
Embedded by default; with ``--broker``/``A3S_BROKER_URL`` every job runs on the fleet's workers.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from functools import wraps
from typing import Any, TextIO, TypeVar

import click

from config.settings import Settings
from kernel.errors import ToolError

F = TypeVar("F", bound=Callable[..., Any])
BAR_WIDTH = 24
REDRAW_S = 0.5


def _one_line_errors(fn: F) -> F:
    """Errors print one line and exit 2 (as the other commands)."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except BrokenPipeError:  # `| head` closed stdout: click ends quietly (exit 1), as for any command
            raise
        except KeyboardInterrupt:
            click.echo(
                "\nerror: interrupted (finished jobs are in the results file; rerun to continue)", err=True
            )
            sys.exit(130)
        except Exception as exc:  # one line, non-zero exit (CONVENTIONS): never a traceback
            text = (
                f"{exc.kind}: {exc.message}" if isinstance(exc, ToolError) else f"{type(exc).__name__}: {exc}"
            )
            click.echo(f"error: {' '.join(text.split())[:500]}", err=True)
            sys.exit(2)

    return wrapper  # type: ignore[return-value]


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "--"
    s = int(seconds)
    return (
        f"{s // 3600}h{s % 3600 // 60:02d}m"
        if s >= 3600
        else (f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s")
    )


class ProgressBar:
    """``[#####.....] 45/200 · 2 failed · 8 running · 2.1 jobs/s · ETA 1m14s`` redrawn on one line."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.lock = threading.Lock()
        self.state: Any = None
        self._stop = threading.Event()
        self._ticker = threading.Thread(target=self._tick, name="a3s-batch-bar", daemon=True)
        self._ticker.start()

    def line(self, state: Any) -> str:
        total = max(1, state.total)
        filled = int(BAR_WIDTH * state.finished / total)
        bar = "#" * filled + "." * (BAR_WIDTH - filled)
        return (
            f"[{bar}] {state.finished}/{state.total} · {state.failed} failed · {state.running} running · "
            f"{state.rate():.1f} jobs/s · ETA {_duration(state.eta_s())}"
        )

    def __call__(self, state: Any) -> None:
        with self.lock:
            self.state = state
            self._draw()

    def _draw(self) -> None:
        if self.state is not None:
            self.stream.write("\r\x1b[2K" + self.line(self.state))
            self.stream.flush()

    def _tick(self) -> None:  # rate and ETA move between results too
        while not self._stop.wait(REDRAW_S):
            with self.lock:
                self._draw()

    def close(self) -> None:
        self._stop.set()
        self._ticker.join(timeout=2)
        with self.lock:
            if self.state is not None:
                self.stream.write("\r\x1b[2K" + self.line(self.state) + "\n")
                self.stream.flush()


def register(main: click.Group) -> None:
    main.add_command(batch_cmd)


@click.command("batch")
@click.argument("jobs", type=click.Path(dir_okay=False))
@click.option(
    "--out", "out", required=True, type=click.Path(dir_okay=False), help="Results file (JSONL, appended)."
)
@click.option("--model", default=None, help="Default model, provider:model (default: A3S_MODEL).")
@click.option("--workspace", "-w", default=".", show_default=True, help="Default workspace of the jobs.")
@click.option(
    "--concurrency",
    "-c",
    type=click.IntRange(1, 4096),
    default=None,
    help="Jobs at once (embedded: default 4; fleet: cap on jobs in flight, default all).",
)
@click.option(
    "--broker", default=None, help="Redis URL: run the jobs on the fleet (default: A3S_BROKER_URL)."
)
@click.option("--allow", multiple=True, help="Permission rule to allow, e.g. 'bash(git *)' (repeatable).")
@click.option("--deny", multiple=True, help="Permission rule to deny (repeatable).")
@_one_line_errors
def batch_cmd(
    jobs: str,
    out: str,
    model: str | None,
    workspace: str,
    concurrency: int | None,
    broker: str | None,
    allow: tuple[str, ...],
    deny: tuple[str, ...],
) -> None:
    """Run the agent jobs of JOBS (one JSON object per line) and append their results to --out."""
    from kernel.policy import Rule
    from orchestrator.batch import BatchRequest, run_batch

    for rule in (*allow, *deny):
        Rule.parse(rule)  # a bad rule is one line before anything runs
    settings = Settings()
    if broker:
        settings = settings.model_copy(update={"broker_url": broker})
    req = BatchRequest(
        jobs_path=jobs,
        out_path=out,
        model=model,
        workspace=workspace,
        concurrency=concurrency,
        allow=allow,
        deny=deny,
        settings=settings,
    )
    bar = ProgressBar(sys.stderr) if sys.stderr.isatty() else None
    try:
        state = run_batch(req, bar)
    finally:
        if bar is not None:
            bar.close()
    where = "on the fleet" if not settings.embedded else "embedded"
    click.echo(
        f"batch: {state.done} succeeded, {state.failed} failed, {state.skipped} skipped (already succeeded) "
        f"{where}; results in {out}",
        err=True,
    )
    sys.exit(1 if state.failed else 0)
