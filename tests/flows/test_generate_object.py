"""``generate_object`` against scripted loopback servers (SPEC G-1..G-6, K-4, A-2; REFERENCE 4.14)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kernel.errors import InvalidArgument, Timeout, ToolError
from kernel.options import SessionOptions
from kernel.policy import PermissionPolicy
from orchestrator import Agent
from tests.model_servers import ScriptedAnthropicServer, ScriptedOpenAIServer

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer", "minimum": 0},
        "pets": {"type": "array", "items": {"$ref": "#/$defs/pet"}},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
    "$defs": {"pet": {"type": "string", "enum": ["cat", "dog"]}},
}


def _object_turn(value: Any, name: str = "result") -> dict[str, Any]:
    return {"tool_calls": [{"id": "g1", "name": name, "arguments": value}]}


@pytest.fixture()
def env(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    def use(srv: Any) -> Any:
        for k, v in srv.env().items():
            monkeypatch.setenv(k, v)
        return srv

    yield use


@pytest.fixture()
def agent() -> Iterator[Agent]:
    a = Agent(model="openai:gen-model")
    yield a
    a.close()


def test_g4_an_invalid_object_is_repaired_with_the_errors_fed_back(
    agent: Agent, workspace: Path, env: Any
) -> None:
    """G-2/G-4: an object that fails the schema goes back to the model with the validation errors
    (as the forced tool's result); the repaired object is returned, validated, with usage."""
    script = [
        _object_turn({"name": "Ada", "age": -3, "pets": ["cat", "owl"]}),
        _object_turn({"name": "Ada", "age": 36, "pets": ["cat"]}),
    ]
    with env(ScriptedOpenAIServer(script)) as srv:
        s = agent.session(workspace)
        out = s.generate_object(PERSON, "Describe Ada Lovelace.")
        second = srv.requests[1].body
    assert out["object"] == {"name": "Ada", "age": 36, "pets": ["cat"]}
    assert out["repair_rounds"] == 1 and out["mode_used"] == "tool"
    assert set(out["usage"]) == {
        "prompt_tokens",
        "completion_tokens",
        "total_tokens",
        "cache_read_tokens",
        "cache_write_tokens",
    }
    assert out["usage"]["prompt_tokens"] > 0
    feedback = next(m for m in second["messages"] if m["role"] == "tool")["content"]
    assert "$.age" in feedback and "$.pets[1]" in feedback
    assert second["tool_choice"] == {"type": "function", "function": {"name": "result"}}


@pytest.mark.parametrize("mode", ["tool", "json"])
def test_g4_k8_an_integer_over_the_int_string_limit_is_named_in_the_repair(
    agent: Agent, workspace: Path, env: Any, mode: str
) -> None:
    """G-4/K-8: valid JSON holding an integer over 4300 digits, which json.loads refuses, is fed back
    as what it is — not as "not valid JSON (Exceeds the limit ... sys.set_int_max_str_digits())"."""
    huge = '{"name": "Ada", "age": 1' + "0" * 5000 + "}"
    first = _object_turn(huge) if mode == "tool" else {"text": huge}
    fixed: dict[str, Any] = (
        _object_turn({"name": "Ada", "age": 36}) if mode == "tool" else {"text": '{"name": "Ada", "age": 36}'}
    )
    with env(ScriptedOpenAIServer([first, fixed])) as srv:
        s = agent.session(workspace)
        out = s.generate_object(PERSON, "Describe Ada Lovelace.", mode=mode)
        second = srv.requests[1].body
    assert out["object"] == {"name": "Ada", "age": 36} and out["repair_rounds"] == 1
    feedback = json.dumps(second["messages"][2:])
    assert "longer than 4300 digits" in feedback and "set_int_max_str_digits" not in feedback, feedback[:600]


def test_g4_gives_up_after_max_repair_attempts(agent: Agent, workspace: Path, env: Any) -> None:
    """G-4: after max_repair_attempts repairs that still fail, the call fails (invalid_argument naming
    the errors) and no further request is made."""
    bad = _object_turn({"name": "Ada"})
    with env(ScriptedOpenAIServer([bad], repeat_last=True)) as srv:
        s = agent.session(workspace)
        result = s.tool("generate_object", {"schema": PERSON, "prompt": "Ada", "max_repair_attempts": 2})
        requests = len(srv.requests)
        with pytest.raises(InvalidArgument, match="after 0 repair"):
            s.generate_object(PERSON, "Ada", max_repair_attempts=0)
        assert len(srv.requests) == requests + 1
    assert result.exit_code == 1 and result.error_kind["type"] == "invalid_argument"
    assert result.error_kind["repair_rounds"] == 2 and "$: 'age' is a required property" in result.output
    assert requests == 3


@pytest.mark.parametrize(
    ("args", "path"),
    [
        ({"schema": PERSON, "prompt": "   "}, "/prompt"),
        ({"schema": {"type": "frobnicate"}, "prompt": "x"}, "/schema"),
        ({"schema": {"$ref": "https://example.com/s.json"}, "prompt": "x"}, "/schema"),
        # G-2: every reference local and resolvable (kernel.schema_refs): $dynamicRef too, nothing fetched
        (
            {"schema": {"type": "array", "items": {"$dynamicRef": "http://127.0.0.1:9/s"}}, "prompt": "x"},
            "/schema",
        ),
        (
            {"schema": {"type": "object", "properties": {"a": {"$ref": "#/$defs/gone"}}}, "prompt": "x"},
            "/schema",
        ),
        ({"schema": {"type": "object", "properties": {"a": {"$ref": "#/type"}}}, "prompt": "x"}, "/schema"),
        ({"schema": "not an object", "prompt": "x"}, "/schema"),
        ({"schema": PERSON, "prompt": "x", "schema_name": "has space"}, "/schema_name"),
        ({"schema": PERSON, "prompt": "x", "schema_name": "a" * 60}, "/schema_name"),
        ({"schema": PERSON, "prompt": "x", "schema_description": "é" * 2049}, "/schema_description"),
        ({"schema": PERSON, "prompt": "x", "system": "s" * (32 * 1024 + 1)}, "/system"),
        ({"schema": PERSON, "prompt": "x", "mode": "yaml"}, "/mode"),
        ({"schema": PERSON, "prompt": "x", "max_repair_attempts": 6}, "/max_repair_attempts"),
        ({"schema": PERSON, "prompt": "x", "timeout_ms": 999}, "/timeout_ms"),
        ({"schema": PERSON, "prompt": "x", "timeout_ms": 600_001}, "/timeout_ms"),
        ({"schema": PERSON}, "/prompt"),
        ({"schema": PERSON, "prompt": "x", "extra": 1}, "/extra"),
        # K-4: a pattern RE2 cannot match in linear time (lookaround, backreference)
        ({"schema": {"type": "string", "pattern": "^(?=a)a+$"}, "prompt": "x"}, "/schema"),
        (
            {
                "schema": {
                    "type": "object",
                    "properties": {"a": {"$ref": "#/$defs/a"}},
                    "$defs": {"a": {"type": "nope"}},
                },
                "prompt": "x",
            },
            "/schema",
        ),
    ],
)
def test_g1_k4_bad_arguments_fail_before_any_request(
    agent: Agent, workspace: Path, env: Any, args: dict[str, Any], path: str
) -> None:
    """G-1/K-4: every argument rule is checked before any model request, naming the JSON path."""
    with env(ScriptedOpenAIServer([_object_turn({"name": "x", "age": 1})])) as srv:
        result = agent.session(workspace).tool("generate_object", args)
        assert srv.requests == []
    assert result.exit_code == 1 and result.error_kind["type"] == "invalid_argument"
    assert path in result.output


def test_g4_k4_a_catastrophic_pattern_is_matched_in_linear_time(
    agent: Agent, workspace: Path, env: Any
) -> None:
    """G-4/K-4: the schema says ``^(a+)+$`` and the model answers 34 ``a`` and a ``!``: jsonschema's
    ``re`` needs minutes per check (the answer and every repair), holding the GIL; RE2 answers at
    once and the call fails typed after its repairs."""
    import time

    schema = {"type": "object", "properties": {"code": {"type": "string", "pattern": "^(a+)+$"}}}
    with env(ScriptedOpenAIServer([_object_turn({"code": "a" * 34 + "!"})], repeat_last=True)):
        started = time.monotonic()
        result = agent.session(workspace).tool(
            "generate_object", {"schema": schema, "prompt": "x", "max_repair_attempts": 2}
        )
    assert time.monotonic() - started < 10
    assert result.exit_code == 1 and result.error_kind["type"] == "invalid_argument"
    assert "does not match" in result.output


def test_g1_a_deep_schema_is_refused(agent: Agent, workspace: Path, env: Any) -> None:
    """G-1: a schema nested deeper than 32 levels is invalid_argument before any request."""
    deep: dict[str, Any] = {"type": "string"}
    for _ in range(20):  # 41 nested objects: under the kernel's 64, over generate_object's 32
        deep = {"type": "object", "properties": {"x": deep}}
    with env(ScriptedOpenAIServer([])) as srv:
        result = agent.session(workspace).tool("generate_object", {"schema": deep, "prompt": "x"})
        assert srv.requests == []
    assert result.error_kind["type"] == "invalid_argument" and "deeper than 32" in result.output


def test_a1_without_a_model_generate_object_fails_before_any_request(
    workspace: Path, env: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A-1: no session model → invalid_argument, no request."""
    monkeypatch.delenv("A3S_MODEL", raising=False)
    with env(ScriptedOpenAIServer([])) as srv, Agent() as a:
        result = a.session(workspace).tool("generate_object", {"schema": PERSON, "prompt": "x"})
        assert srv.requests == []
    assert result.error_kind["type"] == "invalid_argument" and "needs a model" in result.output


@pytest.mark.parametrize(
    ("mode", "used"),
    [("auto", "tool"), ("tool", "tool"), ("strict", "strict"), ("json", "json"), ("prompt", "prompt")],
)
def test_g3_modes_shape_the_openai_request(
    agent: Agent, workspace: Path, env: Any, mode: str, used: str
) -> None:
    """G-3: tool forces a synthetic tool; strict uses native json_schema strict; json uses
    json_object plus the schema in the prompt; prompt appends the schema; the schema never rides
    as an extra request field."""
    value = {"name": "Bo", "age": 3}
    turn = _object_turn(value) if used == "tool" else {"text": "```json\n" + json.dumps(value) + "\n```"}
    with env(ScriptedOpenAIServer([turn])) as srv:
        out = agent.session(workspace).generate_object(PERSON, "Bo the toddler", mode=mode)
        body = srv.requests[0].body
    assert out["object"] == value and out["mode_used"] == used
    user = body["messages"][-1]["content"]
    assert ("tools" in body) is (used == "tool")
    if used == "strict":
        assert body["response_format"]["type"] == "json_schema"
        assert body["response_format"]["json_schema"]["strict"] is True
        assert body["response_format"]["json_schema"]["schema"] == PERSON
    if used == "json":
        assert body["response_format"] == {"type": "json_object"}
    assert ('"additionalProperties"' in user) is (used in ("json", "prompt"))
    assert not {"schema", "output_schema", "json_schema"} & set(body)


@pytest.mark.parametrize(
    ("mode", "failures"),
    [("strict", [{"status": 400}]), ("json", [{"status": 422}]), ("strict", [{"status": 500}] * 3)],
    ids=["strict-400", "json-422", "strict-500"],
)
def test_g3_a_refused_native_format_falls_back_to_a_forced_tool(
    agent: Agent, workspace: Path, env: Any, mode: str, failures: list[dict[str, Any]]
) -> None:
    """G-3: a server that refuses (4xx) or fails on (5xx after the bounded retries — llama.cpp's
    server answers 500 to ``json_schema``) a native response format gets the forced-tool request."""
    with env(ScriptedOpenAIServer([*failures, _object_turn({"name": "Cy", "age": 9})])) as srv:
        out = agent.session(workspace).generate_object(PERSON, "Cy", mode=mode)
        last = srv.requests[-1].body
        assert len(srv.requests) == len(failures) + 1
    assert "tools" in last and "response_format" not in last
    assert out["mode_used"] == "tool" and out["repair_rounds"] == 0


def test_g2_g3_array_roots_and_local_refs_through_a_wrapped_tool(
    agent: Agent, workspace: Path, env: Any
) -> None:
    """G-2/G-3: a non-object root rides a forced tool as {"value": …} (with $defs lifted so local
    references resolve) and comes back unwrapped."""
    schema = {
        "type": "array",
        "items": {"$ref": "#/$defs/n"},
        "minItems": 2,
        "$defs": {"n": {"type": "integer"}},
    }
    with env(ScriptedOpenAIServer([_object_turn({"value": [1]}), _object_turn({"value": [1, 2, 3]})])) as srv:
        out = agent.session(workspace).generate_object(schema, "three numbers")
        params = srv.requests[0].body["tools"][0]["function"]["parameters"]
    assert out["object"] == [1, 2, 3] and out["repair_rounds"] == 1
    assert params["properties"]["value"]["items"] == {"$ref": "#/$defs/n"} and "$defs" in params


def test_g3_g6_anthropic_uses_a_forced_tool_for_json_and_strict(workspace: Path, env: Any) -> None:
    """G-3/G-6: Anthropic has no native JSON mode here: json/strict fall back to the forced tool."""
    with (
        env(ScriptedAnthropicServer([_object_turn({"name": "Di", "age": 40})] * 2)) as srv,
        Agent(model="anthropic:c") as a,
    ):
        s = a.session(workspace)
        out = s.generate_object(PERSON, "Di", mode="strict")
        out2 = s.generate_object(PERSON, "Di", mode="json")
        body = srv.requests[0].body
    assert out["mode_used"] == out2["mode_used"] == "tool"
    assert body["tool_choice"] == {"type": "tool", "name": "result"}
    assert body["tools"][0]["input_schema"] == PERSON


def test_g5_partial_objects_stream_as_throttled_deltas(agent: Agent, workspace: Path, env: Any) -> None:
    """G-5: partial objects arrive as tool_output_delta {object_partial, final: false}, at most one
    per 100 ms, and the last delta is final with mode_used and repair_rounds."""
    long_value = {"name": "N" * 3000, "age": 1}
    with env(ScriptedOpenAIServer([_object_turn(long_value)], arg_chunks=40)):
        s = agent.session(workspace)
        out = s.generate_object(PERSON, "a long name")
        deltas = [
            e.data["delta"]
            for e in s.events()
            if e.type == "tool_output_delta" and e.tool == "generate_object"
        ]
    partials = [d for d in deltas if not d["final"]]
    assert out["object"] == long_value
    assert 1 <= len(partials) < 40  # throttled: far fewer than the 40 pieces that streamed
    assert isinstance(partials[0]["object_partial"], dict)
    assert deltas[-1] == {
        "final": True,
        "mode_used": "tool",
        "repair_rounds": 0,
        "object_partial": long_value,
    }


def test_g4_timeout_covers_the_whole_generation(agent: Agent, workspace: Path, env: Any) -> None:
    """G-4: the deadline starts at admission and covers requests and repairs: timeout{op, duration_ms}."""
    with env(ScriptedOpenAIServer([{"delay_s": 3, **_object_turn({"name": "Ed", "age": 1})}])):
        s = agent.session(workspace)
        with pytest.raises(Timeout) as info:
            s.generate_object(PERSON, "Ed", timeout_ms=1000)
    assert info.value.data["op"] == "generate_object" and 900 <= info.value.data["duration_ms"] < 2900


def test_g6_provider_failures_come_back_typed(agent: Agent, workspace: Path, env: Any) -> None:
    """G-6/A-3: after the bounded retries a 429 is rate_limited, visible as model_retry deltas."""
    with env(ScriptedOpenAIServer([{"status": 429, "retry_after": "0.01"}], repeat_last=True)) as srv:
        s = agent.session(workspace)
        result = s.tool("generate_object", {"schema": PERSON, "prompt": "x"})
        retries = [
            e.data["delta"]["model_retry"]
            for e in s.events()
            if e.type == "tool_output_delta" and "model_retry" in e.data["delta"]
        ]
        assert len(srv.requests) == 3
    assert result.error_kind == {"type": "rate_limited", "retry_after_ms": 10}
    assert [r["attempt"] for r in retries] == [1, 2]


def test_a2_the_model_can_call_generate_object_through_the_kernel(workspace: Path, env: Any) -> None:
    """A-2/S-2: generate_object is a session tool the model calls (origin agent, the one kernel path);
    it uses the session's model and its result goes back to the loop."""
    script = [
        {
            "tool_calls": [
                {"id": "t1", "name": "generate_object", "arguments": {"schema": PERSON, "prompt": "Fay, 7"}}
            ]
        },
        _object_turn({"name": "Fay", "age": 7}),  # the generation's own request
        {"text": "Fay is 7."},
    ]
    with env(ScriptedOpenAIServer(script)) as srv, Agent(model="openai:m") as a:
        s = a.session(
            workspace, SessionOptions(permission_policy=PermissionPolicy(allow=["generate_object"]))
        )
        result = s.send("Make Fay")
        fed_back = next(m for m in srv.requests[2].body["messages"] if m["role"] == "tool")["content"]
    assert result.success and result.text == "Fay is 7."
    assert result.tool_calls[0].tool == "generate_object" and result.tool_calls[0].exit_code == 0
    assert json.loads(fed_back)["object"] == {"name": "Fay", "age": 7}
    starts = [e for e in s.events() if e.type == "tool_start" and e.tool == "generate_object"]
    assert starts[0].origin == "agent"


def test_g2_session_helper_raises_the_typed_error(agent: Agent, workspace: Path, env: Any) -> None:
    """G-2: session.generate_object returns the validated value only on success, else raises typed."""
    with env(ScriptedOpenAIServer([{"status": 401}])):
        with pytest.raises(ToolError) as info:
            agent.session(workspace).generate_object(PERSON, "x")
    assert info.value.to_kind() == {"type": "provider_error", "status": 401}


@pytest.mark.parametrize("server_cls", [ScriptedOpenAIServer, ScriptedAnthropicServer])
def test_g5_a_stream_without_its_terminal_event_is_accepted_only_when_complete_and_valid(
    workspace: Path, env: Any, server_cls: Any
) -> None:
    """G-5: an endpoint that omits the terminal event still yields the object when what arrived is
    complete and schema-valid; a cut-off object is repaired like any invalid one."""
    cut = {
        "tool_calls": [{"id": "g1", "name": "result", "arguments": '{"name": "Gi", "ag'}],
        "no_terminal": True,
    }
    whole = {**_object_turn({"name": "Gi", "age": 5}), "no_terminal": True}
    wire = "openai" if server_cls is ScriptedOpenAIServer else "anthropic"
    with env(server_cls([cut, whole])) as srv, Agent(model=f"{wire}:m") as a:
        out = a.session(workspace).generate_object(PERSON, "Gi")
        assert len(srv.requests) == 2
    assert out["object"] == {"name": "Gi", "age": 5} and out["repair_rounds"] == 1


def test_g5_a_stream_that_keeps_failing_falls_back_to_one_blocking_request(
    agent: Agent, workspace: Path, env: Any
) -> None:
    """G-5: after the bounded retries of a stream that fails on the wire, the same request is made
    once without streaming (the provider has a distinct blocking transport)."""
    broken = {"stream_error": {"type": "overloaded_error", "message": "busy"}}
    with env(ScriptedOpenAIServer([broken, broken, broken, _object_turn({"name": "Ho", "age": 2})])) as srv:
        out = agent.session(workspace).generate_object(PERSON, "Ho")
        streamed = [bool(r.body.get("stream")) for r in srv.requests]
    assert out["object"] == {"name": "Ho", "age": 2}
    assert streamed == [True, True, True, False]


TREE = {
    "type": "object",
    "properties": {"tree": {"$ref": "#/$defs/node"}},
    "required": ["tree"],
    "$defs": {"node": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
}


@pytest.mark.parametrize("depth", [500, 100_000])
def test_g2_an_answer_nested_too_deeply_is_repaired_not_a_recursion_error(
    agent: Agent, workspace: Path, env: Any, depth: int
) -> None:
    """G-2/G-4: an answer nesting past 64 levels (jsonschema's descent or json.loads raised
    RecursionError) goes back to the model as a validation error; still too deep at the end, the
    call fails ``invalid_argument`` with ``reason: too_deep``."""
    deep = '{"tree": ' + "[" * depth + "]" * depth + "}"
    script = [_object_turn(deep), _object_turn({"tree": [[], [[]]]})]
    with env(ScriptedOpenAIServer(script)) as srv:
        out = agent.session(workspace).generate_object(TREE, "A tree.")
        feedback = next(m for m in srv.requests[1].body["messages"] if m["role"] == "tool")["content"]
    assert out["object"] == {"tree": [[], [[]]]} and out["repair_rounds"] == 1
    assert "nests more than 64 levels deep" in feedback
    with env(ScriptedOpenAIServer([_object_turn(deep)])):
        result = agent.session(workspace).tool(
            "generate_object", {"schema": TREE, "prompt": "A tree.", "max_repair_attempts": 0}
        )
    assert result.exit_code == 1 and result.error_kind["type"] == "invalid_argument"
    assert result.error_kind["reason"] == "too_deep"


def test_g4_each_error_fed_back_for_repair_is_cut_to_300_characters(
    agent: Agent, workspace: Path, env: Any
) -> None:
    """G-4: the model names the keys, and a long key made the path in each error (and so the
    repair message) as long; every error line, path included, is at most 300 characters (+ "…")."""
    schema = {"type": "object", "additionalProperties": {"type": "integer"}}
    bad = {f"{i}" + "k" * 5000: "x" for i in range(8)}
    with env(ScriptedOpenAIServer([_object_turn(bad), _object_turn({"ok": 1})])) as srv:
        out = agent.session(workspace).generate_object(schema, "Numbers.")
        feedback = next(m for m in srv.requests[1].body["messages"] if m["role"] == "tool")["content"]
    assert out["object"] == {"ok": 1}
    lines = [line[2:] for line in feedback.splitlines() if line.startswith("- ")]
    assert len(lines) == 8 and all(len(line) <= 301 for line in lines)
    assert all(line.startswith("$") and line.endswith("…") for line in lines)


def test_x3_each_output_schema_error_fed_back_is_cut_to_300_characters() -> None:
    from flows.task.runs import structured_answer

    _, errors = structured_answer(json.dumps({"v": "z" * 10_000}), {"properties": {"v": {"enum": ["a"]}}})
    assert len(errors) == 1 and len(errors[0]) == 301 and errors[0].startswith("/v: 'zzz")
