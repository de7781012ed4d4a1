"""The ``a3s-fleet`` command line (click). Errors print one clear line, never a traceback.

    a3s-fleet tools [--workspace DIR] [--json] [--mcp-config FILE] [--mcp-workspace-config]
    a3s-fleet tool NAME [ARGS_JSON | -] [--workspace DIR] [--policy conservative|context-efficient] [--json]
                   [--model M] [--mcp-config FILE] [--mcp-workspace-config]
    a3s-fleet run PROMPT [--model M] [--allow RULE]… [--deny RULE]… [--json] …  (orchestrator.cli_run)
    a3s-fleet artifact URI [--workspace DIR]

``tool`` exits 0 when the result's ``exit_code`` is 0, else 1. ``tool read``/``tool ls`` with nothing
configured (no ``A3S_*`` setting, model or MCP option; a directory workspace) run in a one-tool
session (``orchestrator.cli_direct``): the same kernel and pipeline, a fraction of the start-up. ``--workspace`` defaults to the current
directory and also accepts ``git:REPO@REV``. ``--mcp-config`` adds MCP servers (``orchestrator.cli_mcp``).

Start-up is part of every call (issue 13 item 7: ``a3s-fleet --version`` within 2x ``python -c
"import click"``): this module imports click and nothing heavy at module level. The SDK (kernel,
tools, pydantic…) is imported inside the command that needs it, and the commands that live in other
modules (``run``, ``batch``, ``worker``, ``status``, ``events``, ``verify``, ``index``, ``workflow``) are listed in
``LAZY_COMMANDS`` and imported only when named (or when ``--help`` lists them). Add new commands
the same way; ``tests/orchestrator/test_cli_startup.py`` fails when start-up loads Celery, Redis,
httpx, pydantic, numpy, pygit2… again.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import os
import sys
from collections.abc import Callable, Iterator
from functools import wraps
from typing import Any, TypeVar

import click

from orchestrator import __version__
from orchestrator.cli_mcp import mcp_options, mcp_session_options, report_mcp

F = TypeVar("F", bound=Callable[..., Any])
POLICIES = ("conservative", "context-efficient")
# Commands defined elsewhere, as "module:attribute" (a click command, or a register(main) function
# that adds it): imported when the command line names them.
LAZY_COMMANDS = {
    "run": "orchestrator.cli_run:register",  # a3s-fleet run PROMPT (the agent)
    "batch": "orchestrator.cli_batch:batch_cmd",  # a3s-fleet batch JOBS.jsonl --out RESULTS.jsonl
    "worker": "orchestrator.cli_fleet:worker_cmd",
    "status": "orchestrator.cli_fleet:status_cmd",
    "events": "orchestrator.cli_fleet:events_cmd",
    "verify": "orchestrator.cli_verify:verify_cmd",
    "index": "orchestrator.cli_index:index_group",  # a3s-fleet index build|status
    "workflow": "orchestrator.cli_workflow:workflow_group",  # a3s-fleet workflow run|status|history
}
# Their one-line help for `a3s-fleet --help`, so listing them imports none of them (a test checks
# each line is the command's own first paragraph).
LAZY_HELP = {
    "run": "Run the agent on PROMPT (- reads it from stdin) in WORKSPACE; exit 0 when the run succeeds.",
    "batch": "Run the agent jobs of JOBS (one JSON object per line) and append their results to --out.",
    "worker": "Run a fleet worker: `celery worker` with the fleet's app, queue and settings.",
    "status": "Show the fleet: workers, queue lengths, running runs.",
    "events": "Print a fleet session's events as JSON lines (stream id + event), in order, from any process.",
    "verify": "Run the verification PLAN (JSON or TOML) in parallel; exit 1 if a required command fails.",
    "index": "Build, update and inspect the persistent search index (search mode 'indexed').",
    "workflow": "Run durable dynamic workflows (async function run(wf, input)) and read their history.",
}


class LazyGroup(click.Group):
    """A group whose ``LAZY_COMMANDS`` are imported on first lookup (click's documented pattern)."""

    def __init__(
        self,
        *args: Any,
        lazy_commands: dict[str, str] | None = None,
        lazy_help: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_commands = dict(lazy_commands or {})
        self.lazy_help = dict(lazy_help or {})

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """click's command list, with the stored one-liners of commands not imported yet."""
        names = self.list_commands(ctx)
        if not names:
            return
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = []
        for name in names:
            if name not in self.commands and name in self.lazy_help:
                # A stand-in command only to shorten the text exactly as click does for the real one.
                stand_in = click.Command(name, help=self.lazy_help[name])
                rows.append((name, stand_in.get_short_help_str(limit)))
                continue
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy_commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self.lazy_commands:
            module, _, attr = self.lazy_commands[cmd_name].partition(":")
            with gc_paused():
                target = getattr(importlib.import_module(module), attr)
            if isinstance(target, click.Command):
                self.add_command(target, cmd_name)
            else:
                target(self)  # a module's register(main): it adds its command itself
        return super().get_command(ctx, cmd_name)


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Import with the cyclic GC off. Importing the SDK allocates ~10^5 objects that live as long as
    the process; the collections they trigger free nothing and cost about a quarter of start-up."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _sdk() -> tuple[Any, Any]:
    """``(Agent, SessionOptions)``, imported on first use (not at start-up)."""
    with gc_paused():
        from kernel.options import SessionOptions
        from orchestrator.agent import Agent
    # Modules, classes and schemas live until exit: out of the collector's way (and the exit-time
    # collection's), so neither scans them again.
    gc.freeze()
    return Agent, SessionOptions


def one_line(exc: BaseException) -> str:
    """``Type: message`` on one bounded line (never empty, never a traceback)."""
    from kernel.errors import ToolError

    if isinstance(exc, ToolError):
        text = f"{exc.kind}: {exc.message}"
    else:
        detail = str(exc).strip()
        text = f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__
    text = " ".join(text.split())
    return text if len(text) <= 500 else text[:500] + " …"


def _one_line_errors(fn: F) -> F:
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
            click.echo(f"error: {one_line(exc)}", err=True)
            sys.exit(2)

    return wrapper  # type: ignore[return-value]


def _policy(name: str) -> Any:
    from kernel.projection import ToolResultTransformPolicyV1

    return (
        ToolResultTransformPolicyV1.context_efficient()
        if name == "context-efficient"
        else ToolResultTransformPolicyV1.conservative()
    )


class OneLineGroup(click.Group):
    """Click's own errors (a bad option, a missing argument) in one line too, like every other error:
    ``error: <message> (<command> -h for help)`` and click's exit code (2 for usage errors)."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        kwargs["standalone_mode"] = False
        if sys.stdout is None:  # started with stdout closed (`>&-`, some daemons): discard, still run
            sys.stdout = open(os.devnull, "w")  # kept open for the life of the process
        try:
            code = super().main(*args, **kwargs)
        except click.exceptions.NoArgsIsHelpError as exc:  # `a3s-fleet` alone: the help text
            exc.show()
            sys.exit(exc.exit_code)
        except click.UsageError as exc:
            where = exc.ctx.command_path if exc.ctx is not None else "a3s-fleet"
            click.echo(f"error: {' '.join(exc.format_message().split())} ({where} -h for help)", err=True)
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            click.echo(f"error: {' '.join(exc.format_message().split())}", err=True)
            sys.exit(exc.exit_code)
        except click.exceptions.Abort:
            click.echo("error: interrupted", err=True)
            sys.exit(130)
        sys.exit(code if isinstance(code, int) else 0)


class MainGroup(OneLineGroup, LazyGroup):
    """``a3s-fleet``: one-line errors, and commands imported only when named."""


@click.group(
    cls=MainGroup,
    lazy_commands=LAZY_COMMANDS,
    lazy_help=LAZY_HELP,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(__version__, prog_name="a3s-fleet")  # a constant: no importlib.metadata scan
def main() -> None:
    """a3s-fleet: the governed tool system of an AI coding agent, embedded or as a Celery fleet."""
    _quiet_logs()


def _quiet_logs() -> None:
    """Tracebacks a tool logs stay out of the terminal unless A3S_FLEET_LOG_LEVEL asks for them."""
    import logging

    if logging.getLogger().handlers:
        return
    level = os.environ.get("A3S_FLEET_LOG_LEVEL", "").upper()
    if level:
        logging.basicConfig(level=level, stream=sys.stderr)
    else:
        logging.getLogger().addHandler(logging.NullHandler())


@main.command("tools")
@click.option("--workspace", "-w", default=".", show_default=True, help="Directory or git:REPO@REV.")
@click.option("--json", "as_json", is_flag=True, help="Print the model-visible definitions as JSON.")
@mcp_options
@_one_line_errors
def tools_cmd(workspace: str, as_json: bool, mcp_config: str | None, mcp_workspace_config: bool) -> None:
    """List the tools a session on WORKSPACE offers."""
    import json

    Agent, SessionOptions = _sdk()

    mcp = mcp_session_options(mcp_config, mcp_workspace_config)
    with Agent() as agent:
        session = agent.session(workspace, SessionOptions(artifact_store="memory", **mcp))
        report_mcp(session)
        if as_json:
            click.echo(json.dumps(session.tool_definitions(), indent=2))
            return
        visible = {d["name"]: d["description"] for d in session.tool_definitions()}
        for name in session.tool_names():
            desc = visible.get(name, "(hidden alias)")
            click.echo(f"{name:<16} {desc.splitlines()[0][:100]}")


@main.command("tool")
@click.argument("name")
@click.argument("args_json", required=False, default="{}")
@click.option("--workspace", "-w", default=".", show_default=True, help="Directory or git:REPO@REV.")
@click.option("--policy", type=click.Choice(POLICIES), default="conservative", show_default=True)
@click.option(
    "--json", "as_json", is_flag=True, help="Print {name, output, exit_code, metadata, error_kind}."
)
@click.option(
    "--model", "-m", default=None, help="provider:NAME for model-backed tools (default: A3S_MODEL)."
)
@mcp_options
@_one_line_errors
def tool_cmd(
    name: str,
    args_json: str,
    workspace: str,
    policy: str,
    as_json: bool,
    model: str | None,
    mcp_config: str | None,
    mcp_workspace_config: bool,
) -> None:
    """Run one tool host-direct. ARGS_JSON is a JSON object, or - to read it from stdin.
    Model-backed tools (generate_object) use --model or A3S_MODEL."""
    import json

    from kernel.call_args import long_int_reason

    raw = sys.stdin.read() if args_json == "-" else args_json
    try:
        args = json.loads(raw or "{}")
    except json.JSONDecodeError as exc:
        raise click.UsageError(f"ARGS_JSON is not valid JSON: {exc.msg} at position {exc.pos}") from None
    except ValueError as exc:  # valid JSON over Python's int-string limit
        raise click.UsageError(f"ARGS_JSON: {long_int_reason(exc)}") from None
    except RecursionError:
        raise click.UsageError("ARGS_JSON is nested too deeply") from None
    if not isinstance(args, dict):
        raise click.UsageError("ARGS_JSON must be a JSON object")
    mcp = mcp_session_options(mcp_config, mcp_workspace_config)
    if not (model or mcp):
        from orchestrator.cli_direct import direct_eligible

        if direct_eligible(name, workspace, os.environ):  # read/ls: a one-tool session (cli_direct)
            result = _direct(name, args, workspace, policy)
            if result is not None:
                _print_result(result, as_json)
    Agent, SessionOptions = _sdk()  # after the arguments were checked: a usage error stays instant
    if model:
        from flows.providers import parse_model_name

        parse_model_name(model)  # a bad name is one line before anything starts
    # On a terminal a long call shows what it is doing on stderr (orchestrator.tool_progress).
    progress = _progress_line() if not as_json else None
    services = {"event_sink": progress} if progress is not None else {}
    with Agent(model=model) as agent:
        session = agent.session(
            workspace,
            SessionOptions(tool_result_transform_policy=_policy(policy), services=services, **mcp),
        )
        report_mcp(session)
        known = session.tool_names()
        if name not in known:  # a typo: say so with the nearest names, in one line
            import difflib

            near = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
            hint = f"; did you mean {', '.join(near)}?" if near else ""
            click.echo(f"error: unknown tool {name!r}{hint} (a3s-fleet tools lists them)", err=True)
            sys.exit(2)
        try:
            result = session.tool(name, args)
        finally:
            if progress is not None:
                progress.close()
    _print_result(result, as_json)


def _progress_line() -> Any:
    """A ``ToolProgress`` on stderr when it is a terminal, else ``None``."""
    try:
        live = sys.stderr.isatty()
    except (AttributeError, ValueError):
        return None
    if not live:
        return None
    from orchestrator.tool_progress import ToolProgress

    return ToolProgress(sys.stderr)


def _direct(name: str, args: dict[str, Any], workspace: str, policy: str) -> Any:
    # pydantic looks for plugins (an entry-point scan of every installed distribution, ~20 ms) when
    # it builds its first model; a one-tool call loads no user code that could bring one.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    with gc_paused():
        from kernel.options import SessionOptions
        from orchestrator.cli_direct import direct_call

    gc.freeze()
    return direct_call(name, args, workspace, SessionOptions(tool_result_transform_policy=_policy(policy)))


def _print_result(result: Any, as_json: bool) -> None:
    """The result on stdout (stderr when it failed); exit 0 when ``exit_code`` is 0, else 1."""
    if as_json:
        import json

        data = result.to_json()
        data.pop("trust", None)
        click.echo(json.dumps(data, ensure_ascii=False))
    else:
        stream = sys.stdout if result.exit_code == 0 else sys.stderr
        text = result.output
        if result.exit_code != 0 and not text.strip():
            text = f"error: {(result.error_kind or {}).get('type', 'failed')}"
        stream.write(text if text.endswith("\n") else text + "\n")
    sys.exit(0 if result.exit_code == 0 else 1)


@main.command("artifact")
@click.argument("uri")
@click.option("--workspace", "-w", default=".", show_default=True)
@_one_line_errors
def artifact_cmd(uri: str, workspace: str) -> None:
    """Print an artifact's original bytes (a3s://tool-output/...)."""
    from kernel.artifact_files import FileArtifactStore
    from kernel.workspace import LocalWorkspace

    root = LocalWorkspace(workspace, writable=False).root
    data = FileArtifactStore.for_workspace(root).get(uri)
    sys.stdout.buffer.write(data)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
