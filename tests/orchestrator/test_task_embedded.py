"""``task`` embedded, over the OpenAI wire format (scripted loopback server): children are agent runs
with their own sessions; the parent sees their bounded results (SPEC X-3, X-4, K-2, K-4, K-8, S-2).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flows.task.inprocess import ChildFanOut
from flows.task.result import HEAD_CHARS, MAX_OUTPUT_CHARS, TAIL_CHARS
from kernel.options import SessionOptions
from kernel.policy import PermissionPolicy
from orchestrator import Agent
from tests.model_servers import ScriptedOpenAIServer
from tests.task_support import by_prompt, item, task_call, tool_messages

ALLOW_ALL = SessionOptions(permission_policy=PermissionPolicy(allow=["*"]))


@pytest.fixture()
def ws(tmp_path: Path) -> Path:
    (tmp_path / "a.txt").write_text("alpha\n")
    (tmp_path / "b.txt").write_text("beta\n")
    return tmp_path


class Model:
    """A scripted OpenAI-compatible server whose answers depend on the conversation."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.scripts: dict[str, list[dict[str, Any]]] = {}
        self.server = ScriptedOpenAIServer(route=by_prompt(self.scripts))
        for k, v in self.server.env().items():
            monkeypatch.setenv(k, v)

    def bodies(self, key: str) -> list[dict[str, Any]]:
        from tests.task_support import first_user_text

        return [r.body for r in self.server.requests if key in first_user_text(r.body)]


@pytest.fixture()
def model(monkeypatch: pytest.MonkeyPatch) -> Iterator[Model]:
    m = Model(monkeypatch)
    with m.server:
        yield m


@pytest.fixture()
def agent() -> Iterator[Agent]:
    with Agent(model="openai:test-model") as a:
        yield a


def reading_child(i: int, path: str = "a.txt", answer: str | None = None) -> list[dict[str, Any]]:
    return [
        {"tool_calls": [{"id": f"r{i}", "name": "read", "arguments": {"file_path": path}}]},
        {"text": answer if answer is not None else f"answer {i}"},
    ]


def subagent_events(session: Any) -> list[tuple[str, str]]:
    return [(e.type, e.data["task_id"]) for e in session.events() if e.type.startswith("subagent_")]


def test_x3_a_model_fans_out_three_children_and_gets_each_bounded_result(model, agent, ws) -> None:
    """X-3: three concurrent children, each an agent run with its own session; the parent's next
    request carries every child's output and source anchors; one subagent_end per subagent_start."""
    model.scripts["PARENT"] = [task_call(item("child 0"), item("child 1"), item("child 2")), {"text": "done"}]
    for i in range(3):
        model.scripts[f"child {i}"] = reading_child(i, "a.txt" if i != 1 else "b.txt")
    session = agent.session(str(ws), ALLOW_ALL)
    run = session.send("PARENT: look around")
    assert run.success and run.text == "done"
    [message] = tool_messages(model.bodies("PARENT")[-1])
    for i in range(3):
        assert f"[task {i}: explore — do child {i}] succeeded\nanswer {i}" in message
    assert "sources: a.txt" in message and "sources: b.txt" in message
    events = subagent_events(session)
    starts = [t for kind, t in events if kind == "subagent_start"]
    ends = [t for kind, t in events if kind == "subagent_end"]
    assert len(starts) == 3 and sorted(starts) == sorted(ends)
    ended = [e.data for e in session.events() if e.type == "subagent_end"]
    assert len({d["session_id"] for d in ended} | {session.id}) == 4  # each child its own session
    assert all(d["result"]["success"] and d["result"]["steps"] == 2 for d in ended)


def test_x3_thirty_two_children_each_bounded_to_3000_head_and_800_tail(model, agent, ws) -> None:
    """X-3: the 32-item maximum; a long child answer reaches the parent cut to head + tail."""
    long = "H" * HEAD_CHARS + "m" * 20_000 + "T" * TAIL_CHARS
    model.scripts["PARENT"] = [task_call(*(item(f"kid-{i:02d}") for i in range(32))), {"text": "ok"}]
    for i in range(32):
        model.scripts[f"kid-{i:02d}"] = [{"text": long if i == 7 else f"short {i}"}]
    session = agent.session(str(ws), ALLOW_ALL)
    result = session.tasks([item(f"kid-{i:02d}") for i in range(32)])
    assert result.exit_code == 0, result.output
    tasks = result.metadata["tasks"]
    assert [t["index"] for t in tasks] == list(range(32))
    assert tasks[3]["output"] == "short 3"
    cut = tasks[7]["output"]
    assert (
        len(cut) <= MAX_OUTPUT_CHARS and cut.startswith("H" * HEAD_CHARS) and cut.endswith("T" * TAIL_CHARS)
    )
    assert tasks[7]["omitted_chars"] == 20_000
    assert len([e for e in session.events() if e.type == "subagent_end"]) == 32


def test_k8_a_failed_child_without_partial_failure_is_typed_partial_failure(model, agent, ws) -> None:
    """K-8, X-3: the first failure fails the call (``partial_failure{failed, total}``) and cancels the
    rest; every started child still ends exactly once."""
    model.scripts["good"] = [{"delay_s": 2.0, "text": "late"}]
    model.scripts["bad"] = [
        {"status": 400, "body": {"error": {"message": "bad request", "type": "invalid_request_error"}}}
    ]
    session = agent.session(str(ws), ALLOW_ALL)
    result = session.tasks([item("good 1"), item("bad 2"), item("good 3")])
    assert result.exit_code == 1
    assert result.error_kind["type"] == "partial_failure" and result.error_kind["total"] == 3
    assert result.error_kind["failed"] == 3  # the failure, and the two cancelled by it
    by_index = {t["index"]: t for t in result.metadata["tasks"]}
    assert by_index[1]["completion"] == "failed" and by_index[1]["error_kind"]["type"] == "provider_error"
    assert by_index[0]["completion"] == by_index[2]["completion"] == "cancelled"
    events = subagent_events(session)
    assert sorted(t for k, t in events if k == "subagent_start") == sorted(
        t for k, t in events if k == "subagent_end"
    )


def test_x3_partial_failure_and_min_success_count_return_early(model, agent, ws) -> None:
    """X-3: with allow_partial_failure, min_success_count successes end the fan-out; the slow children
    are cancelled and reported as such; a failure among them does not fail the call."""
    model.scripts["fast"] = [{"text": "quick"}]
    model.scripts["slow"] = [{"delay_s": 5.0, "text": "too late"}]
    model.scripts["broken"] = [{"status": 400}]
    session = agent.session(str(ws), ALLOW_ALL)
    result = session.tasks(
        [item("fast a"), item("slow b"), item("broken c"), item("fast d")],
        allow_partial_failure=True,
        min_success_count=2,
    )
    assert result.exit_code == 0, result.output
    fan = result.metadata["fan_out"]
    assert fan["status"] == "partial" and fan["succeeded"] == 2 and fan["failed_indexes"] == [1, 2]
    assert result.metadata["tasks"][1]["completion"] == "cancelled"
    short = session.tasks(
        [item("broken x"), item("broken y"), item("fast z")], allow_partial_failure=True, min_success_count=2
    )
    assert short.exit_code == 1 and short.error_kind["type"] == "partial_failure"


def test_x3_timeout_ms_keeps_finished_children_and_times_out_the_rest(model, agent, ws) -> None:
    model.scripts["fast"] = [{"text": "quick"}]
    model.scripts["slow"] = [{"delay_s": 5.0, "text": "never seen"}]
    session = agent.session(str(ws), ALLOW_ALL)
    result = session.tasks([item("fast"), item("slow")], allow_partial_failure=True, timeoutMs=500)
    assert result.exit_code == 0
    fast, slow = result.metadata["tasks"]
    assert fast["output"] == "quick" and slow["completion"] == "timed_out"
    assert slow["error_kind"]["type"] == "timeout" and result.metadata["fan_out"]["timed_out"]


def test_x3_every_schema_rule_fails_before_any_child_or_request(model, agent, ws) -> None:
    """K-4: invalid task arguments and an unknown agent fail before any child starts."""
    session = agent.session(str(ws), ALLOW_ALL)
    cases = [
        {"tasks": []},
        {"tasks": [item(f"x{i}") for i in range(33)]},
        {"tasks": [item("a", background=True), item("b")]},
        {"tasks": [item("a")], "min_success_count": 1},
        {"tasks": [item("a")], "allow_partial_failure": True, "min_success_count": 2},
        {"tasks": [item("a")], "timeout_ms": 0},
        {"tasks": [{**item("a"), "extra": 1}]},
        {"tasks": [item("a")], "timeout_ms": 5, "timeoutMs": 5},
    ]
    for args in cases:
        result = session.tool("task", args)
        assert result.exit_code == 1 and result.error_kind["type"] == "invalid_argument", args
    unknown = session.tasks([item("a", agent="nobody")])
    assert unknown.error_kind["type"] == "not_found" and "general, explore, verification" in unknown.output
    assert model.server.requests == []
    assert subagent_events(session) == []


def test_s2_task_is_model_visible_and_parallel_task_is_a_hidden_callable_alias(model, agent, ws) -> None:
    model.scripts["legacy"] = [{"text": "legacy ok"}]
    session = agent.session(str(ws), ALLOW_ALL)
    names = [d["name"] for d in session.tool_definitions()]
    assert "task" in names and "parallel_task" not in names and "parallel_task" in session.tool_names()
    result = session.tool("parallel_task", {"tasks": [item("legacy 1"), item("legacy 2")]})
    assert result.exit_code == 0 and [t["output"] for t in result.metadata["tasks"]] == ["legacy ok"] * 2
    assert (
        session.tool("parallel_task", {"tasks": [item("legacy 1")]}).error_kind["type"] == "invalid_argument"
    )


def test_k2_a_host_direct_task_still_starts_its_child_at_agent_origin(model, agent, ws) -> None:
    """K-2: ``session.task`` is trusted host-direct, but the child's model calls are ``agent``: the
    session's deny rule applies to them (while the host itself may read)."""
    options = SessionOptions(permission_policy=PermissionPolicy(allow=["*"], deny=["read"]))
    model.scripts["child"] = reading_child(0)
    session = agent.session(str(ws), options)
    assert session.tool("read", {"file_path": "a.txt"}).exit_code == 0  # host-direct: trusted
    result = session.task(item("child"))
    assert result.exit_code == 0
    [child_body] = [b for b in model.bodies("child") if len(b["messages"]) > 2]
    [denied] = tool_messages(child_body)
    assert "permission_denied" in denied or "Permission denied" in denied


def test_x3_explore_is_read_only_and_offers_only_read_only_tools(model, agent, ws) -> None:
    model.scripts["explorer"] = [
        {"tool_calls": [{"id": "w", "name": "write", "arguments": {"file_path": "x.txt", "content": "no"}}]},
        {"text": "could not write"},
    ]
    session = agent.session(str(ws), ALLOW_ALL)
    result = session.task(item("explorer"))
    assert result.exit_code == 0 and not (ws / "x.txt").exists()
    first, second = model.bodies("explorer")
    offered = {t["function"]["name"] for t in first["tools"]}
    assert offered <= {"read", "ls", "search", "git", "web_fetch", "web_search"} and "write" not in offered
    assert "not_found" in tool_messages(second)[0] or "Unknown tool" in tool_messages(second)[0]


def test_x3_custom_agent_from_the_workspace_gives_tools_prompt_and_steps(model, agent, ws) -> None:
    agents = ws / ".a3s" / "agents"
    agents.mkdir(parents=True)
    (agents / "reader.md").write_text(
        "---\nname: reader\ndescription: reads one file\ntools: [Read]\nmax_steps: 3\n---\nYou only read.\n"
    )
    model.scripts["custom"] = [{"text": "read it"}]
    session = agent.session(str(ws), ALLOW_ALL)
    result = session.task(item("custom", agent="reader"))
    assert result.exit_code == 0 and result.metadata["tasks"][0]["agent"] == "reader"
    [body] = model.bodies("custom")
    assert [t["function"]["name"] for t in body["tools"]] == ["read"]
    system = next(m for m in body["messages"] if m["role"] == "system")
    assert system["content"].startswith("You only read.")


def test_x3_output_schema_returns_a_validated_structured_value_after_a_repair(model, agent, ws) -> None:
    schema = {"type": "object", "properties": {"count": {"type": "integer"}}, "required": ["count"]}
    model.scripts["count"] = [{"text": '{"count": "three"}'}, {"text": '{"count": 3}'}]
    session = agent.session(str(ws), ALLOW_ALL)
    result = session.task(item("count files", output_schema=schema))
    assert result.exit_code == 0, result.output
    [task] = result.metadata["tasks"]
    assert task["structured"] == {"count": 3}
    repair = model.bodies("count")[-1]["messages"][-1]["content"]
    assert "does not match the required JSON Schema" in repair and "/count" in repair
    model.scripts["never"] = [{"text": "not json"}]
    bad = session.task(item("never valid", output_schema=schema))
    assert bad.exit_code == 1 and bad.metadata["tasks"][0]["error_kind"]["type"] == "invalid_argument"


def test_x3_a_background_task_returns_a_handle_and_its_result_arrives_later(model, agent, ws) -> None:
    model.scripts["bg"] = [{"delay_s": 0.3, "text": "background answer"}]
    session = agent.session(str(ws), ALLOW_ALL)
    started = session.task(item("bg job"), background=True)
    assert started.exit_code == 0
    handle = started.metadata["background_task"]
    result = session.task_result(handle["task_id"], timeout=30)
    assert result["output"] == "background answer" and result["success"]
    ends = [e for e in session.events() if e.type == "subagent_end"]
    assert len(ends) == 1 and ends[0].data["background"] and ends[0].data["task_id"] == handle["task_id"]
    with pytest.raises(Exception) as info:
        session.task_result("no-such-task")
    assert getattr(info.value, "kind", "") == "not_found"


def test_k6_closing_the_session_cancels_a_background_child_which_still_ends_once(model, ws) -> None:
    model.scripts["forever"] = [{"delay_s": 30.0, "text": "never"}]
    with Agent(model="openai:test-model") as agent:
        session = agent.session(str(ws), ALLOW_ALL)
        session.task(item("forever"), background=True)
        session.close()
        events = subagent_events(session)
    assert [k for k, _ in events] == ["subagent_start", "subagent_end"]


def test_x3_children_inherit_the_parents_hooks_and_a_share_of_its_budget(model, agent, ws) -> None:
    """X-3: a child inherits the parent's pre-tool hooks and gets a share of the remaining budget
    (here 3 tool calls left for 2 children: one each, so each child's second call is refused)."""
    from kernel import Budget, Deny

    seen: list[str] = []

    def no_ls(call: Any) -> Any:
        seen.append(call.tool)
        return Deny("ls is off") if call.tool == "ls" else None

    options = SessionOptions(
        permission_policy=PermissionPolicy(allow=["*"]),
        pre_tool_hooks=[no_ls],
        budget=Budget(max_tool_calls=4),
    )
    model.scripts["hooked"] = [
        {"tool_calls": [{"id": "l", "name": "ls", "arguments": {}}]},
        {"text": "hooked done"},
    ]
    model.scripts["budgeted"] = [
        {"tool_calls": [{"id": "r1", "name": "read", "arguments": {"file_path": "a.txt"}}]},
        {"tool_calls": [{"id": "r2", "name": "read", "arguments": {"file_path": "b.txt"}}]},
        {"text": "budgeted done"},
    ]
    session = agent.session(str(ws), options)
    result = session.tasks([item("hooked"), item("budgeted")])
    assert result.exit_code == 0, result.output
    [denied] = tool_messages(model.bodies("hooked")[-1])
    assert "hook_denied" in denied or "ls is off" in denied
    first, second = tool_messages(model.bodies("budgeted")[-1])
    assert "alpha" in first
    assert "budget_exhausted" in second or "Budget exhausted" in second
    assert "ls" in seen  # the parent's hook ran in the child


def test_f2_a_workflow_task_step_fans_out_children(model, agent, ws) -> None:
    """F-2, X-3: a multi-item ``task`` is a workflow step (never a call inside the QuickJS VM): its
    children run and the step's output carries their results."""
    model.scripts["wf-a"] = [{"text": "from a"}]
    model.scripts["wf-b"] = [{"text": "from b"}]
    source = """
    async function run(wf, input) {
      const r = await wf.step('kids', 'task', {tasks: [
        {agent: 'explore', description: 'a', prompt: 'wf-a'},
        {agent: 'explore', description: 'b', prompt: 'wf-b'}]});
      return r.metadata.tasks.map(t => t.output);
    }"""
    session = agent.session(str(ws), ALLOW_ALL)
    result = session.workflow(source=source, input={"query": "kids"})
    assert result.exit_code == 0, result.output
    assert result.metadata["output"] == ["from a", "from b"]


def test_k3_x3_what_children_spend_is_charged_to_the_parents_budget(model, agent, ws) -> None:
    """K-3/X-3: a child's share is taken from what the parent has left, and what the child spent is
    charged back. Before, the parent's own count did not move, so each new ``task`` call handed
    its children the whole remainder again and a 6-call budget paid for 9 reads and more."""
    from kernel import Budget

    reads = [{"id": f"r{i}", "name": "read", "arguments": {"file_path": "a.txt"}} for i in range(5)]
    for key in ("spender one", "spender two"):
        model.scripts[key] = [{"tool_calls": reads}, {"text": f"{key} done"}]
    session = agent.session(
        str(ws),
        SessionOptions(permission_policy=PermissionPolicy(allow=["*"]), budget=Budget(max_tool_calls=6)),
    )
    first = session.tasks([item("spender one")])
    assert first.exit_code == 0, first.output
    assert all("alpha" in m for m in tool_messages(model.bodies("spender one")[-1]))  # 5 of the 5 left
    assert first.metadata["tasks"][0]["usage"]["tool_calls"] == 5
    assert session.snapshot()["budget_used"]["tool_calls"] == 6  # its own call and the child's five
    second = session.tasks([item("spender two")])
    assert second.exit_code == 1 and second.error_kind["type"] == "budget_exhausted", second.output
    assert model.bodies("spender two") == []  # no child started on a spent budget


def test_x3_k4_a_catastrophic_output_schema_pattern_is_matched_in_linear_time(model, agent, ws) -> None:
    """X-3/K-4: the model writes the ``output_schema`` and the child writes the answer. jsonschema's
    ``re`` needs minutes for ``^(a+)+$`` against 34 ``a`` and a ``!`` (three times: the answer and
    two repairs), holding the GIL. The answer is checked by RE2 and fails in well under a second;
    a pattern RE2 cannot match in linear time refuses the call before any child starts."""
    import time

    schema = {"type": "object", "properties": {"code": {"type": "string", "pattern": "^(a+)+$"}}}
    evil = '{"code": "' + "a" * 34 + '!"}'
    model.scripts["shaped"] = [{"text": evil}, {"text": evil}, {"text": evil}]
    session = agent.session(str(ws), ALLOW_ALL)
    started = time.monotonic()
    result = session.task(item("shaped answer", output_schema=schema))
    assert time.monotonic() - started < 10
    assert result.exit_code == 1 and result.metadata["tasks"][0]["error_kind"]["type"] == "invalid_argument"
    lookahead = {"type": "object", "properties": {"code": {"type": "string", "pattern": "^(?=a)a+$"}}}
    refused = session.task(item("never asked", output_schema=lookahead))
    assert refused.exit_code == 1 and refused.error_kind["type"] == "invalid_argument"
    assert "linear time" in refused.output
    assert model.bodies("never asked") == []


def test_k3_x3_a_background_childs_share_is_charged_when_it_starts(model, agent, ws) -> None:
    """K-3/X-3: a background child reports later (or never, to this call), so the share it was
    handed is charged to the parent when it starts. Before, each background ``task`` cost the
    parent one call and handed out the whole remainder again: 6 calls bought 5 + 4 + 3 + … reads."""
    from kernel import Budget

    reads = [{"id": f"r{i}", "name": "read", "arguments": {"file_path": "a.txt"}} for i in range(5)]
    model.scripts["bg spender"] = [{"tool_calls": reads}, {"text": "bg done"}]
    options = SessionOptions(permission_policy=PermissionPolicy(allow=["*"]), budget=Budget(max_tool_calls=6))
    session = agent.session(str(ws), options)
    first = session.task(item("bg spender"), background=True)
    assert first.exit_code == 0, first.output
    assert session.snapshot()["budget_used"]["tool_calls"] == 6  # its own call and the share of 5
    second = session.task(item("bg second"), background=True)
    assert second.exit_code == 1 and second.error_kind["type"] == "budget_exhausted", second.output
    done = session.task_result(first.metadata["background_task"]["task_id"], timeout=30)
    assert done["success"] and done["usage"]["tool_calls"] == 5
    assert model.bodies("bg second") == []


class _BrokenRunner(ChildFanOut):
    """A ``task_children`` runner whose child runs raise (a session that cannot be built, a defect)."""

    async def run_one(self, ctx: Any, call: Any, spec: Any, session_id: str) -> Any:
        raise RuntimeError("child session could not be built")


def test_k8_x3_a_child_runner_that_raises_is_a_failed_typed_result(model, agent, ws) -> None:
    """K-8: the runner's exception is the child's ``failed`` result (internal_error), foreground and
    background — no exception escapes the call, the background handle ends once and has a result."""
    options = SessionOptions(
        permission_policy=PermissionPolicy(allow=["*"]), services={"task_children": _BrokenRunner()}
    )
    session = agent.session(str(ws), options)
    result = session.tasks([item("one"), item("two")], allow_partial_failure=True)
    assert result.exit_code == 1 and result.error_kind["type"] == "partial_failure"
    for t in result.metadata["tasks"]:
        assert t["completion"] == "failed" and t["error_kind"]["type"] == "internal_error"
        assert t["error_kind"]["exception"] == "RuntimeError"
    started = session.task(item("bg"), background=True)
    assert started.exit_code == 0
    done = session.task_result(started.metadata["background_task"]["task_id"], timeout=30)
    assert done["completion"] == "failed" and done["error_kind"]["type"] == "internal_error"
    ends = [e.data for e in session.events() if e.type == "subagent_end"]
    assert len(ends) == 3 and all(e["completion"] == "failed" for e in ends)


def test_k3_x3_subagent_end_carries_the_childs_output_redacted(model, agent, ws) -> None:
    """K-3: the ``task`` call's output is redacted by the kernel; the ``subagent_end`` event carried
    the child's output (and error text) as the child wrote it, to every event stream."""
    secret = "sk-" + "a1B2c3D4e5" * 4
    model.scripts["leaky"] = [{"text": f"the key is {secret}"}]
    model.scripts["leaky bg"] = [{"text": f"background key {secret}"}]
    session = agent.session(str(ws), ALLOW_ALL)
    result = session.tasks([item("leaky")])
    assert result.exit_code == 0 and secret not in result.output
    started = session.task(item("leaky bg"), background=True)
    session.task_result(started.metadata["background_task"]["task_id"], timeout=30)
    ends = [e.data for e in session.events() if e.type == "subagent_end"]
    assert len(ends) == 2
    for data in ends:
        assert secret not in json.dumps(data) and "[REDACTED]" in data["result"]["output"]
