"""``program``: QuickJS scripts whose ``ctx`` calls are nested kernel calls (SPEC P-1..P-4, K-1, K-3).

Every test runs the real QuickJS child process (``tools/program/vm_child.py``) against a real
workspace; nothing is mocked. Timing is never asserted beyond "it ended, typed, and the session
still works".
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from kernel import PermissionPolicy, SessionOptions
from orchestrator import Agent
from tools.program.source import STATIC_REJECTS
from tools.program.vm import active_pids

SEARCH_AUTH = """// search-auth.js
export default async function run(ctx, inputs) {
  const hits = await ctx.grep(inputs.query, { glob: '*.rs' });
  const files = await ctx.glob('crates/**/*.rs');
  const snippets = [];

  for (const file of files.slice(0, 20)) {
    const content = await ctx.readFile(file);
    if (content.includes(inputs.query)) {
      snippets.push({ file, preview: content.slice(0, 1200) });
    }
  }

  return {
    summary: `找到 ${snippets.length} 个与 ${inputs.query} 相关的候选文件`,
    evidence: snippets,
    rawSearch: hits,
  };
}
"""


@pytest.fixture()
def crates(workspace: Path) -> Path:
    (workspace / "scripts" / "ptc").mkdir(parents=True)
    (workspace / "scripts" / "ptc" / "search-auth.js").write_text(SEARCH_AUTH)
    for name, body in {
        "core/src/policy.rs": "pub struct PermissionPolicy {\n    rules: Vec<String>,\n}\n",
        "core/src/gate.rs": "use crate::policy::PermissionPolicy;\nfn decide() {}\n",
        "cli/src/main.rs": 'fn main() { println!("hi"); }\n',
    }.items():
        path = workspace / "crates" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body)
    return workspace


def _program(source: str, **extra: Any) -> dict[str, Any]:
    return {"type": "script", "language": "javascript", "source": source, **extra}


def _nested_origins(session: Any) -> list[tuple[str, str]]:
    return [(e.tool, e.origin) for e in session.events() if e.type == "tool_start" and e.tool != "program"]


# ---- P-1, P-2: the reference example, session.program ≡ session.tool("program") ----------------


def test_p1_reference_search_auth_example_with_its_allow_list(agent: Agent, crates: Path) -> None:
    s = agent.session(crates)
    result = s.program(
        {
            "path": "scripts/ptc/search-auth.js",
            "inputs": {"query": "PermissionPolicy"},
            "allowedTools": ["grep", "glob", "read"],
            "limits": {"timeoutMs": 30000, "maxToolCalls": 30, "maxOutputBytes": 65536},
        }
    )
    assert result.exit_code == 0, result.output
    value = result.metadata["script_result"]
    assert value["summary"] == "找到 2 个与 PermissionPolicy 相关的候选文件"
    assert sorted(e["file"] for e in value["evidence"]) == [
        "crates/core/src/gate.rs",
        "crates/core/src/policy.rs",
    ]
    policy = next(e for e in value["evidence"] if e["file"].endswith("policy.rs"))
    assert policy["preview"].startswith("pub struct PermissionPolicy {\n")  # readFile drops line numbers
    assert value["rawSearch"]["exitCode"] == 0 and "2 match(es) in 2 file(s)" in value["rawSearch"]["text"]
    program = result.metadata["program"]
    assert {k: program[k] for k in ("name", "language", "runtime", "success")} == {
        "name": "script",
        "language": "javascript",
        "runtime": "embedded-quickjs",
        "success": True,
    }
    calls = program["tool_calls"]
    assert [c["tool_name"] for c in calls] == ["search", "search", "read", "read", "read"]
    assert all(set(c) == {"tool_name", "success", "exit_code", "output_bytes", "metadata"} for c in calls)
    lines = result.output.splitlines()
    assert lines[0] == "Program script completed."
    assert lines[1] == value["summary"]
    assert "Tool calls: 5" in lines
    assert json.loads(result.output.split("Result:\n", 1)[1]) == value


def test_p2_session_program_normalises_sdk_names_like_the_tool(agent: Agent, workspace: Path) -> None:
    s = agent.session(workspace)
    src = "async function run(ctx, inputs) { const r = await ctx.read('README.md'); return {n: inputs.n, ok: r.exitCode} }"
    via_sdk = s.program(source=src, inputs={"n": 1}, allowed_tools=["read"], limits={"timeout_ms": 5000})
    via_tool = s.tool(
        "program", _program(src, inputs={"n": 1}, allowed_tools=["read"], limits={"timeoutMs": 5000})
    )
    assert via_sdk.exit_code == via_tool.exit_code == 0
    assert via_sdk.metadata["script_result"] == via_tool.metadata["script_result"] == {"n": 1, "ok": 0}


def test_p2_path_is_a_workspace_js_file(agent: Agent, workspace: Path, tmp_path_factory: Any) -> None:
    s = agent.session(workspace)
    (workspace / "x.txt").write_text("async function run(){}")
    assert s.program(path="x.txt").error_kind["type"] == "invalid_argument"
    outside = tmp_path_factory.mktemp("outside") / "evil.js"
    outside.write_text("async function run(){ return 1 }")
    escaped = s.program(path=f"../{outside.parent.name}/evil.js")
    assert escaped.exit_code == 1 and escaped.error_kind["type"] == "path_outside_workspace"
    (workspace / "ok.mjs").write_text("export default async function (ctx, inputs) { return inputs.x * 2 }")
    assert s.program(path="ok.mjs", inputs={"x": 21}).metadata["script_result"] == 42


def test_p2_without_allow_list_every_tool_but_program_is_callable(agent: Agent, workspace: Path) -> None:
    s = agent.session(workspace)
    src = """async function run(ctx) {
      const l = await ctx.ls('src');
      const w = await ctx.tools.write({file_path: 'made.txt', content: 'x'});
      return [l.exitCode, w.exitCode];
    }"""
    result = s.program(source=src)
    assert result.metadata["script_result"] == [0, 0]
    assert (workspace / "made.txt").read_text() == "x"
    denied = s.program(
        source="async function run(ctx) { return await ctx.tool('program', {type: 'script'}) }"
    )
    assert denied.exit_code == 1 and denied.error_kind["type"] == "permission_denied"
    assert "tool 'program' is not allowed for this PTC script" in denied.output


# ---- P-3: the VM is a sandbox; limits end the script, never the session --------------------------


def test_p3_runaway_loop_is_a_typed_timeout_and_the_session_lives_on(agent: Agent, workspace: Path) -> None:
    s = agent.session(workspace)
    result = s.program(source="async function run() { while (true) {} }", limits={"timeoutMs": 300})
    assert result.exit_code == 1
    assert result.error_kind["type"] == "timeout" and result.error_kind["op"] == "program"
    assert result.error_kind["duration_ms"] >= 300
    assert result.output.startswith("program script timed out after 300 ms")
    assert not active_pids()
    after_await = s.program(
        source="async function run(ctx) { await ctx.ls(''); for (;;) {} }", limits={"timeoutMs": 300}
    )
    assert after_await.error_kind["type"] == "timeout"
    assert "hello world" in s.read_file("README.md")


def test_p3_memory_hog_is_stopped_while_the_session_lives_on(agent: Agent, workspace: Path) -> None:
    s = agent.session(workspace)
    hog = "async function run() { const a = []; for (;;) a.push(new Array(100000).fill(1.5)); }"
    result = s.program(source=hog, limits={"timeoutMs": 20000})
    assert result.exit_code == 1
    assert result.error_kind == {"type": "budget_exhausted", "resource": "memory", "reason": "vm_memory"}
    strings = "async function run(ctx) { await ctx.ls(''); let s = 'x'; for (;;) s = s + s; }"
    assert s.program(source=strings, limits={"timeoutMs": 20000}).error_kind["resource"] == "memory"
    deep = "async function run() { function f(n) { return f(n + 1) + 1 } return f(0) }"
    assert s.program(source=deep).error_kind["resource"] == "stack"
    assert s.program(source="async function run() { return 7 }").metadata["script_result"] == 7


def test_p3_vm_has_no_fetch_require_process_std_or_os(agent: Agent, workspace: Path) -> None:
    s = agent.session(workspace)
    src = """async function run() {
      // 'Web' + 'Socket': the static scan would refuse the word itself
      return ['fetch', 'require', 'process', 'std', 'os', 'Web' + 'Socket', 'Worker', 'XMLHttpRequest']
        .map(n => [n, typeof globalThis[n]]);
    }"""
    result = s.program(source=src)
    assert result.exit_code == 0
    assert all(kind == "undefined" for _, kind in result.metadata["script_result"])
    # The entry point only ever sees JSON: nothing of the host leaks into the VM.
    env = s.program(source="async function run(ctx, inputs) { return Object.keys(globalThis).sort() }")
    assert set(env.metadata["script_result"]) <= {"console", "run"}


@pytest.mark.parametrize("needle", STATIC_REJECTS)
def test_p3_static_rejects_refuse_before_anything_runs(agent: Agent, workspace: Path, needle: str) -> None:
    s = agent.session(workspace)
    src = f"async function run(ctx) {{ await ctx.tools.write({{file_path: 'side.txt', content: 'x'}}); /* {needle} */ }}"
    result = s.program(source=src)
    assert result.exit_code == 1 and result.error_kind["type"] == "invalid_argument"
    assert f"`{needle.strip()}`" in result.output
    assert not (workspace / "side.txt").exists()


def test_p3_script_errors_are_reported_not_raised(agent: Agent, workspace: Path) -> None:
    s = agent.session(workspace)
    thrown = s.program(source="async function run() { throw new Error('boom at step 3') }")
    assert thrown.exit_code == 1 and "boom at step 3" in thrown.output
    syntax = s.program(source="async function run( { }")
    assert syntax.error_kind["type"] == "invalid_argument" and "SyntaxError" in syntax.output
    no_entry = s.program(source="async function main() {}")
    assert no_entry.error_kind["type"] == "invalid_argument"
    assert "async function run(ctx, inputs)" in no_entry.output
    stuck = s.program(source="async function run() { await new Promise(() => {}) }")
    assert stuck.exit_code == 1 and "nothing will settle" in stuck.output
    missing = s.program(source="async function run(ctx) { return await ctx.readFile('nope.txt') }")
    assert missing.exit_code == 1 and missing.error_kind["type"] == "not_found"
    big = s.program(source="async function run() { return 'x'.repeat(2 * 1024 * 1024) }")
    assert big.exit_code == 1 and big.error_kind["resource"] == "script_result"
    huge_inputs = s.program(source="async function run() {}", inputs={"blob": "x" * (2 * 1024 * 1024)})
    assert huge_inputs.error_kind["type"] == "invalid_argument" and "program inputs" in huge_inputs.output


def test_p3_a_vm_crash_fails_the_call_and_the_session_lives_on(agent: Agent, workspace: Path) -> None:
    s = agent.session(workspace)

    def kill_the_vm(_args: dict[str, Any]) -> str:
        for pid in active_pids():
            os.kill(pid, 9)
        return "killed"

    s.register_tool("crash_vm", kill_the_vm, description="test", parameters={"type": "object"})
    result = s.program(source="async function run(ctx) { await ctx.tool('crash_vm', {}); return 1 }")
    assert result.exit_code == 1
    assert "exited unexpectedly" in result.output and "signal 9" in result.output
    assert s.program(source="async function run() { return 2 }").metadata["script_result"] == 2


def test_p3_ctx_api_and_result_shape(agent: Agent, workspace: Path) -> None:
    s = agent.session(workspace)
    src = """async function run(ctx) {
      const read = await ctx.read({file_path: 'notes.txt', limit: 2});
      const lines = await ctx.readFile('notes.txt', {offset: 10, limit: 2});
      const grep = await ctx.grep('HELLO', {'-i': true, glob: '*.md'});
      const bm25 = await ctx.bm25('hello world');
      const search = await ctx.search({mode: 'glob', query: '**/*.py'});
      const files = await ctx.glob('**/*.md');
      const ls = await ctx.ls('src');
      const sh = await ctx.bash('echo "$((6 * 7))"');
      const ver = await ctx.verify('exit 3');
      const viaProxy = await ctx.tools.read({file_path: 'README.md'});
      return {
        keys: Object.keys(read).sort(), readOut: read.text.split('\\n')[0],
        lines, grep: grep.text.split('\\n')[0], bm25: bm25.exitCode, search: search.text,
        files, ls: ls.exitCode, sh: sh.text.trim(), shJson: sh.output, ver: [ver.exitCode, ver.metadata.exit_code],
        proxy: viaProxy.name, meta: Object.keys(read.metadata).sort(),
      };
    }"""
    result = s.program(source=src)
    assert result.exit_code == 0, result.output
    v = result.metadata["script_result"]
    assert v["keys"] == ["exitCode", "metadata", "name", "output", "text"]
    assert v["readOut"] == "     1\tline 1"
    assert v["lines"] == "line 11\nline 12\n"
    assert v["grep"].startswith("1 match(es)")
    assert v["bm25"] == 0 and v["search"] == "src/app.py" and v["files"] == ["README.md"]
    assert v["ls"] == 0 and v["sh"] == "42" and v["shJson"] == 42 and v["ver"] == [1, 3]
    assert v["proxy"] == "read"
    assert "a3s_tool_result_evidence" not in v["meta"] and "range" in v["meta"]


def test_p3_max_output_bytes_bounds_each_result_handed_to_the_script(agent: Agent, workspace: Path) -> None:
    s = agent.session(workspace)
    src = "async function run(ctx) { const r = await ctx.read('notes.txt'); return r.text }"
    result = s.program(source=src, limits={"maxOutputBytes": 200})
    text = result.metadata["script_result"]
    assert len(text.encode()) <= 200 and "output truncated to 200 of" in text
    assert result.metadata["program"]["tool_calls"][0]["output_bytes"] > 200


def test_p3_console_output_is_kept_and_bounded(agent: Agent, workspace: Path) -> None:
    s = agent.session(workspace)
    result = s.program(source="async function run() { console.log('found', {n: 2}); return null }")
    assert 'Console:\nlog: found {"n":2}' in result.output


# ---- P-4: allow-list, recursion, task, maxToolCalls — each enforced before any side effect ---------


def test_p4_allow_list_refuses_an_unlisted_tool_and_runs_nothing_of_its_batch(
    agent: Agent, workspace: Path
) -> None:
    s = agent.session(workspace)
    src = """async function run(ctx) {
      return await Promise.all([
        ctx.read('README.md'),
        ctx.tools.write({file_path: 'denied.txt', content: 'x'}),
      ]);
    }"""
    result = s.program(source=src, allowed_tools=["read"])
    assert result.exit_code == 1
    assert result.error_kind == {"type": "permission_denied", "reason": "program_allow_list"}
    assert "tool 'write' is not allowed for this PTC script" in result.output
    assert not (workspace / "denied.txt").exists()
    assert result.metadata["program"]["tool_calls"] == []


def test_p4_a_search_mode_on_the_list_allows_that_mode_only(agent: Agent, workspace: Path) -> None:
    s = agent.session(workspace)
    ok = s.program(
        source="async function run(ctx) { return (await ctx.grep('hello')).exitCode }", allowed_tools=["grep"]
    )
    assert ok.metadata["script_result"] == 0
    bm25 = s.program(
        source="async function run(ctx) { return await ctx.bm25('hello') }", allowed_tools=["grep"]
    )
    assert bm25.error_kind["type"] == "permission_denied" and "mode 'bm25'" in bm25.output
    whole = s.program(
        source="async function run(ctx) { return (await ctx.bm25('hello')).exitCode }",
        allowed_tools=["search"],
    )
    assert whole.metadata["script_result"] == 0


def test_p4_recursion_is_refused_directly_and_through_batch(agent: Agent, workspace: Path) -> None:
    s = agent.session(workspace)
    inner = {
        "type": "script",
        "source": "async function run(ctx) { await ctx.tools.write({file_path: 'r.txt', content: 'x'}) }",
    }
    direct = s.program(
        source=f"async function run(ctx) {{ return await ctx.tool('program', {json.dumps(inner)}) }}",
        allowed_tools=["program", "write"],
    )
    assert direct.error_kind["type"] == "permission_denied"
    via_batch = s.program(
        source="async function run(ctx, i) { return await ctx.tool('batch', {invocations: [{tool: 'program', args: i.inner}]}) }",
        inputs={"inner": inner},
    )
    assert via_batch.error_kind["type"] == "permission_denied"
    assert not (workspace / "r.txt").exists()
    for name in ("dynamic_workflow", "parallel_task"):
        refused = s.program(
            source=f"async function run(ctx) {{ return await ctx.tool('{name}', {{}}) }}",
            allowed_tools=[name],
        )
        assert refused.error_kind["type"] == "permission_denied"


def test_p4_max_tool_calls_is_enforced_before_the_extra_call(agent: Agent, workspace: Path) -> None:
    s = agent.session(workspace)
    src = """async function run(ctx) {
      for (let i = 0; i < 5; i++) await ctx.tools.write({file_path: `w${i}.txt`, content: String(i)});
    }"""
    result = s.program(source=src, limits={"maxToolCalls": 2})
    assert result.exit_code == 1
    assert result.error_kind == {
        "type": "budget_exhausted",
        "resource": "tool_calls",
        "reason": "max_tool_calls",
    }
    assert "PTC script exceeded maxToolCalls=2" in result.output
    assert sorted(p.name for p in workspace.glob("w*.txt")) == ["w0.txt", "w1.txt"]
    burst = s.program(
        source="async function run(ctx) { await Promise.all([1,2,3].map(i => ctx.tools.write({file_path: `b${i}.txt`, content: 'x'}))) }",
        limits={"maxToolCalls": 2},
    )
    assert burst.error_kind["resource"] == "tool_calls" and not list(workspace.glob("b*.txt"))


def test_p4_max_tool_calls_counts_each_batch_invocation(agent: Agent, workspace: Path) -> None:
    """P-2, P-4, K-3: a ``batch`` the script calls counts one call per invocation. Counted as one,
    ``maxToolCalls: 1`` ran a batch of 32 writes (and 1,000 such calls 32,000)."""
    s = agent.session(workspace)
    src = """async function run(ctx, i) {
      return (await ctx.tool('batch', {invocations: Array.from({length: i.n}, (_, k) =>
        ({tool: 'write', args: {file_path: `q${k}.txt`, content: 'x'}}))})).exitCode;
    }"""
    refused = s.program(source=src, inputs={"n": 3}, limits={"maxToolCalls": 2})
    assert refused.error_kind == {
        "type": "budget_exhausted",
        "resource": "tool_calls",
        "reason": "max_tool_calls",
    }
    assert not list(workspace.glob("q*.txt"))
    ok = s.program(source=src, inputs={"n": 2}, limits={"maxToolCalls": 2})
    assert ok.exit_code == 0 and ok.metadata["script_result"] == 0, ok.output
    assert sorted(p.name for p in workspace.glob("q*.txt")) == ["q0.txt", "q1.txt"]


def test_p4_task_takes_one_item_inside_a_program(
    agent: Agent, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """P-4: inside QuickJS ``task`` takes a single item (a real child run, over a scripted OpenAI
    endpoint); a multi-item fan-out is refused before any child starts."""
    from tests.model_servers import ScriptedOpenAIServer

    with ScriptedOpenAIServer(route=lambda body: {"text": "done"}) as server:
        for key, value in server.env().items():
            monkeypatch.setenv(key, value)
        s = agent.session(workspace)
        s.model = "openai:program-test"
        item = {"agent": "general", "description": "d", "prompt": "p"}
        one = s.program(
            source="async function run(ctx, i) { return (await ctx.tool('task', {tasks: [i.item]})).output }",
            inputs={"item": item},
        )
        assert one.exit_code == 0, one.output
        assert "done" in one.metadata["script_result"]
        two = s.program(
            source="async function run(ctx, i) { return await ctx.tool('task', {tasks: [i.item, i.item]}) }",
            inputs={"item": item},
        )
        assert two.error_kind["type"] == "invalid_argument" and "single item" in two.output
        assert len(server.requests) == 1


# ---- K-1: the script's calls are nested calls of the program's origin -----------------------------


def test_k1_host_program_nests_trusted_and_model_program_nests_governed(
    agent: Agent, workspace: Path
) -> None:
    opts = SessionOptions(permission_policy=PermissionPolicy(allow=["program", "read"], deny=["ls"]))
    s = agent.session(workspace, opts)
    src = "async function run(ctx) { const r = await ctx.ls(''); const q = await ctx.read('README.md'); return [r.exitCode, q.exitCode] }"
    trusted = s.program(source=src)
    assert trusted.metadata["script_result"] == [0, 0]  # trusted host nesting skips the deny rule
    assert set(_nested_origins(s)) == {("ls", "trusted_host_nested"), ("read", "trusted_host_nested")}
    s2 = agent.session(workspace, opts)
    governed = s2.model_tool_call("program", _program(src))
    assert governed.metadata["script_result"] == [1, 0]  # the model's program meets the deny rule
    assert set(_nested_origins(s2)) == {("ls", "governed_nested"), ("read", "governed_nested")}


def test_k1_a_model_requested_programs_bash_obeys_a_deny_rule(agent: Agent, workspace: Path) -> None:
    (workspace / "keep.txt").write_text("precious")
    opts = SessionOptions(
        permission_policy=PermissionPolicy(allow=["program", "bash"], deny=["bash(rm *)"]),
        bash_sandbox="never",
    )
    s = agent.session(workspace, opts)
    src = "async function run(ctx) { const r = await ctx.bash('rm -f keep.txt'); return {code: r.exitCode, kind: r.metadata} }"
    result = s.model_tool_call("program", _program(src))
    assert result.exit_code == 0
    call = result.metadata["program"]["tool_calls"][0]
    assert call["tool_name"] == "bash" and not call["success"]
    assert (workspace / "keep.txt").read_text() == "precious"
    denied = [e for e in s.events() if e.type == "permission_denied"]
    assert denied and denied[0].tool == "bash" and denied[0].origin == "governed_nested"


def test_k6_closing_the_session_kills_a_running_program(agent: Agent, workspace: Path) -> None:
    import threading
    import time

    s = agent.session(workspace)
    out: list[Any] = []
    deadline = time.monotonic() + 30
    while active_pids() and time.monotonic() < deadline:  # earlier programs' children, still exiting
        time.sleep(0.02)
    t = threading.Thread(
        target=lambda: out.append(
            s.program(source="async function run() { for (;;) {} }", limits={"timeoutMs": 60000})
        )
    )
    t.start()
    while not active_pids() and time.monotonic() < deadline:
        time.sleep(0.02)
    pids = active_pids()
    assert pids
    s.close()
    t.join(30)
    assert out and out[0].error_kind["type"] == "cancelled"
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_p3_x1_glob_returns_every_match_not_the_first_page(agent: Agent, workspace: Path) -> None:
    """README's first program counts files with `(await ctx.glob('**/*.py')).length`: on a checkout
    with 442 .py files it answered 200 (search's default page) and said nothing. `ctx.glob` and
    `session.glob` follow the pages; with an explicit `limit` the caller asked for one page."""
    for i in range(1234):
        (workspace / "pkg" / f"d{i % 7}").mkdir(parents=True, exist_ok=True)
        (workspace / "pkg" / f"d{i % 7}" / f"m{i}.py").write_text("")
    everything = len(list(workspace.rglob("*.py")))  # 1234 and the fixture's src/app.py
    s = agent.session(workspace)
    result = s.program(
        {
            "source": "async function run(ctx) { const all = await ctx.glob('**/*.py');"
            " const page = await ctx.glob('**/*.py', {limit: 5}); return [all.length, new Set(all).size, page.length] }",
            "allowedTools": ["glob"],
        }
    )
    assert result.exit_code == 0, result.output
    assert result.metadata["script_result"] == [everything, everything, 5]
    assert len(set(s.glob("**/*.py"))) == everything
    assert len(s.glob("**/*.py", limit=5)) == 5
