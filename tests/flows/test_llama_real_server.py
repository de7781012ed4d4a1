"""The agent against a real OpenAI-compatible server: llama.cpp (llama-cpp-python's server) with the
SmolLM2-135M GGUF (issue 8 item 5; SPEC G-6, K-3, G-1..G-4).

The tiny model's answers are poor; what is proved is the protocol, end to end over HTTP: the request
(messages, tools, tool choice) is accepted by a real server, its reply (text or ``tool_calls``,
usage) is parsed, a tool call it makes runs through the kernel, and the run ends with a typed
result whatever the model said. The assertions hold for any answer the model can give.

The session offers the model only ``ls``: llama-cpp-python's function-calling handler compiles each
offered tool's JSON schema into a grammar, and the big ``maxLength`` bounds of the file tools'
schemas make llama.cpp's grammar parser give up (and the server die) — a limit of that server,
documented in docs/agent-cli.md. Requests are non-streaming (``send``): that handler cannot stream
a tool choice it makes itself.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kernel import PermissionPolicy, SessionOptions
from orchestrator import Agent
from tests.llama_server import LlamaServer, free_port
from tests.tools.mcp_support import wait_gone

MODEL = "openai:smollm2"
RUN_TIMEOUT_MS = 180_000
TYPED_ENDINGS = {"end_turn", "max_steps", "timeout"}


def requests_seen(server: LlamaServer) -> int:
    return len(re.findall(r'"POST /v1/chat/completions HTTP/1\.1" 200', server.log_tail(10_000_000)))


@pytest.fixture()
def llama_env(llama_server: LlamaServer, monkeypatch: pytest.MonkeyPatch) -> LlamaServer:
    monkeypatch.setenv("OPENAI_BASE_URL", llama_server.base_url)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    return llama_server


@pytest.mark.timeout(600)
def test_g6_agent_turn_runs_end_to_end_against_a_real_llama_cpp_server(
    llama_env: LlamaServer, agent: Agent, workspace: Path
) -> None:
    options = SessionOptions(
        permission_policy=PermissionPolicy(allow_read_only=True), artifact_store="memory"
    )
    session = agent.session(workspace, options, model=MODEL)
    for name in session.tool_names():
        if name != "ls":
            session.unregister_tool(name)
    before = requests_seen(llama_env)

    result = session.send("List the files in this folder.", max_steps=2, timeout_ms=RUN_TIMEOUT_MS)

    assert result.model == MODEL and result.session_id == session.id
    assert result.stop_reason in TYPED_ENDINGS, (result.stop_reason, result.error, result.message)
    if result.success:
        assert result.stop_reason == "end_turn" and isinstance(result.text, str)
    else:
        assert result.error is not None and result.error["type"] in ("budget_exhausted", "timeout")
    assert 1 <= result.steps <= 2
    # The requests went over the wire to the real server, and its usage came back.
    assert requests_seen(llama_env) - before == result.steps
    assert result.usage.prompt_tokens > 0 and result.usage.completion_tokens > 0
    # Any call the model made went through the kernel as `ls` (the only tool offered) and ran.
    for record in result.tool_calls:
        assert record.tool == "ls" and record.exit_code == 0, record
    # The conversation is in the session: the prompt, then the model's turns.
    messages = session.conversation()
    assert messages[0]["role"] == "user" and "List the files" in messages[0]["content"]
    assert sum(m["role"] == "assistant" for m in messages) == result.steps


def test_llama_server_stops_without_leaving_a_process(tmp_path: Path) -> None:
    server = LlamaServer(free_port(), tmp_path / "server.log").start()
    assert server.proc is not None
    pid = server.proc.pid
    server.stop()
    assert wait_gone(pid, 10)
