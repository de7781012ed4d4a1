"""Dynamic workflows on the command line (SPEC F-1, F-3, F-7).

    a3s-fleet workflow run FILE [--input JSON] [--run-id ID] [--max-concurrent-steps N]
                                [--max-concurrent-generations N] [--timeout-ms MS] [--json]
                                [--broker URL] [--workspace DIR]
    a3s-fleet workflow status RUN_ID [--workspace DIR] [--broker URL] [--json]
    a3s-fleet workflow history RUN_ID [--workspace DIR] [--broker URL] [--json]

``run`` drives the workflow in this process (embedded, or with ``--broker``/``A3S_BROKER_URL`` each
step is a job on the fleet's workers); it prints the run id first, so a run that was interrupted —
even SIGKILLed — is resumed by running the same command with ``--run-id`` (completed steps are not
run again). On a terminal each step's progress is shown on stderr as it happens. ``--json`` prints
``{"run_id", "status": "completed"|"failed", "output", "steps"}``. Exit status: 0 completed, 1 the
run failed, 2 a usage or setup error, 130 interrupted. ``status`` and ``history`` read the run's log
(``<workspace>/.a3s/workflow/<run_id>.jsonl``, or the fleet's Redis Stream with a broker).

Step ids, step names, results and error messages are the script's and its tools' text (a file a step
read, a page it fetched): on a terminal they pass through ``terminal_text.for_terminal``, so an
escape sequence among them is shown, never acted on (OSC 52 writing the clipboard, a cursor move
overwriting what was shown); a pipe gets the text unchanged, and ``--json`` is JSON.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Any, TextIO, TypeVar

import click

from config.settings import Settings
from kernel.errors import InvalidArgument, ToolError
from orchestrator.terminal_text import for_terminal

MAX_SOURCE_BYTES = 192 * 1024
F = TypeVar("F", bound=Callable[..., Any])


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def _shown(text: str, stream: Any) -> str:
    """``text`` as it may be written to ``stream``: escaped on a terminal, unchanged on a pipe."""
    return for_terminal(text) if _isatty(stream) else text


def _echo(text: str, *, err: bool = False) -> None:
    click.echo(_shown(text, sys.stderr if err else sys.stdout), err=err)


def _one_line_errors(fn: F) -> F:
    """Errors print one line and exit 2 (as ``orchestrator.cli``'s commands; not imported from there:
    ``python -m orchestrator.cli`` would import it a second time while it registers this module)."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except BrokenPipeError:  # `| head` closed stdout: click ends quietly (exit 1), as for any command
            raise
        except KeyboardInterrupt:
            click.echo("error: interrupted", err=True)
            sys.exit(130)
        except Exception as exc:  # one line, non-zero exit (CONVENTIONS): never a traceback
            if isinstance(exc, ToolError):
                text = f"{exc.kind}: {exc.message}"
            else:
                text = f"{type(exc).__name__}: {exc}".strip()
            text = " ".join(text.split())
            _echo(f"error: {text[:500]}", err=True)
            sys.exit(2)

    return wrapper  # type: ignore[return-value]


def register(main: click.Group) -> None:
    main.add_command(workflow_group)


@click.group("workflow")
def workflow_group() -> None:
    """Run durable dynamic workflows (async function run(wf, input)) and read their history."""


def _settings(broker: str | None) -> Settings:
    settings = Settings()
    return settings.model_copy(update={"broker_url": broker}) if broker else settings


class _Progress:
    """One line per step event on a terminal (stderr), with the time since the run started."""

    MARKS = {
        "step_started": "▶",
        "step_completed": "✓",
        "step_recovered": "↺",
        "step_failed": "✗",
    }

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.t0 = time.monotonic()

    def __call__(self, event: dict[str, Any]) -> None:
        mark = self.MARKS.get(str(event.get("type")))
        if mark is None:
            return
        name = f" ({event['step_name']})" if event.get("step_name") else ""
        extra = ""
        if event.get("type") == "step_failed":
            extra = ": " + str((event.get("error") or {}).get("message", ""))[:200].replace("\n", " ")
        line = for_terminal(
            f"{event.get('step_id')}{name}{extra}".replace("\n", " ")
        )  # shown on a terminal only
        self.out.write(f"{time.monotonic() - self.t0:7.1f}s {mark} {line}\n")
        self.out.flush()


@workflow_group.command("run")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--input", "input_json", default="{}", show_default=True, help="The run's input, JSON.")
@click.option("--run-id", default=None, help="Resume this run (or name a new one).")
@click.option("--max-concurrent-steps", type=click.IntRange(1, 32), default=None, help="1-32 (default 4).")
@click.option(
    "--max-concurrent-generations", type=click.IntRange(1, 4), default=None, help="1-4 (default 1)."
)
@click.option("--timeout-ms", type=click.IntRange(1), default=None, help="The whole run (default 1 h).")
@click.option("--json", "as_json", is_flag=True, help='Print {"run_id", "status", "output", "steps"}.')
@click.option("--broker", default=None, help="Run the steps on this fleet (redis://…); else A3S_BROKER_URL.")
@click.option("--workspace", "-w", default=".", show_default=True, help="The workspace directory.")
@_one_line_errors
def run_cmd(
    file: Path,
    input_json: str,
    run_id: str | None,
    max_concurrent_steps: int | None,
    max_concurrent_generations: int | None,
    timeout_ms: int | None,
    as_json: bool,
    broker: str | None,
    workspace: str,
) -> None:
    """Run (or resume) the workflow in FILE."""
    from flows.workflow import check_run_id
    from kernel.clock import RandomIds
    from orchestrator.agent import Agent

    source = _read_source(file)
    try:
        run_input = json.loads(input_json)
    except json.JSONDecodeError as exc:
        raise click.UsageError(f"--input is not valid JSON: {exc.msg} at position {exc.pos}") from None
    run_id = check_run_id(run_id) if run_id else RandomIds()("wf")
    limits = {
        "maxConcurrentSteps": max_concurrent_steps,
        "maxConcurrentGenerations": max_concurrent_generations,
        "timeoutMs": timeout_ms,
    }
    click.echo(f"workflow run {run_id}", err=True)
    progress = _Progress(sys.stderr) if sys.stderr.isatty() else None
    try:
        with Agent(_settings(broker)) as agent:
            session = agent.session(workspace)
            result = session.workflow(
                source=source,
                input=run_input,
                run_id=run_id,
                name=file.name,
                limits={k: v for k, v in limits.items() if v is not None},
                progress=progress,
            )
    except KeyboardInterrupt:
        click.echo(f"interrupted: resume with --run-id {run_id}", err=True)
        sys.exit(130)
    info = result.metadata.get("workflow") or {}
    status = info.get("status") or ("completed" if result.exit_code == 0 else "failed")
    if as_json:
        data = {
            "run_id": info.get("run_id", run_id),
            "status": status,
            "output": result.metadata.get("output"),
            "steps": info.get("steps", []),
        }
        if status != "completed":
            data["error"] = info.get("error") or result.output.strip()
        click.echo(json.dumps(data, ensure_ascii=False))
    else:
        stream = sys.stdout if result.exit_code == 0 else sys.stderr
        text = result.output if result.output.endswith("\n") else result.output + "\n"
        stream.write(_shown(text, stream))
    sys.exit(0 if status == "completed" else 1)


def _read_source(file: Path) -> str:
    try:
        size = file.stat().st_size
    except FileNotFoundError:
        raise InvalidArgument(f"no such workflow file: {file}") from None
    if size > MAX_SOURCE_BYTES:
        raise InvalidArgument(f"workflow file {file} is {size} bytes, over {MAX_SOURCE_BYTES}")
    try:
        return file.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidArgument(f"workflow file {file} is not UTF-8: {exc}") from None


def _logs(broker: str | None, workspace: str) -> Any:
    settings = _settings(broker)
    if settings.broker_url:
        from orchestrator.dispatch_workflow import fleet_workflow_logs

        return fleet_workflow_logs(settings)
    from flows.workflow import FileEventLogs

    root = Path(workspace)
    if not root.is_dir():
        raise InvalidArgument(f"workspace {workspace} is not a directory")
    return FileEventLogs(root)


async def _read(logs: Any, run_id: str) -> tuple[list[dict[str, Any]], bool]:
    envelopes = await logs.read(run_id)
    return envelopes, await logs.running(run_id)


@workflow_group.command("status")
@click.argument("run_id")
@click.option("--workspace", "-w", default=".", show_default=True)
@click.option("--broker", default=None, help="Read the fleet's log (redis://…); else A3S_BROKER_URL.")
@click.option("--json", "as_json", is_flag=True)
@_one_line_errors
def status_cmd(run_id: str, workspace: str, broker: str | None, as_json: bool) -> None:
    """Where a run stands: running, completed, failed, interrupted; its steps by status."""
    from flows.workflow import History, check_run_id
    from kernel.errors import NotFound

    check_run_id(run_id)
    envelopes, running = asyncio.run(_read(_logs(broker, workspace), run_id))
    if not envelopes:
        raise NotFound(f"no workflow run {run_id}", path=run_id)
    summary = History.fold(run_id, envelopes).summary()
    if running:
        summary["status"] = "running"
    elif summary["status"] in ("created", "running"):
        summary["status"] = "interrupted"  # no driver holds it and it never ended: resume it
    if as_json:
        click.echo(json.dumps(summary, ensure_ascii=False, default=str))
        return
    steps = ", ".join(f"{n} {s}" for s, n in sorted(summary["steps"].items())) or "none"
    _echo(f"run      {run_id}")
    _echo(f"status   {summary['status']}")
    _echo(f"query    {summary.get('query')}")
    _echo(f"starts   {summary.get('starts')}")
    _echo(f"steps    {steps}")
    if summary.get("error"):
        _echo(f"error    {json.dumps(summary['error'], ensure_ascii=False)[:500]}")


@workflow_group.command("history")
@click.argument("run_id")
@click.option("--workspace", "-w", default=".", show_default=True)
@click.option("--broker", default=None, help="Read the fleet's log (redis://…); else A3S_BROKER_URL.")
@click.option("--json", "as_json", is_flag=True, help="One envelope per line, as stored.")
@_one_line_errors
def history_cmd(run_id: str, workspace: str, broker: str | None, as_json: bool) -> None:
    """Every event of a run, in order."""
    from flows.workflow import check_run_id
    from kernel.errors import NotFound

    check_run_id(run_id)
    envelopes, _ = asyncio.run(_read(_logs(broker, workspace), run_id))
    if not envelopes:
        raise NotFound(f"no workflow run {run_id}", path=run_id)
    for env in envelopes:
        if as_json:
            click.echo(json.dumps(env, ensure_ascii=False))
            continue
        ev = env.get("event") or {}
        when = time.strftime("%H:%M:%S", time.localtime(int(env.get("timestamp", 0)) / 1000))
        detail = {k: v for k, v in ev.items() if k not in ("type", "step_id", "output", "input", "spec")}
        step = f" {ev['step_id']}" if "step_id" in ev else ""
        extra = f" {json.dumps(detail, ensure_ascii=False, default=str)[:300]}" if detail else ""
        _echo(f"{env.get('sequence', 0):>5} {when} {ev.get('type')}{step}{extra}")
