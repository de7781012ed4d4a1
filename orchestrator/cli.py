"""The ``a3s-fleet`` command line (click). Errors print one clear line, never a traceback.

    a3s-fleet tools [--workspace DIR] [--json] [--mcp-config FILE] [--mcp-workspace-config]
    a3s-fleet tool NAME [ARGS_JSON | -] [--workspace DIR] [--policy conservative|context-efficient] [--json]
                   [--model M] [--mcp-config FILE] [--mcp-workspace-config]
    a3s-fleet run PROMPT [--model M] [--allow RULE]… [--deny RULE]… [--json] …  (orchestrator.cli_run)
    a3s-fleet artifact URI [--workspace DIR]

``tool`` exits 0 when the result's ``exit_code`` is 0, else 1. ``--workspace`` defaults to the current
directory and also accepts ``git:REPO@REV``. ``--mcp-config`` adds MCP servers (``orchestrator.cli_mcp``). Fleet commands (``verify``, ``worker``, ``status``) are
added by ``orchestrator.cli_fleet`` (imported lazily inside each command: embedded use never
loads Celery).
"""

from __future__ import annotations

import difflib
import json
import logging
import os
import sys
from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

import click

from kernel.errors import ToolError
from kernel.options import SessionOptions
from orchestrator.cli_mcp import mcp_options, mcp_session_options, report_mcp

F = TypeVar("F", bound=Callable[..., Any])
POLICIES = ("conservative", "context-efficient")


def one_line(exc: BaseException) -> str:
    """``Type: message`` on one bounded line (never empty, never a traceback)."""
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


@click.group(cls=OneLineGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="a3s-fleet")
def main() -> None:
    """a3s-fleet: the governed tool system of an AI coding agent, embedded or as a Celery fleet."""
    _quiet_logs()


def _quiet_logs() -> None:
    """Tracebacks a tool logs stay out of the terminal unless A3S_FLEET_LOG_LEVEL asks for them."""
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
    from orchestrator.agent import Agent

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
    from orchestrator.agent import Agent

    raw = sys.stdin.read() if args_json == "-" else args_json
    try:
        args = json.loads(raw or "{}")
    except json.JSONDecodeError as exc:
        raise click.UsageError(f"ARGS_JSON is not valid JSON: {exc.msg} at position {exc.pos}") from None
    except RecursionError:
        raise click.UsageError("ARGS_JSON is nested too deeply") from None
    if not isinstance(args, dict):
        raise click.UsageError("ARGS_JSON must be a JSON object")
    mcp = mcp_session_options(mcp_config, mcp_workspace_config)
    if model:
        from flows.providers import parse_model_name

        parse_model_name(model)  # a bad name is one line before anything starts
    with Agent(model=model) as agent:
        session = agent.session(
            workspace, SessionOptions(tool_result_transform_policy=_policy(policy), **mcp)
        )
        report_mcp(session)
        known = session.tool_names()
        if name not in known:  # a typo: say so with the nearest names, in one line
            near = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
            hint = f"; did you mean {', '.join(near)}?" if near else ""
            click.echo(f"error: unknown tool {name!r}{hint} (a3s-fleet tools lists them)", err=True)
            sys.exit(2)
        result = session.tool(name, args)
    if as_json:
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


def _register_fleet_commands() -> None:
    from orchestrator import cli_batch, cli_fleet, cli_index, cli_run, cli_workflow

    cli_run.register(main)  # a3s-fleet run PROMPT (the agent)
    cli_batch.register(main)  # a3s-fleet batch JOBS.jsonl --out RESULTS.jsonl
    cli_fleet.register(main)
    cli_index.register(main)  # a3s-fleet index build|status
    cli_workflow.register(main)  # a3s-fleet workflow run|status|history


_register_fleet_commands()


if __name__ == "__main__":
    main()
