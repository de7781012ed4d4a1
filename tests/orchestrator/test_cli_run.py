"""``a3s-fleet run`` (issue 8 item 4): an agent run from the shell, over the OpenAI wire format of a
scripted loopback server (SPEC K-1, K-3, G-6, S-5).

Every test runs the real CLI in a subprocess. Without a terminal nothing can be confirmed, so the
default policy is: read-only calls run, the rest is denied unless ``--allow`` names it; ``--deny``
wins over everything. The live view is checked on a real pseudo-terminal.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.model_servers import ScriptedOpenAIServer
from tests.orchestrator.terminal_support import run_on_terminal

BIN = [sys.executable, "-m", "orchestrator.cli"]
REPO = Path(__file__).resolve().parents[2]
MODEL = "openai:scripted-model"
SYS_TGKILL = 234  # x86_64


def run(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("A3S_", "OPENAI_", "ANTHROPIC_"))}
    environ.update(env or {})
    return subprocess.run(
        [*BIN, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=environ,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def tool_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in body["messages"] if m.get("role") == "tool"]


def test_k3_run_json_runs_a_read_only_call_and_sends_its_result_back(workspace: Path) -> None:
    turns = [
        {"text": "Reading.", "tool_calls": [call("read", file_path="README.md")]},
        {"text": "It says hello world.", "usage": {"prompt_tokens": 40, "completion_tokens": 6}},
    ]
    with ScriptedOpenAIServer(turns) as srv:
        out = run(["run", "What does the README say?", "--model", MODEL, "--json"], workspace, srv.env())
        assert out.returncode == 0, out.stderr
        data = json.loads(out.stdout)
        assert data["success"] is True and data["text"] == "It says hello world."
        assert data["steps"] == 2 and data["session_id"]
        assert [(c["tool"], c["exit_code"]) for c in data["tool_calls"]] == [("read", 0)]
        assert data["usage"]["completion_tokens"] >= 6 and data["usage"]["prompt_tokens"] >= 40
        # The projected result reached the model in the second request; the model name, not a key.
        assert len(srv.requests) == 2
        second = srv.requests[1].body
        assert "hello world" in tool_messages(second)[0]["content"]
        assert second["model"] == "scripted-model"
        assert srv.requests[0].headers["authorization"] == "Bearer sk-test-scripted"


def test_k3_denied_and_unconfirmable_calls_never_run_and_allow_opens_one(workspace: Path) -> None:
    turns = [
        {
            "text": "Working.",
            "tool_calls": [
                call("read", file_path="notes.txt"),  # read-only, but --deny names it
                call("write", file_path="new.txt", content="x"),  # not read-only, nobody to ask
                call("write", file_path="src/ok.txt", content="y"),  # --allow write(src/*)
            ],
        },
        {"text": "Done."},
    ]
    with ScriptedOpenAIServer(turns) as srv:
        args = [
            "run",
            "go",
            "--model",
            MODEL,
            "--json",
            "--deny",
            "read(notes.txt)",
            "--allow",
            "write(src/*)",
        ]
        out = run(args, workspace, srv.env())
        assert out.returncode == 0, out.stderr
        data = json.loads(out.stdout)
        calls = [(c["tool"], c["exit_code"], (c["error_kind"] or {}).get("type")) for c in data["tool_calls"]]
        assert calls == [
            ("read", 1, "permission_denied"),
            ("write", 1, "permission_denied"),
            ("write", 0, None),
        ]
        assert not (workspace / "new.txt").exists()
        assert (workspace / "src" / "ok.txt").read_text() == "y"
        results = [m["content"] for m in tool_messages(srv.requests[1].body)]
        assert "permission_denied" in results[0] and "permission_denied" in results[1]


def test_k3_max_steps_stops_a_looping_model_with_exit_1(workspace: Path) -> None:
    loop_turn = {"text": "Again.", "tool_calls": [call("ls", path=".")]}
    with ScriptedOpenAIServer([loop_turn], repeat_last=True) as srv:
        out = run(["run", "loop", "--model", MODEL, "--max-steps", "3", "--json"], workspace, srv.env())
        assert out.returncode == 1
        data = json.loads(out.stdout)
        assert data["success"] is False and data["steps"] == 3
        assert data["error"]["type"] == "budget_exhausted" and data["error"]["resource"] == "max_steps"
        assert len(srv.requests) == 3
        assert out.stderr.strip().startswith("error: budget_exhausted") and out.stderr.count("\n") == 1


def test_g6_provider_failures_are_one_line_never_a_traceback(workspace: Path, tmp_path: Path) -> None:
    with ScriptedOpenAIServer([{"status": 401, "body": {"error": {"message": "bad key"}}}]) as srv:
        out = run(["run", "hi", "--model", MODEL], workspace, srv.env())
    assert out.returncode == 1 and "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: provider_error")
    # Nothing listens there: transport, after the loop's bounded (and shown) retries.
    refused = run(["run", "hi", "--model", MODEL], workspace, {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1"})
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert refused.stderr.strip().splitlines()[-1].startswith("error: transport")
    for args in (["--model", "nope:x"], [], ["--model", MODEL, "--allow", "bash("]):
        bad = run(["run", "hi", *args], workspace)
        assert bad.returncode == 2 and bad.stderr.count("\n") == 1, bad.stderr
        assert bad.stderr.startswith("error: invalid_argument")


def test_s5_scripted_demo_of_the_readme_runs_offline() -> None:
    """The README's demo: `a3s-fleet run ... --model scripted:examples/agent-demo.json` in the repo."""
    out = run(
        ["run", "What is this project?", "--model", "scripted:examples/agent-demo.json", "--json"], REPO
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["success"] and "a3s-fleet" in data["text"]
    assert [c["tool"] for c in data["tool_calls"]] == ["read", "ls", "search"]
    assert all(c["exit_code"] == 0 for c in data["tool_calls"])


def test_s5_terminal_view_streams_text_shows_tool_lines_a_spinner_and_asks(workspace: Path) -> None:
    turns = [
        {"text": "Running a slow one.", "tool_calls": [call("bash", command="sleep 1; echo slept")]},
        {"text": "Writing.", "tool_calls": [call("write", file_path="asked.txt", content="z")]},
        {"text": "All done."},
    ]
    with ScriptedOpenAIServer(turns) as srv:
        screen, code = run_on_terminal(
            ["run", "go", "--model", MODEL], workspace, srv.env(), answers=["y", "n"]
        )
    assert code == 0, screen
    assert "Running a slow one." in screen and "All done." in screen
    assert "allow bash sleep 1; echo slept? (no permission rule matched) [y/N]" in screen
    assert "⠋ bash sleep 1; echo slept" in screen  # the spinner of a long call
    assert "✓ bash sleep 1; echo slept (" in screen
    assert "✗ write asked.txt (" in screen and "confirmation_rejected" in screen
    assert not (workspace / "asked.txt").exists()


@pytest.mark.parametrize("as_json", [False, True], ids=["stream", "json"])
@pytest.mark.parametrize("target", ["process", "other_thread"])
def test_k6_ctrl_c_cancels_the_run_and_its_running_call(workspace: Path, as_json: bool, target: str) -> None:
    """SIGINT while a model-chosen command runs: exit 130 with one line, the command is killed.
    The kernel hands a process signal to any thread: delivered to one that is not the main thread
    (which waits for the run), it must still stop the run at once, not when the next event comes."""
    turns = [{"text": "Waiting.", "tool_calls": [call("bash", command="sleep 37; touch late.txt")]}]
    with ScriptedOpenAIServer(turns) as srv:
        # A user's shell: nothing inherited from whatever ran earlier in this pytest process (its
        # environment, or a SIGINT disposition or mask a library left behind).
        environ = {k: v for k, v in os.environ.items() if k in HERMETIC_ENV}
        environ.update(srv.env())
        args = [*BIN, "run", "go", "--model", MODEL, "--allow", "bash(sleep *)", "--allow", "bash(touch *)"]
        args += ["--json"] if as_json else []
        proc = subprocess.Popen(
            args,
            cwd=workspace,
            env=environ,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=default_sigint,
        )
        try:
            deadline = time.monotonic() + 60
            while not sleeping() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert sleeping(), "the command never started"
            if target == "process":
                proc.send_signal(signal.SIGINT)
            else:
                signal_other_thread(proc.pid, signal.SIGINT)
            try:
                _, err = proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                raise AssertionError(f"no exit 30 s after SIGINT; {signal_state(proc.pid)}") from None
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()  # closes the pipes even when the wait above timed out
    assert proc.returncode == 130 and err.strip().splitlines()[-1] == "error: interrupted", err
    deadline = time.monotonic() + 10
    while sleeping() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not sleeping() and not (workspace / "late.txt").exists()


HERMETIC_ENV = frozenset({"PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "PYTHONPATH", "VIRTUAL_ENV"})


def default_sigint() -> None:
    """In the child before exec: SIGINT delivered and handled as in a terminal."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def signal_state(pid: int) -> str:
    """The process's signal masks and thread count, for a failure message."""
    with open(f"/proc/{pid}/status") as fh:
        return " ".join(line.strip() for line in fh if line.startswith(("Sig", "Shd", "Threads")))


def signal_other_thread(pid: int, sig: int) -> None:
    """Deliver ``sig`` to one thread of ``pid`` that is not its main thread (tgkill)."""
    tids = [int(t) for t in os.listdir(f"/proc/{pid}/task") if int(t) != pid]
    assert tids, "the CLI runs no other thread"
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(SYS_TGKILL, pid, tids[0], sig) != 0:
        raise OSError(ctypes.get_errno(), "tgkill")


def sleeping() -> bool:
    """Is the test's `sleep 37` running anywhere on this machine?"""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as fh:
                    if fh.read() == b"sleep\x0037\x00":
                        return True
            except OSError:
                continue
    return False


SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


def test_g1_cli_tool_generate_object_with_model_and_bad_arguments_before_any_request(workspace: Path) -> None:
    """``a3s-fleet tool generate_object ARGS --model M``: the object over the OpenAI wire format;
    arguments that break G-1 fail with one line before the server sees anything."""
    turn = {"tool_calls": [{"name": "result", "arguments": {"name": "a3s-fleet"}}]}
    with ScriptedOpenAIServer([turn]) as srv:
        args = json.dumps({"schema": SCHEMA, "prompt": "Name the project"})
        out = run(["tool", "generate_object", args, "--model", MODEL], workspace, srv.env())
        assert out.returncode == 0, out.stderr
        data = json.loads(out.stdout)
        assert data["object"] == {"name": "a3s-fleet"} and data["mode_used"] == "tool"
        assert srv.requests[0].body["tool_choice"]["function"]["name"] == "result"
        seen = len(srv.requests)
        blank = json.dumps({"schema": SCHEMA, "prompt": "  "})
        bad = run(["tool", "generate_object", blank, "--model", MODEL], workspace, srv.env())
        assert bad.returncode == 1 and bad.stderr.count("\n") == 1 and "prompt" in bad.stderr, bad.stderr
        assert len(srv.requests) == seen
    wrong = run(["tool", "generate_object", args, "--model", "gpt-4o"], workspace)
    assert wrong.returncode == 2 and wrong.stderr.startswith("error: invalid_argument"), wrong.stderr


def test_f1_a_bad_or_unreachable_broker_is_one_line_before_the_run(workspace: Path) -> None:
    for broker, kind in (("notaurl", "invalid_argument"), ("redis://u:secret@127.0.0.1:9/0", "transport")):
        demo = f"scripted:{REPO / 'examples' / 'agent-demo.json'}"
        out = run(["run", "hi", "--model", demo, "--broker", broker], workspace)
        assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
        assert out.stderr.startswith(f"error: {kind}") and "secret" not in out.stderr
