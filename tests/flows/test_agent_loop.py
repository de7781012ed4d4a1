"""The agent loop over the OpenAI wire format (streaming and not) and Anthropic's, with scripted
loopback servers (SPEC A-1, A-2, A-3, K-1, K-3, K-4, K-5, K-6, S-5, R-6).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flows.agent import SUSPEND_KEY, run_agent
from kernel.budget import Budget
from kernel.options import SessionOptions
from kernel.policy import PermissionPolicy
from kernel.result import ToolResult
from orchestrator import Agent
from tests.model_servers import ScriptedAnthropicServer, ScriptedOpenAIServer

ROOT = Path(__file__).resolve().parents[2]
READ_ONLY = {"read_only": True, "idempotent": True, "cancel_safe": True, "max_parallelism": 8}
STREAM_MODES = pytest.mark.parametrize("streaming", [True, False], ids=["stream", "send"])


def _turn(*calls: tuple[str, Any], text: str = "", **extra: Any) -> dict[str, Any]:
    return {
        "text": text,
        "tool_calls": [{"id": f"m{i}", "name": n, "arguments": a} for i, (n, a) in enumerate(calls)],
        **extra,
    }


@pytest.fixture()
def model_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """``model_env(server)``: point this process's SDK variables at a scripted server."""

    def use(srv: Any) -> Any:
        for k, v in srv.env().items():
            monkeypatch.setenv(k, v)
        return srv

    yield use


@pytest.fixture()
def agent() -> Iterator[Agent]:
    a = Agent(model="openai:test-model")
    yield a
    a.close()


def _run(session: Any, prompt: str, streaming: bool, **kw: Any) -> tuple[Any, list[Any]]:
    """``send`` or ``stream`` one prompt; the result and the events the run produced."""
    if streaming:
        stream = session.stream(prompt, **kw)
        events = list(stream)
        return stream.result, events
    after = max((e.seq for e in session.events()), default=0)
    result = session.send(prompt, **kw)
    return result, list(session.events(after))


def _tool_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in body["messages"] if m["role"] == "tool"]


@STREAM_MODES
def test_a2_read_only_call_runs_and_its_projected_result_goes_back(
    agent: Agent, workspace: Path, model_env: Any, streaming: bool
) -> None:
    """A-2/K-1/R-6: the model's read runs through the kernel with origin agent; its projected
    (bounded) output, with the artifact URI when cut, is what the model reads next."""
    script = [
        _turn(("read", {"file_path": "README.md"}), ("dump", {}), text="Reading."),
        {"text": "README says hello world."},
    ]
    with model_env(ScriptedOpenAIServer(script)) as srv:
        s = agent.session(
            workspace, SessionOptions(permission_policy=PermissionPolicy(allow=["read", "dump"]))
        )
        big_output = "".join(f"row {i}\n" for i in range(40_000))  # ~300 KB
        s.register_tool("dump", lambda a: big_output, description="dumps", parameters={"type": "object"})
        result, events = _run(s, "What does the README say?", streaming)
        second = srv.requests[1].body
    assert result.success and result.text == "README says hello world." and result.steps == 2
    assert [(c.tool, c.exit_code) for c in result.tool_calls] == [("read", 0), ("dump", 0)]
    readme, big = _tool_messages(second)
    assert "hello world" in readme["content"] and readme["tool_call_id"] == "m0"
    assert len(big["content"].encode()) < 104_000  # the conservative head (100 KiB) + markers, not 300 KB
    assert "a3s://tool-output/" in big["content"]  # the model is told where the original is
    starts = [e for e in events if e.type == "tool_start"]
    assert [e.origin for e in starts] == ["agent", "agent"]
    assert [e.data["model_call_id"] for e in starts] == ["m0", "m1"]
    types = [e.type for e in events]
    assert types[0] == "run_start" and types[-1] == "run_end"
    assert ("text_delta" in types) is streaming
    assert bool(srv.requests[0].body.get("stream")) is streaming
    assert result.usage.prompt_tokens > 0 and result.usage.completion_tokens > 0


def test_a2_k8_one_turn_runs_at_most_the_per_turn_cap_of_calls(
    agent: Agent, workspace: Path, model_env: Any
) -> None:
    """A-2/K-8: a model answering with 200 calls in one turn has 64 run; the other 136 are answered
    budget_exhausted ("not run") so every call still gets exactly one tool message."""
    from flows.agent.loop import MAX_TOOL_CALLS_PER_TURN

    many = _turn(*[("ls", {"path": "."})] * 200)
    with model_env(ScriptedOpenAIServer([many, {"text": "done"}])) as srv:
        s = agent.session(workspace, SessionOptions(permission_policy=PermissionPolicy(allow=["ls"])))
        result, events = _run(s, "list it a lot", False)
        answers = _tool_messages(srv.requests[1].body)
    assert result.success and result.text == "done"
    assert len(result.tool_calls) == MAX_TOOL_CALLS_PER_TURN == 64
    assert len([e for e in events if e.type == "tool_start"]) == 64
    assert sorted(int(m["tool_call_id"][1:]) for m in answers) == list(range(200))
    refused = [m for m in answers if m["content"].startswith("Error (budget_exhausted): not run")]
    assert sorted(int(m["tool_call_id"][1:]) for m in refused) == list(range(64, 200))
    assert "at most 64 run per turn" in refused[0]["content"]


@STREAM_MODES
def test_k3_a_denied_call_never_runs_and_the_model_sees_the_denial(
    agent: Agent, workspace: Path, model_env: Any, streaming: bool
) -> None:
    """K-3/A-2: a call the policy denies never runs; the model reads permission_denied for it."""
    script = [_turn(("write", {"file_path": "evil.txt", "content": "pwned"})), {"text": "I may not write."}]
    with model_env(ScriptedOpenAIServer(script)) as srv:
        policy = PermissionPolicy(allow=["read"], deny=["write"])
        s = agent.session(workspace, SessionOptions(permission_policy=policy))
        result, events = _run(s, "write evil.txt", streaming)
        denial = _tool_messages(srv.requests[1].body)[0]["content"]
    assert not (workspace / "evil.txt").exists()
    assert result.success and result.tool_calls[0].exit_code == 1
    assert result.tool_calls[0].error_kind["type"] == "permission_denied"
    assert denial.startswith("Error (permission_denied)")
    assert any(e.type == "permission_denied" for e in events)


@STREAM_MODES
def test_k3_an_unconfirmable_call_never_runs(
    agent: Agent, workspace: Path, model_env: Any, streaming: bool
) -> None:
    """K-3: a call that needs confirmation is denied when nobody can confirm, and rejected when the
    handler says no; neither runs."""
    script = [
        _turn(("write", {"file_path": "a.txt", "content": "1"})),
        {"text": "ok"},
        _turn(("write", {"file_path": "b.txt", "content": "2"})),
        {"text": "ok"},
    ]
    with model_env(ScriptedOpenAIServer(script)) as srv:
        unconfirmable = agent.session(workspace)  # no allow rule: asks, and no handler to ask
        first, _ = _run(unconfirmable, "write a", streaming)
        asked: list[str] = []
        rejecting = agent.session(
            workspace, SessionOptions(confirmation=lambda req: asked.append(req.tool) or False)
        )
        second, _ = _run(rejecting, "write b", streaming)
    assert first.tool_calls[0].error_kind["type"] == "permission_denied"
    assert first.tool_calls[0].error_kind["reason"] == "missing_confirmation_manager"
    assert second.tool_calls[0].error_kind["type"] == "confirmation_rejected" and asked == ["write"]
    assert not (workspace / "a.txt").exists() and not (workspace / "b.txt").exists()
    assert "Error (confirmation_rejected)" in _tool_messages(srv.requests[3].body)[0]["content"]


@STREAM_MODES
def test_a2_max_steps_stops_a_looping_model(
    agent: Agent, workspace: Path, model_env: Any, streaming: bool
) -> None:
    """A-2: a model that never stops calling tools is stopped after max_steps model requests; the
    last turn's calls are not run and the conversation stays valid (every call answered)."""
    loop_turn = _turn(("ls", {"path": "."}))
    with model_env(ScriptedOpenAIServer([loop_turn], repeat_last=True)) as srv:
        s = agent.session(workspace, SessionOptions(permission_policy=PermissionPolicy(allow=["ls"])))
        result, _ = _run(s, "loop forever", streaming, max_steps=3)
        requests = len(srv.requests)
    assert not result.success and result.stop_reason == "max_steps" and result.steps == 3
    assert result.error["type"] == "budget_exhausted" and result.error["resource"] == "max_steps"
    assert requests == 3 and len(result.tool_calls) == 2
    convo = s.conversation()
    calls = [c["id"] for m in convo if m["role"] == "assistant" for c in m.get("tool_calls", [])]
    answers = [m["tool_call_id"] for m in convo if m["role"] == "tool"]
    assert len(calls) == len(answers) == 3
    assert "max_steps" in convo[-1]["content"]


@STREAM_MODES
def test_a3_rate_limit_and_server_errors_come_back_typed_after_visible_retries(
    agent: Agent, workspace: Path, model_env: Any, streaming: bool
) -> None:
    """A-3: 429 → rate_limited{retry_after_ms} (Retry-After honoured), 5xx → transport, after the
    bounded retries, each one a model_retry event; a retry that succeeds ends well."""
    script = [
        {"status": 429, "retry_after": "0.05"},
        {"status": 429, "retry_after": "0.05"},
        {"status": 429, "retry_after": "0.05"},
        {"status": 503},
        {"status": 502},
        {"status": 500},
        {"status": 503},
        {"text": "recovered"},
    ]
    with model_env(ScriptedOpenAIServer(script)) as srv:
        s = agent.session(workspace)
        limited, ev1 = _run(s, "one", streaming)
        broken, ev2 = _run(s, "two", streaming)
        recovered, ev3 = _run(s, "three", streaming)
        seen = len(srv.requests)
    assert limited.error == {"type": "rate_limited", "retry_after_ms": 50} and not limited.success
    retries = [e.data for e in ev1 if e.type == "model_retry"]
    assert [r["delay_ms"] for r in retries] == [50, 50] and retries[0]["error_kind"]["type"] == "rate_limited"
    assert broken.error == {"type": "transport", "op": "model"}
    assert sum(e.type == "model_retry" for e in ev2) == 2
    assert recovered.success and recovered.text == "recovered"
    assert [e.data["attempt"] for e in ev3 if e.type == "model_retry"] == [1]
    assert seen == 8


def test_a1_a2_resumed_snapshot_continues_the_conversation_in_another_process(
    agent: Agent, workspace: Path, model_env: Any, tmp_path: Path
) -> None:
    """A-1/A-2: the snapshot holds the conversation and names the model, never an endpoint or key;
    another process resumes it with its own environment and the model sees the whole history."""
    script = [
        _turn(("read", {"file_path": "README.md"})),
        {"text": "It is a demo."},
        {"text": "Still a demo."},
    ]
    with model_env(ScriptedOpenAIServer(script)) as srv:
        s = agent.session(workspace, SessionOptions(permission_policy=PermissionPolicy(allow=["read"])))
        assert s.send("What is this repo?").success
        snap = s.snapshot()
        text = json.dumps(snap)
        assert srv.base_url not in text and "sk-test-scripted" not in text and "127.0.0.1" not in text
        assert snap["conversation"]["model"] == "openai:test-model"
        path = tmp_path / "snap.json"
        path.write_text(text)
        child = (
            "import json, sys\n"
            "from orchestrator import Agent\n"
            "with Agent() as a:\n"
            "    s = a.resume(json.load(open(sys.argv[1])))\n"
            "    r = s.send('And now?')\n"
            "    print(json.dumps({'ok': r.success, 'text': r.text, 'model': s.model, 'n': len(s.conversation())}))\n"
        )
        env = {**os.environ, **srv.env(), "PYTHONPATH": str(ROOT)}
        env.pop("A3S_MODEL", None)
        out = subprocess.run(
            [sys.executable, "-c", child, str(path)],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert out.returncode == 0, out.stderr
        last = srv.requests[-1]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"ok": True, "text": "Still a demo.", "model": "openai:test-model", "n": 6}
    roles = [m["role"] for m in last.body["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert last.body["messages"][1]["content"] == "What is this repo?"
    assert last.body["messages"][-1]["content"] == "And now?"


def test_a2_resume_in_process_keeps_budget_usage_and_model(
    agent: Agent, workspace: Path, model_env: Any
) -> None:
    """A-2: the model's token usage is charged to the session budget and survives the snapshot."""
    usage = {"prompt_tokens": 100, "completion_tokens": 10, "cached_tokens": 40}
    with model_env(ScriptedOpenAIServer([{"text": "a", "usage": usage}, {"text": "b", "usage": usage}])):
        s = agent.session(workspace, SessionOptions(budget=Budget(max_model_tokens=100)))
        first = s.send("one")
        used = s.snapshot()["budget_used"]
        again = agent.resume(s.snapshot())
        second = s.send("two")
    assert first.success and used["prompt_tokens"] == 100 and used["cached_tokens"] == 40
    assert again.snapshot()["budget_used"]["prompt_tokens"] == 100 and again.model == "openai:test-model"
    assert not second.success
    assert second.error["type"] == "budget_exhausted" and second.error["resource"] == "model_tokens"


def test_k5_safe_calls_run_concurrently_others_in_order(
    agent: Agent, workspace: Path, model_env: Any
) -> None:
    """K-5: calls of one turn overlap only when every one is declared read-only/idempotent/
    cancel-safe; a turn with one mutating call runs them one after another, in the model's order."""

    together = threading.Barrier(3, timeout=10)  # passes only if three calls are running at once

    def peek(args: dict[str, Any]) -> str:
        together.wait()
        return f"done {args.get('n')}"

    def poke(args: dict[str, Any]) -> str:
        return f"poked {args.get('n')}"

    script = [
        _turn(("peek", {"n": 1}), ("peek", {"n": 2}), ("peek", {"n": 3})),
        {"text": "parallel done"},
        _turn(("peek", {"n": 4}), ("poke", {"n": 5})),
        {"text": "serial done"},
    ]
    with model_env(ScriptedOpenAIServer(script)) as srv:
        s = agent.session(
            workspace, SessionOptions(permission_policy=PermissionPolicy(allow=["peek", "poke"]))
        )
        params = {"type": "object", "properties": {"n": {"type": "integer"}}}
        s.register_tool("peek", peek, description="read", parameters=params, capabilities=READ_ONLY)
        s.register_tool("poke", poke, description="write", parameters=params)
        parallel_result, parallel = _run(s, "peek thrice", True)
        together.reset()
        together = threading.Barrier(1)  # the serial turn's peek runs alone
        _, serial = _run(s, "peek and poke", True)
        answers = [m["content"] for m in _tool_messages(srv.requests[1].body)]
    assert [c.exit_code for c in parallel_result.tool_calls] == [0, 0, 0]  # the barrier was met
    kinds = [e.type for e in parallel if e.type in ("tool_start", "tool_end")]
    assert kinds[:3] == ["tool_start"] * 3
    assert answers == ["done 1", "done 2", "done 3"]  # results in the model's order
    order = [(e.type, e.tool) for e in serial if e.type in ("tool_start", "tool_end")]
    assert order == [
        ("tool_start", "peek"),
        ("tool_end", "peek"),
        ("tool_start", "poke"),
        ("tool_end", "poke"),
    ]


def test_k4_arguments_that_are_not_json_still_go_through_the_kernel(
    agent: Agent, workspace: Path, model_env: Any
) -> None:
    """K-4/K-3: broken JSON arguments are the kernel's invalid_argument (events and all); the model
    is told why, and nothing ran."""
    script = [{"tool_calls": [{"id": "x", "name": "read", "arguments": '{"file_path": '}]}, {"text": "sorry"}]
    with model_env(ScriptedOpenAIServer(script)) as srv:
        s = agent.session(workspace, SessionOptions(permission_policy=PermissionPolicy(allow=["read"])))
        result, events = _run(s, "read it", False)
        told = _tool_messages(srv.requests[1].body)[0]["content"]
    assert result.tool_calls[0].error_kind["type"] == "invalid_argument"
    assert told.startswith("Error (invalid_argument)") and "not valid JSON" in told
    assert next(e.type for e in events if e.tool == "read") == "tool_start"


@STREAM_MODES
def test_k4_arguments_nested_too_deeply_fail_the_call_not_the_run(
    agent: Agent, workspace: Path, model_env: Any, streaming: bool
) -> None:
    """K-4/K-8/A-2: arguments nested 100 000 deep overflow ``json.loads``; that is the call's
    invalid_argument (the model is told why), never a failed run — and the conversation holding
    them still goes to the model on the next turn, on either wire."""
    deep = '{"file_path": ' + "[" * 100_000 + "]" * 100_000 + "}"
    script = [{"tool_calls": [{"id": "x", "name": "read", "arguments": deep}]}, {"text": "sorry"}]
    with model_env(ScriptedOpenAIServer(script)) as srv:
        s = agent.session(workspace, SessionOptions(permission_policy=PermissionPolicy(allow=["read"])))
        result, _ = _run(s, "read it", streaming)
        told = _tool_messages(srv.requests[1].body)[0]["content"]
    assert result.success and result.text == "sorry"
    assert result.tool_calls[0].error_kind["type"] == "invalid_argument"
    assert told.startswith("Error (invalid_argument)") and "nested too deeply" in told
    from flows.providers.anthropic_messages import wire_messages
    from flows.providers.types import Message, ToolCall

    replay = wire_messages([Message("assistant", "", tool_calls=(ToolCall("x", "read", deep),))])
    assert replay[0]["content"][0]["input"] == {"_raw": deep}


LONG_INT_ARGS = '{"file_path": "README.md", "offset": 1' + "0" * 5000 + "}"  # valid JSON; 5001 digits


@STREAM_MODES
@pytest.mark.parametrize("wire", ["openai", "anthropic"])
def test_k4_k8_an_integer_over_the_int_string_limit_is_named_as_such(
    workspace: Path, model_env: Any, streaming: bool, wire: str
) -> None:
    """K-4/K-8: json.loads refuses an integer longer than 4300 digits with a ValueError; the model
    was told "arguments must be a JSON object, got str". It is told what is wrong, on either wire,
    streamed or not, and the run goes on."""
    script = [{"tool_calls": [{"id": "x", "name": "read", "arguments": LONG_INT_ARGS}]}, {"text": "sorry"}]
    server = ScriptedOpenAIServer(script) if wire == "openai" else ScriptedAnthropicServer(script)
    model = "openai:test-model" if wire == "openai" else "anthropic:claude-test"
    with model_env(server) as srv, Agent(model=model) as a:
        s = a.session(workspace, SessionOptions(permission_policy=PermissionPolicy(allow=["read"])))
        result, events = _run(s, "read it", streaming)
        second = srv.requests[1].body
    if wire == "openai":
        told = _tool_messages(second)[0]["content"]
    else:
        told = next(b for m in second["messages"] for b in m["content"] if b.get("type") == "tool_result")[
            "content"
        ]
    assert result.success and result.text == "sorry"
    assert result.tool_calls[0].error_kind["type"] == "invalid_argument"
    assert told.startswith("Error (invalid_argument)"), told
    assert "integer" in told and "longer than 4300 digits" in told and "got str" not in told, told
    end = next(e for e in events if e.type == "tool_end" and e.tool == "read")
    assert "longer than 4300 digits" in end.data["error_kind"]["message"]


def test_a2_anthropic_wire_run_with_a_tool_call(workspace: Path, model_env: Any) -> None:
    """A-2/G-6: the same loop over the Anthropic Messages wire format, streaming."""
    script = [_turn(("read", {"file_path": "README.md"}), text="Looking."), {"text": "A demo README."}]
    with model_env(ScriptedAnthropicServer(script)) as srv, Agent(model="anthropic:claude-test") as a:
        s = a.session(workspace, SessionOptions(permission_policy=PermissionPolicy(allow=["read"])))
        result, events = _run(s, "What is it?", True)
        second = srv.requests[1].body
    assert result.success and result.text == "A demo README." and result.model == "anthropic:claude-test"
    results = [b for m in second["messages"] for b in m["content"] if b.get("type") == "tool_result"]
    assert "hello world" in results[0]["content"]
    assert "".join(e.data["text"] for e in events if e.type == "text_delta") == "Looking.A demo README."


def test_a1_no_model_fails_before_any_request(
    workspace: Path, model_env: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A-1: without --model / A3S_MODEL / Agent(model=) a prompt fails with invalid_argument and no
    request is made; a malformed model name fails when it is given."""
    monkeypatch.delenv("A3S_MODEL", raising=False)
    with model_env(ScriptedOpenAIServer([{"text": "never"}])) as srv, Agent() as a:
        result = a.session(workspace).send("hello")
        bad = a.session(workspace).send("hello", model="gpt-4o")
        assert srv.requests == []
    assert result.error["type"] == "invalid_argument" and "no model" in result.message
    assert bad.error["type"] == "invalid_argument"
    with pytest.raises(Exception, match="provider"):
        Agent(model="nonsense")


def test_a2_timeout_and_cancel_end_the_run_typed(agent: Agent, workspace: Path, model_env: Any) -> None:
    """A-2/K-6: the run's deadline gives timeout{op: agent}; cancel_run during a slow tool gives
    cancelled and the tool is cancelled through the kernel; closing the session cancels too."""
    started = threading.Event()

    async def hang(args: dict[str, Any]) -> str:
        started.set()
        await asyncio.sleep(30)
        return "never"

    script = [{"delay_s": 3, "text": "late"}, _turn(("hang", {})), _turn(("hang", {}))]
    with model_env(ScriptedOpenAIServer(script)):
        s = agent.session(workspace, SessionOptions(permission_policy=PermissionPolicy(allow=["hang"])))
        s.register_tool(
            "hang", hang, description="hangs", parameters={"type": "object"}, capabilities=READ_ONLY
        )
        t0 = time.monotonic()
        slow = s.send("slow", timeout_ms=1000)
        assert time.monotonic() - t0 < 2.8  # the server would answer after 3 s
        assert slow.stop_reason == "timeout" and slow.error["type"] == "timeout"

        threading.Thread(target=lambda: (started.wait(10), s.cancel_run()), daemon=True).start()
        cancelled = s.send("hang please")
        assert cancelled.stop_reason == "cancelled" and cancelled.error == {
            "type": "cancelled",
            "op": "agent",
        }
        ends = [e for e in s.events() if e.type == "tool_end" and e.tool == "hang"]
        assert ends and ends[-1].data["state"] == "cancelled"

        started.clear()
        threading.Thread(target=lambda: (started.wait(10), s.close()), daemon=True).start()
        closed = s.send("hang again")
    assert closed.stop_reason == "cancelled" and not closed.success
    assert s.send("after close").error["type"] == "cancelled"


def test_a2_a_suspended_call_waits_and_a_continuation_answers_it(
    agent: Agent, workspace: Path, model_env: Any
) -> None:
    """A-2 (A-4's hook): a tool result marked a3s_suspend stops the run with that call pending; a
    continuation (prompt=None) supplies its result and the loop goes on from there."""

    def waiter(args: dict[str, Any]) -> ToolResult:
        return ToolResult.success("waiter", "queued", {SUSPEND_KEY: {"job": "j1"}})

    script = [_turn(("waiter", {}), ("ls", {"path": "."})), {"text": "The child said 42."}]
    with model_env(ScriptedOpenAIServer(script)) as srv:
        s = agent.session(
            workspace, SessionOptions(permission_policy=PermissionPolicy(allow=["waiter", "ls"]))
        )
        s.register_tool("waiter", waiter, description="waits", parameters={"type": "object"})
        first = s.send("delegate")
        assert first.stop_reason == "suspended" and len(srv.requests) == 1
        assert [c.id for c in s.core.conversation.pending_calls()] == ["m0"]
        snap = s.snapshot()
        resumed = agent.resume(snap)
        done = resumed.core.loop.run(
            run_agent(
                resumed.core, None, tool_results={"m0": ToolResult.success("waiter", "child answer: 42")}
            ),
            timeout=30,
        )
        answers = {m["tool_call_id"]: m["content"] for m in _tool_messages(srv.requests[1].body)}
    assert done.success and done.text == "The child said 42."
    assert answers["m0"] == "child answer: 42" and "README.md" in answers["m1"]


async def test_s5_astream_yields_the_run_events(workspace: Path, model_env: Any) -> None:
    """S-5/A-2: the async twins — astream yields the run's events as they happen, asend returns."""
    script = [_turn(("ls", {"path": "."}), text="Listing."), {"text": "Done listing."}, {"text": "again"}]
    with model_env(ScriptedOpenAIServer(script)), Agent(model="openai:m") as a:
        s = a.session(workspace, SessionOptions(permission_policy=PermissionPolicy(allow=["ls"])))
        stream = s.astream("list files")
        types = [e.type async for e in stream]
        second = await s.asend("again")
    assert stream.result is not None and stream.result.success and stream.result.text == "Done listing."
    assert (
        types[0] == "run_start" and types[-1] == "run_end" and "tool_end" in types and "text_delta" in types
    )
    assert second.success and second.text == "again"


@pytest.mark.parametrize("server_cls", [ScriptedOpenAIServer, ScriptedAnthropicServer])
def test_a3_a_server_that_cannot_stream_a_request_gets_it_blocking(
    workspace: Path, model_env: Any, server_cls: Any
) -> None:
    """A-3: a 200 stream that ends before any content (llama.cpp with an automatic tool choice) is
    asked again without streaming — visible as a model_retry with fallback "blocking" — and the
    run goes on; a blocking request that comes back empty is not retried that way."""
    script = [
        {"empty_stream": True},
        _turn(("ls", {"path": "."}), text="Listing."),  # answers the blocking retry
        {"text": "Two files."},
    ]
    wire = "openai" if server_cls is ScriptedOpenAIServer else "anthropic"
    with model_env(server_cls(script)) as srv, Agent(model=f"{wire}:m") as a:
        s = a.session(workspace, SessionOptions(permission_policy=PermissionPolicy(allow=["ls"])))
        result, events = _run(s, "list", True)
        streamed = [bool(r.body.get("stream")) for r in srv.requests]
    assert result.success and result.text == "Two files." and result.tool_calls[0].exit_code == 0
    assert streamed == [True, False, True]
    retry = next(e.data for e in events if e.type == "model_retry")
    assert retry["fallback"] == "blocking" and retry["error_kind"]["type"] == "transport"
    text = "".join(e.data["text"] for e in events if e.type == "text_delta")
    assert text == "Listing.Two files."  # the blocking answer's text still reaches the stream
