"""``a3s-fleet run PROMPT``: one agent run — model turns whose tool calls go through the kernel (issue 8 item 4).

    a3s-fleet run PROMPT [--model M] [--workspace DIR] [--max-steps N] [--allow RULE]… [--deny RULE]…
                  [--json] [--broker URL] [--mcp-config FILE] [--mcp-workspace-config]

PROMPT ``-`` reads the prompt from stdin. The model is ``provider:NAME`` (``openai:…``, ``anthropic:…``,
``scripted:FILE``) from ``--model`` or ``A3S_MODEL``; endpoints and keys come from this process's
environment only (``OPENAI_BASE_URL``/``OPENAI_API_KEY``, ``ANTHROPIC_*``).

Policy (docs/agent-cli.md): read-only calls are allowed (``PermissionPolicy(allow_read_only=True)``);
``--allow``/``--deny`` add rules in the reference syntax (``bash(git *)``, ``write(src/*)``,
``mcp__github__*``), deny first. Anything else asks: on a terminal the user answers y/N; with no
terminal to ask (stdin or stderr not a TTY, the prompt read from stdin, ``--json``, a fleet run) it
is denied.

Output: on a terminal the run is shown live (``orchestrator.run_view``): the model's text on
stdout as it streams, each tool call on stderr with its status and duration, a spinner while one
runs long. ``--json`` prints one object: ``success``, ``text``, ``session_id``, ``steps``,
``tool_calls`` (``[{tool, exit_code, …}]``), ``usage``, ``error``, ``stop_reason``, ``model``.
With a broker (``--broker`` or ``A3S_BROKER_URL``) the run is one ``a3s.agent`` job on a worker
(``orchestrator.dispatch_run``); the view follows the session's Redis Stream.
Exit 0 when the run succeeded, 1 when it did not (a provider failure is one ``error:`` line),
2 on bad input (model name, rule, workspace), 130 when interrupted.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import sys
import threading
from typing import Any

import click

from orchestrator.cli_mcp import mcp_options, mcp_session_options, report_mcp

# A person at a terminal may take a while to answer; the kernel's default (30 s) suits programs.
INTERACTIVE_CONFIRMATION_TIMEOUT_MS = 600_000
JSON_KEYS = ("success", "text", "session_id", "steps", "tool_calls", "usage")


def register(main: click.Group) -> None:
    # The one-line error wrapper lives in orchestrator.cli, which imports this module: applied here.
    # (functools.wraps carries the click parameters over.)
    from orchestrator.cli import _one_line_errors

    main.add_command(click.command("run")(_one_line_errors(run_cmd)))


@click.argument("prompt")
@click.option("--model", "-m", default=None, help="provider:NAME (default: A3S_MODEL).")
@click.option("--workspace", "-w", default=".", show_default=True, help="Directory or git:REPO@REV.")
@click.option("--max-steps", type=click.IntRange(1, 1000), default=None, help="Model requests at most.")
@click.option("--allow", multiple=True, metavar="RULE", help="Allow calls matching RULE (repeatable).")
@click.option("--deny", multiple=True, metavar="RULE", help="Deny calls matching RULE (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object with the run's result.")
@click.option("--broker", default=None, help="Redis URL of a fleet broker (default: A3S_BROKER_URL).")
@mcp_options
def run_cmd(
    prompt: str,
    model: str | None,
    workspace: str,
    max_steps: int | None,
    allow: tuple[str, ...],
    deny: tuple[str, ...],
    as_json: bool,
    broker: str | None,
    mcp_config: str | None,
    mcp_workspace_config: bool,
) -> None:
    """Run the agent on PROMPT (- reads it from stdin) in WORKSPACE; exit 0 when the run succeeds.

    Read-only calls run; --deny/--allow RULE (e.g. 'bash(git *)', 'write(src/*)') decide others;
    anything else asks on a terminal and is denied without one."""
    from config.settings import Settings
    from flows.providers import parse_model_name
    from kernel.errors import InvalidArgument
    from kernel.options import SessionOptions
    from kernel.policy import PermissionPolicy
    from orchestrator.agent import Agent
    from orchestrator.run_view import RunView, error_text
    from orchestrator.terminal_text import for_terminal

    text = sys.stdin.read() if prompt == "-" else prompt
    if not text.strip():
        raise InvalidArgument("PROMPT is empty")
    from orchestrator.cli_fleet import fleet_settings, ping_broker

    # A malformed or unreachable broker is one line and exit 2 before anything starts (issue 13).
    settings = fleet_settings(broker) or Settings()
    if not settings.embedded:
        ping_broker(settings)
    name = model or getattr(settings, "model", None) or os.environ.get("A3S_MODEL") or None
    if not name:
        raise InvalidArgument(
            "no model: pass --model or set A3S_MODEL (openai:NAME, anthropic:NAME or scripted:FILE)"
        )
    parse_model_name(name)  # a bad name is one line before anything starts
    policy = PermissionPolicy(allow=allow, deny=deny, allow_read_only=True)
    on_fleet = not settings.embedded
    # Nobody can answer a question mid-run in JSON mode, nor on a worker (the fleet path).
    interactive = (
        prompt != "-" and _isatty(sys.stdin) and _isatty(sys.stderr) and not as_json and not on_fleet
    )
    view = None if as_json else RunView(sys.stdout, sys.stderr)
    asker = _Asker(view) if interactive and view is not None else None
    options = SessionOptions(
        permission_policy=policy,
        confirmation=asker,
        confirmation_timeout_ms=INTERACTIVE_CONFIRMATION_TIMEOUT_MS,
        **mcp_session_options(mcp_config, mcp_workspace_config),
    )
    try:
        with Agent(settings, model=name) as agent:
            session = agent.session(workspace, options)
            report_mcp(session)
            if on_fleet:
                from orchestrator.dispatch_run import run_on_fleet

                result = run_on_fleet(agent, session, text, name, max_steps, view)
            elif view is None:
                result = session.send(text, max_steps=max_steps)
            else:
                stream = session.stream(text, max_steps=max_steps)
                for event in stream:
                    view.event(event)
                    if asker is not None:
                        asker.event(event)
                result = stream.result
        if view is not None and not view.text_shown:
            view.text(result.text)  # no text was streamed (a worker's run, a blocking fallback)
    finally:
        if view is not None:
            view.close()
    data = result.to_json()
    if as_json:
        missing = [k for k in JSON_KEYS if k not in data]
        if missing:  # the contract of --json; a gap here is a bug, reported as one line
            raise RuntimeError(f"run result lacks {missing}")
        click.echo(json.dumps(data, ensure_ascii=False))
    if not result.success:
        kind = (result.error or {}).get("type") or "failed"
        message = " ".join(str(getattr(result, "message", "") or "").split())
        line = f"error: {kind}: {message}" if message else f"error: {error_text(result.error)}"
        click.echo(for_terminal(line) if _isatty(sys.stderr) else line, err=True)
    sys.exit(0 if result.success else 1)


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


class _Asker:
    """The confirmation handler on a terminal. The kernel emits ``confirmation_request`` before it
    calls the handler, so the question is asked by the thread that renders the events, in order
    (never on the event loop): the handler only waits for the answer that thread gives."""

    def __init__(self, view: Any) -> None:
        self.view = view
        self._answers: dict[str, concurrent.futures.Future[bool]] = {}
        self._lock = threading.Lock()

    def _answer(self, call_id: str) -> concurrent.futures.Future[bool]:
        with self._lock:
            return self._answers.setdefault(call_id, concurrent.futures.Future())

    async def __call__(self, request: Any) -> bool:
        try:
            return await asyncio.wrap_future(self._answer(request.call_id))
        finally:
            with self._lock:
                self._answers.pop(request.call_id, None)

    def event(self, event: Any) -> None:
        """Called with every event, after the view drew it."""
        if event.type != "confirmation_request":
            return
        reason = (event.data or {}).get("reason") or "confirmation"
        question = f"allow {self.view.label(event.call_id, event.tool)}? ({reason}) [y/N] "
        answer = self._answer(event.call_id)
        if not answer.done():
            answer.set_result(self.view.ask(question))
