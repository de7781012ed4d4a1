"""What the CLI draws on a terminal: a long ``a3s-fleet tool`` call shows its progress, and nothing a
model or a tool chose reaches the terminal as an escape sequence (the boundary: the model controls
its text and every argument; a file or a page it read can carry escapes too). SPEC K-1, K-6, S-5.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from orchestrator.terminal_text import for_terminal
from orchestrator.tool_progress import ToolProgress, describe
from tests.model_servers import ScriptedOpenAIServer
from tests.orchestrator.terminal_support import run_on_terminal

OSC52 = "\x1b]52;c;cHduZWQ=\x07"  # writes "pwned" to the user's clipboard
TITLE = "\x1b]0;owned\x07"


def test_for_terminal_shows_controls_and_keeps_lines() -> None:
    text = f"ok\tcol\r\nnext{OSC52}\rover\u202eevil\x9b31m\x7f"
    shown = for_terminal(text)
    assert "\x1b" not in shown and "\x07" not in shown and "\r" not in shown and "\u202e" not in shown
    assert "\x9b" not in shown and "\x7f" not in shown
    assert shown == "ok\tcol\nnext\\x1b]52;c;cHduZWQ=\\x07\\x0dover\\u202eevil\\x9b31m\\x7f"
    assert for_terminal("plain text, ünïcode ✓\n") == "plain text, ünïcode ✓\n"


def test_progress_status_of_each_delta_kind() -> None:
    mib = 1024 * 1024
    assert describe("download", {"download_progress": {"bytes": 3 * mib, "total_bytes": 12 * mib}}) == (
        "download 3.0 MiB / 12.0 MiB (25%)"
    )
    assert (
        describe("download", {"download_progress": {"bytes": mib, "total_bytes": None}}) == "download 1.0 MiB"
    )
    assert describe("bash", {"stream": "stdout", "text": "a\nbuilding x\n\n"}) == "bash · building x"
    assert describe("fs_scan", {"progress": 3, "total": 10, "message": "dir b"}) == "fs_scan 3/10 dir b"
    assert describe("bash", {"stream": "stdout", "text": "\n"}) is None
    assert describe("x", {"something": 1}) is None and describe("x", "text") is None


class _Terminal:
    def __init__(self) -> None:
        self.written = ""

    def write(self, text: str) -> None:
        self.written += text

    def flush(self) -> None:
        pass


def test_progress_line_is_sanitised_redrawn_and_erased() -> None:
    term = _Terminal()
    progress = ToolProgress(term)  # type: ignore[arg-type]
    delta = SimpleNamespace(type="tool_output_delta", tool="bash", data={"delta": {"text": f"x{TITLE}y\n"}})
    progress.emit(delta)
    assert term.written.startswith("\r\x1b[Kbash · x\\x1b]0;owned\\x07y · ")
    assert "\x07" not in term.written
    progress.emit(SimpleNamespace(type="tool_end", tool="bash", data={}))  # not a delta: nothing drawn
    before = term.written
    progress.close()
    assert term.written == before + "\r\x1b[K"
    progress.emit(delta)  # after close: the result owns the terminal
    assert term.written == before + "\r\x1b[K"


def test_k6_a_long_tool_call_shows_its_progress_on_a_terminal(workspace: Path) -> None:
    script = "for i in 1 2 3 4 5 6 7 8; do echo step-$i; sleep 0.25; done"
    screen, code = run_on_terminal(
        ["tool", "bash", json.dumps({"command": script})], workspace, {}, answers=[]
    )
    assert code == 0, screen
    assert "\r\x1b[Kbash · step-" in screen  # the live line, redrawn while the command runs
    after_erase = screen.split("\x1b[K")[-1]  # the line is erased, then the result is printed
    assert [line.strip() for line in after_erase.splitlines() if line.strip()] == [
        f"step-{i}" for i in range(1, 9)
    ]


def test_k6_tool_json_draws_nothing(workspace: Path) -> None:
    args = json.dumps({"command": "echo one; sleep 0.5; echo two"})
    screen, code = run_on_terminal(["tool", "bash", args, "--json"], workspace, {}, answers=[])
    assert code == 0, screen
    assert "\x1b" not in screen and json.loads(screen.strip().splitlines()[-1])["exit_code"] == 0


def test_s5_run_view_never_sends_a_models_escape_sequences_to_the_terminal(workspace: Path) -> None:
    """The model's text, its call's arguments and the call's failure message all carry escapes."""
    turns = [
        {
            "text": f"Look{OSC52} here.{TITLE}\n",
            "tool_calls": [{"name": "read", "arguments": {"file_path": f"no{OSC52}such.txt"}}],
        },
        {"text": f"Done{TITLE}."},
    ]
    with ScriptedOpenAIServer(turns) as srv:
        screen, code = run_on_terminal(
            ["run", "go", "--model", "openai:scripted-model"], workspace, srv.env(), []
        )
    assert code == 0, screen
    assert "\x07" not in screen and "\x1b]" not in screen  # no OSC sequence of theirs got through
    assert "Look\\x1b]52;c;cHduZWQ=\\x07 here." in screen and "Done\\x1b]0;owned\\x07." in screen
    assert "read no\\x1b]52;c;cHduZWQ=\\x07such.txt" in screen  # the tool line shows the argument


def test_f7_workflow_cli_never_sends_a_scripts_or_steps_escape_sequences_to_the_terminal(
    workspace: Path,
) -> None:
    """A step id, a step's output (in its failure message) and the run's error carry escapes; the live
    progress, the report, ``status`` and ``history`` all show them. Before, each was written raw."""
    flow = workspace / "flow.js"
    title = json.dumps(TITLE)
    flow.write_text(
        "async function run(wf) {\n"
        f"  await wf.step('one' + {title}, 'bash', {{command: 'echo ok'}});\n"
        "  await wf.step('two', 'bash', {command: \"printf 'x\\\\033]52;c;cHduZWQ=\\\\007y'; exit 3\"});\n"
        "}\n"
    )
    screen, code = run_on_terminal(["workflow", "run", "flow.js", "--run-id", "esc-1"], workspace, {}, [])
    assert code == 1, screen
    assert "\x07" not in screen and "\x1b]" not in screen, screen
    assert "one\\x1b]0;owned\\x07" in screen  # the progress line and the report show the step id
    assert "x\\x1b]52;c;cHduZWQ=\\x07y" in screen  # the failure message shows the step's output
    for command in (["workflow", "status", "esc-1"], ["workflow", "history", "esc-1"]):
        screen, code = run_on_terminal(command, workspace, {}, [])
        assert code == 0, screen
        assert "\x07" not in screen and "\x1b]" not in screen, screen
    assert "one\\x1b]0;owned\\x07" in screen  # history names the step
