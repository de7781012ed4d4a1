"""What crosses the outbox bridge from a script to the host (SPEC P-3, K-8): values Python cannot
hold as the VM made them — lone UTF-16 surrogates, JSON nested deeper than the host parses, a
result far over the size cap — end typed, never as a crash of the tool (a traceback typed by the
kernel's catch-all).

Real QuickJS children and real tools; nothing mocked.
"""

from __future__ import annotations

import os
from pathlib import Path

from orchestrator import Agent

REPLACEMENT = "\ufffd"


def test_p3_k8_a_sliced_surrogate_pair_in_the_result_is_well_formed_not_a_crash(
    agent: Agent, workspace: Path
) -> None:
    """`text.slice(0, n)` through an emoji leaves a lone surrogate: the reference example does exactly
    that (`content.slice(0, 1200)`). Before, the result's UTF-8 encoding raised in the tool."""
    s = agent.session(workspace)
    src = "async function run() { const t = 'ab\U0001f600cd'; return {preview: t.slice(0, 3), whole: t} }"
    result = s.program(source=src)
    assert result.exit_code == 0, result.output
    assert result.metadata["script_result"] == {"preview": "ab" + REPLACEMENT, "whole": "ab\U0001f600cd"}
    result.output.encode("utf-8")  # the whole output is valid UTF-8


def test_p3_k8_lone_surrogates_in_inputs_args_and_tool_results_cross_the_bridge(
    agent: Agent, workspace: Path
) -> None:
    """The host side: inputs with a lone surrogate, a file name that is not UTF-8 (Python holds its
    byte as a surrogate escape) in a tool result, a lone surrogate in a tool's arguments. Before, the
    host could not encode its line to the child and the run failed as a protocol error."""
    os.close(os.open(os.path.join(os.fsencode(workspace), b"bad\xff.txt"), os.O_CREAT | os.O_WRONLY, 0o644))
    s = agent.session(workspace)
    inputs = s.program(source="async function run(ctx, i) { return i.x.length }", inputs={"x": "a\ud800"})
    assert inputs.exit_code == 0, inputs.output
    assert inputs.metadata["script_result"] == 2
    listed = s.program(
        source="""async function run(ctx) {
          const paths = await ctx.glob('bad*');
          const miss = await ctx.ls('\\ud800');
          return {paths, miss: miss.exitCode};
        }"""
    )
    assert listed.exit_code == 0, listed.output
    assert listed.metadata["script_result"] == {"paths": ["bad" + REPLACEMENT + ".txt"], "miss": 1}
    # In the source text itself (not an escape): refused up front; before, the child crashed on it.
    source = s.program(source="async function run() { return '\ud800' }")
    assert source.error_kind["type"] == "invalid_argument" and "not valid Unicode" in source.output


def test_p3_k8_json_nested_too_deep_for_the_host_is_a_typed_protocol_failure(
    agent: Agent, workspace: Path
) -> None:
    """5000 nested arrays are fine in the VM; Python's JSON parser stops at ~1000. Before, the
    RecursionError escaped the tool and the kernel reported `invalid_argument` ("input nested too
    deeply") as if the caller's arguments were at fault."""
    s = agent.session(workspace)
    deep = s.program(
        source="async function run() { let a = []; for (let i = 0; i < 5000; i++) a = [a]; return a }"
    )
    assert deep.exit_code == 1
    assert deep.error_kind == {"type": "tool_error", "stage": "protocol"}
    assert "nested too deeply" in deep.output
    forged_calls = s.program(
        source="""async function run(ctx) {
          const real = JSON.stringify;
          JSON.stringify = v => Array.isArray(v) ? '[' + '['.repeat(5000) + ']'.repeat(5000) + ']' : real(v);
          await ctx.ls('');
        }"""
    )
    assert forged_calls.error_kind == {"type": "tool_error", "stage": "protocol"}
    assert s.program(source="async function run() { return 3 }").metadata["script_result"] == 3


def test_p3_an_oversized_result_is_refused_before_it_is_pretty_printed(agent: Agent, workspace: Path) -> None:
    """Millions of `{}` (a forged JSON.stringify fills the 8 MiB line): refused from the compact size
    (this passed before as well; then the pure-Python indented encoder first ran on the event loop
    for ~3 s — the measured figure is in the commit, timing is not asserted here). Since the line's
    values are counted before it is parsed (tests/tools/test_program_vm_lines.py), it is refused
    there, before the host builds two million dicts."""
    s = agent.session(workspace)
    src = """async function run() {
      const real = JSON.stringify;
      let first = true;
      JSON.stringify = v => { if (!first) return real(v); first = false; return '[' + '{},'.repeat(2000000) + '{}]' };
      return 1;
    }"""
    result = s.program(source=src)
    assert result.exit_code == 1
    assert result.error_kind["resource"] == "vm_message_values"


def test_p4_k8_a_search_mode_that_is_not_a_string_is_refused_typed(agent: Agent, workspace: Path) -> None:
    """With a mode-restricted allow-list, `mode: {}` (or a batch item's `$ref` object) made the
    check itself raise (`{} in frozenset`: unhashable): an internal error instead of the refusal."""
    s = agent.session(workspace)
    for args in ("{mode: {}, query: 'x'}", "{mode: ['grep'], query: 'x'}"):
        result = s.program(
            source=f"async function run(ctx) {{ return await ctx.tool('search', {args}) }}",
            allowed_tools=["grep"],
        )
        assert result.error_kind == {"type": "permission_denied", "reason": "program_allow_list"}, (
            result.output
        )
    batched = s.program(
        source="""async function run(ctx) {
          return await ctx.tool('batch', {invocations: [{tool: 'search', args: {mode: {$ref: 'x'}, query: 'y'}}]});
        }""",
        allowed_tools=["grep", "batch"],
    )
    assert batched.error_kind == {"type": "permission_denied", "reason": "program_allow_list"}, batched.output


def test_k8_a_forged_done_or_calls_line_ends_typed_not_as_an_internal_error(
    agent: Agent, workspace: Path
) -> None:
    """The prelude builds its lines with the script-replaceable JSON.stringify: `logs` that is not a
    list, or a request that is not an object, raised TypeError/AttributeError in the host before
    (internal_error; a workflow's history got no terminal event)."""
    s = agent.session(workspace)
    forge_logs = "const real = JSON.stringify; JSON.stringify = v => Array.isArray(v) ? '5' : real(v);"
    program = s.program(source=f"async function run() {{ {forge_logs} return 1 }}")
    assert program.exit_code == 0 and program.metadata["script_result"] == 1, program.output
    workflow = s.workflow(source=f"async function run() {{ {forge_logs} return 1 }}", run_id="forged-logs")
    assert workflow.exit_code == 0 and workflow.metadata["output"] == 1, workflow.output
    forge_calls = """async function run(wf) {
      const real = JSON.stringify;
      JSON.stringify = v => Array.isArray(v) && v.length && v[0].kind === 'step' ? '[5, "x", ' + real(v).slice(1) : real(v);
      return (await wf.step('a', 'ls', {})).exitCode;
    }"""
    calls = s.workflow(source=forge_calls, run_id="forged-calls")
    assert calls.exit_code == 0 and calls.metadata["output"] == 0, calls.output
