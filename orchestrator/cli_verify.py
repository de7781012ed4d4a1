"""``a3s-fleet verify PLAN``: run a verification plan, print live progress, write JSON/JUnit (SPEC F-6).

    a3s-fleet verify PLAN [--junit FILE] [--json FILE] [--broker URL] [--workspace DIR] [--policy NAME]

PLAN is a JSON or TOML file (``flows.plan_files``), read relative to the current directory; the
commands run at the root of ``--workspace`` (default: the current directory). With no broker (no
``--broker``, no ``A3S_BROKER_URL``) everything runs in this process; with one, the agent routes the
fan-out to fleet workers — the plan and this command do not change. ``--policy`` picks the
session's result projection: ``verification`` (default; ``flows.verify.verification_policy``: 8 KiB
head + 23.5 KiB tail per command, the rest kept as an artifact), ``conservative`` or
``context-efficient``.

Exit codes: 0 when every required command passed; 1 when one failed (the reports are still
written); 2 on a bad plan, workspace, broker or report path (checked before anything runs), or a
broker on which no worker consumes the queue, with a one-line ``error:`` message; 130 when
interrupted. The first line names the broker (or ``embedded``) and the session id, which the JSON
and JUnit reports carry too. Progress: one line per finished command (✓/✗, duration) as it finishes; on a terminal
also a status line with a spinner, redrawn in place and erased before each line is printed, so
logs captured from a pipe contain only the finished lines and the summary.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

import click

from kernel.errors import ToolError

# The kernel's own bash deadline must not cut a command before its plan timeout does.
KERNEL_TIMEOUT_GRACE_MS = 10_000
SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
ASCII_SPINNER = "|/-\\"
SPINNER_INTERVAL_S = 0.1
FAILURE_TAIL_LINES = 20
FAILURE_TAIL_CHARS = 4000
POLICIES = ("verification", "conservative", "context-efficient")


def register(main: click.Group) -> None:
    main.add_command(verify_cmd)


@click.command("verify")
@click.argument("plan", type=click.Path(dir_okay=True, path_type=Path))
@click.option(
    "--junit", "junit_path", type=click.Path(dir_okay=False, path_type=Path), help="Write JUnit XML here."
)
@click.option(
    "--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), help="Write the JSON report here."
)
@click.option(
    "--broker",
    default=None,
    help="redis://… broker: run on the fleet (default: $A3S_BROKER_URL, else embedded).",
)
@click.option(
    "--workspace", "-w", default=".", show_default=True, help="Where the commands run (a directory)."
)
@click.option(
    "--policy",
    type=click.Choice(POLICIES),
    default="verification",
    show_default=True,
    help="How each command's output is bounded in the report.",
)
def verify_cmd(
    plan: Path,
    junit_path: Path | None,
    json_path: Path | None,
    broker: str | None,
    workspace: str,
    policy: str,
) -> None:
    """Run the verification PLAN (JSON or TOML) in parallel; exit 1 if a required command fails."""
    from flows.plan_files import load_plan

    try:
        loaded = load_plan(plan)
    except ToolError as exc:
        _fail(f"bad plan: {exc.message}")
    _check_outputs(json_path, junit_path)  # a report we could not write is found out now, not after
    try:
        report = _run(loaded, broker, workspace, policy)
    except KeyboardInterrupt:
        click.echo("verify: interrupted", err=True)
        sys.exit(130)
    try:
        if json_path is not None:
            _write(json_path, report.to_json_text())
        if junit_path is not None:
            _write(junit_path, report.to_junit_xml())
    except OSError as exc:
        _fail(f"cannot write report: {exc.filename or ''}: {exc.strerror or exc}")
    sys.exit(0 if report.passed else 1)


def _run(plan: Any, broker: str | None, workspace: str, policy: str) -> Any:
    from config.settings import Settings
    from flows.verify import run_plan, verification_policy
    from kernel.options import SessionOptions
    from kernel.projection import ToolResultTransformPolicyV1 as Policy
    from orchestrator.agent import Agent
    from orchestrator.cli_fleet import broker_label, fleet_settings

    try:  # --broker, else A3S_BROKER_URL, else embedded: the rule of every a3s-fleet command
        settings = fleet_settings(broker) or Settings()
    except ToolError as exc:
        _fail(exc.message)
    longest = max(c.timeout_ms for c in plan.commands)
    projection = {
        "verification": verification_policy,
        "conservative": Policy.conservative,
        "context-efficient": Policy.context_efficient,
    }[policy]()
    options = SessionOptions(
        tool_result_transform_policy=projection,
        tool_timeouts_ms={"bash": longest + KERNEL_TIMEOUT_GRACE_MS},
    )
    with Agent(settings) as agent:
        try:
            session = agent.session(workspace, options)
        except (ToolError, OSError, ValueError) as exc:
            _fail(f"bad workspace {workspace}: {getattr(exc, 'message', None) or exc}")
        if "bash" not in session.tool_names():
            _fail(f"workspace {workspace} cannot run commands (no exec capability)")
        if not settings.embedded:
            from orchestrator.dispatch_presence import require_workers

            try:  # a fleet without workers says so now, in one line, instead of waiting
                require_workers(settings)
            except ToolError as exc:
                _fail(exc.message)
        where = (
            "embedded" if settings.embedded else f"fleet {broker_label(settings)} (queue {settings.queue})"
        )
        display = Progress(sys.stdout, plan)
        display.header(f"{where}, session {session.id}")
        display.start()
        try:
            report = run_plan(session, plan, display.finished)
        finally:
            display.stop()
        display.summary(report)
    return report


def _fail(message: str) -> Any:
    click.echo(f"error: {message}", err=True)
    sys.exit(2)


def _check_outputs(*paths: Path | None) -> None:
    """Every report path can be written — checked before the plan runs (exit 2, one line)."""
    given = [p for p in paths if p is not None]
    if len({p.resolve() for p in given}) < len(given):
        _fail("--json and --junit name the same file")
    for path in given:
        if path.is_dir():
            _fail(f"cannot write report: {path} is a directory")
        probe = path.with_name(f".{path.name}.probe")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            _fail(f"cannot write report: {exc.filename or path}: {exc.strerror or exc}")


def _write(path: Path, text: str) -> None:
    if path.parent and not path.parent.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


class Progress:
    """The live display: finished lines always, a spinner status line only on a terminal."""

    def __init__(self, stream: IO[str], plan: Any) -> None:
        self.stream = stream
        self.plan = plan
        self.total = len(plan.commands)
        self.done = 0
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        fancy = _can_encode(stream, "✓✗⠋—")
        self.ok_mark, self.bad_mark = ("✓", "✗") if fancy else ("ok", "FAIL")
        self.frames = SPINNER if fancy else ASCII_SPINNER
        self.dash = "—" if fancy else "-"
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = time.monotonic()
        self._status_shown = False

    def header(self, where: str) -> None:
        required = sum(c.required for c in self.plan.commands)
        self._print(
            f"verify: {self.plan.title} {self.dash} {self.total} commands ({required} required), {where}"
        )

    def start(self) -> None:
        self._t0 = time.monotonic()
        if self.tty:
            self._thread = threading.Thread(target=self._spin, name="verify-spinner", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            self._clear_status()

    def finished(self, result: Any) -> None:
        with self._lock:
            self.done += 1
            mark = self.ok_mark if result.ok else self.bad_mark
            seconds = f"{result.duration_ms / 1000:.2f}s"
            detail = "" if result.ok else f"  {_why(result)}"
            optional = "" if result.required else " (optional)"
            self._clear_status()
            self._write(f"  {mark} {result.id} [{result.kind}]{optional} {seconds}{detail}\n")

    def summary(self, report: Any) -> None:
        failed = [c for c in report.commands if not c.ok]
        for c in failed:
            label = "required" if c.required else "optional"
            self._print(f"\n--- {c.id} ({label}) {_why(c)}: $ {c.command}")
            self._print(_tail(c.output))
            if c.artifact_ref:
                self._print(f"(full output: a3s-fleet artifact {c.artifact_ref})")
        counts = report.counts()
        seconds = f"{report.duration_ms / 1000:.2f}s"
        line = f"{counts['passed']}/{counts['total']} passed in {seconds}"
        if counts["required_failed"]:
            names = ", ".join(c.id for c in report.commands if c.blocking)
            line += f"; required failed: {names}"
        if counts["optional_failed"]:
            names = ", ".join(c.id for c in report.commands if not c.required and not c.ok)
            line += f"; optional failed (ignored): {names}"
        self._print(f"\n{report.verdict.upper()}: {line}")

    # -- drawing ---------------------------------------------------------------------------

    def _spin(self) -> None:
        frame = 0
        while not self._stop.wait(SPINNER_INTERVAL_S):
            with self._lock:
                elapsed = time.monotonic() - self._t0
                glyph = self.frames[frame % len(self.frames)]
                self._write(f"\r\x1b[K{glyph} running: {self.done}/{self.total} done, {elapsed:.1f}s")
                self._status_shown = True
            frame += 1

    def _clear_status(self) -> None:
        if self._status_shown:
            self._write("\r\x1b[K")
            self._status_shown = False

    def _print(self, text: str) -> None:
        with self._lock:
            self._clear_status()
            self._write(text + "\n")

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()


def _why(result: Any) -> str:
    if result.timed_out:
        return f"timed out after {result.timeout_ms} ms"
    if result.status == "failed":
        return f"exit code {result.exit_code}"
    if result.status == "cancelled":
        return "cancelled"
    kind = (result.error_kind or {}).get("type", "error")
    first = result.output.strip().splitlines()[0] if result.output.strip() else ""
    return f"did not run ({kind}{': ' + first[:200] if first else ''})"


def _tail(output: str) -> str:
    lines = output.rstrip("\n").splitlines()[-FAILURE_TAIL_LINES:]
    text = "\n".join(lines)[-FAILURE_TAIL_CHARS:]
    return "\n".join("    " + line for line in text.splitlines()) if text else "    (no output)"


def _can_encode(stream: IO[str], sample: str) -> bool:
    encoding = getattr(stream, "encoding", None)
    if not encoding:  # an in-memory text stream takes any str
        return True
    try:
        sample.encode(encoding)
    except (UnicodeEncodeError, LookupError):
        return False
    return True
