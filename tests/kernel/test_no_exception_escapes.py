"""Nothing a tool does kills the session (SPEC K-8, X-2; issue 15 item 6, issue 13 item 1).

Every raising spelling — host tools (sync/async, with and without the runtime), built-ins made to
raise, deep arguments — comes back as a failed, typed ``ToolResult`` from every entry point
(``tool``, ``governed_tool``, ``model_tool_call``, the ``*_async`` variants, inside ``batch``):
the lifecycle is closed (``tool_end`` emitted, nothing left in ``active_tools()``), the event-loop
thread survives for the next call, and ``close()`` settles.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kernel import PermissionPolicy, SessionOptions
from kernel.errors import InternalError, error_from_exception
from orchestrator import Agent

SCHEMA = {"type": "object", "properties": {"x": {}}, "additionalProperties": True}


def _argparse_exit() -> None:
    parser = argparse.ArgumentParser(prog="tool", exit_on_error=True)
    parser.add_argument("--n", type=int, required=True)
    parser.parse_args(["--n", "not-a-number"])  # prints usage and raises SystemExit(2)


RAISERS: dict[str, tuple[Callable[[], None], set[str]]] = {
    "system_exit_argparse": (_argparse_exit, {"internal_error"}),
    "system_exit": (lambda: (_ for _ in ()).throw(SystemExit(3)), {"internal_error"}),
    "keyboard_interrupt": (lambda: (_ for _ in ()).throw(KeyboardInterrupt()), {"internal_error"}),
    "value_error": (lambda: int("nope"), {"invalid_argument"}),
    "empty_runtime_error": (lambda: (_ for _ in ()).throw(RuntimeError()), {"internal_error"}),
    "type_error": (lambda: len(5), {"internal_error"}),  # type: ignore[arg-type]
    "enametoolong": (lambda: os.stat("x" * 5000), {"invalid_argument"}),
    "eloop": (
        lambda: (_ for _ in ()).throw(OSError(errno.ELOOP, "Too many levels of symbolic links", "a")),
        {"invalid_argument"},
    ),
    "einval": (
        lambda: (_ for _ in ()).throw(OSError(errno.EINVAL, "Invalid argument")),
        {"invalid_argument"},
    ),
    "enoent": (lambda: open("/nonexistent/a3s/x"), {"not_found"}),
    "enospc": (lambda: (_ for _ in ()).throw(OSError(errno.ENOSPC, "No space left")), {"internal_error"}),
    "recursion": (
        lambda: (_ for _ in ()).throw(RecursionError("maximum recursion depth")),
        {"invalid_argument"},
    ),
}


def _register(session: Any, name: str, raiser: Callable[[], None], style: str) -> None:
    if style == "sync":

        def handler(args: dict[str, Any]) -> str:
            raiser()
            return "unreachable"

    elif style == "sync_runtime":

        def handler(args: dict[str, Any], runtime: Any) -> str:  # type: ignore[misc]
            raiser()
            return "unreachable"

    elif style == "async":

        async def handler(args: dict[str, Any]) -> str:  # type: ignore[misc]
            raiser()
            return "unreachable"

    else:

        async def handler(args: dict[str, Any], runtime: Any) -> str:  # type: ignore[misc]
            await runtime.invoke_tool("ls", {"path": ""})
            raiser()
            return "unreachable"

    session.register_tool(name, handler, description="raises", parameters=SCHEMA)


def _assert_settled(session: Any, result: Any, kinds: set[str], exc_name: str | None = None) -> None:
    assert result.exit_code == 1
    assert result.error_kind is not None and result.error_kind["type"] in kinds, result.error_kind
    assert result.output.strip(), "a failed result always says what failed"
    assert "Traceback" not in result.output and 'File "' not in result.output
    if exc_name is not None and result.error_kind["type"] == "internal_error":
        assert result.error_kind["exception"] == exc_name and exc_name in result.output
    assert session.active_tools() == []
    ends = [e for e in session.events() if e.type == "tool_end" and e.data.get("exit_code") == 1]
    assert ends, "tool_end is emitted for the failed call"
    ok = session.tool("ls", {"path": ""})  # the loop thread survived: the next call runs
    assert ok.exit_code == 0


@pytest.mark.parametrize("style", ["sync", "sync_runtime", "async", "async_runtime"])
@pytest.mark.parametrize("case", sorted(RAISERS))
def test_k8_raising_host_tool_is_a_failed_typed_result(
    agent: Agent, workspace: Path, case: str, style: str, caplog: pytest.LogCaptureFixture
) -> None:
    raiser, kinds = RAISERS[case]
    s = agent.session(workspace, SessionOptions(permission_policy=PermissionPolicy(allow=["boom", "ls"])))
    _register(s, "boom", raiser, style)
    with caplog.at_level(logging.ERROR):
        res = s.tool("boom", {})
    _assert_settled(s, res, kinds)
    assert any(r.exc_info for r in caplog.records), "the traceback goes to the logs"
    for call in (s.governed_tool, s.model_tool_call):
        _assert_settled(s, call("boom", {}), kinds)
    # inside a batch: the siblings' results survive and the failed index is named (X-2)
    batch = s.tool(
        "batch",
        {"invocations": [{"tool": "ls", "args": {"path": ""}}, {"tool": "boom", "args": {}}, {"tool": "ls"}]},
    )
    assert batch.exit_code == 0 and batch.metadata["failed_indices"] == [1]
    assert batch.metadata["results"][1]["error_kind"]["type"] in kinds
    assert batch.metadata["results"][0]["success"] and batch.metadata["results"][2]["success"]
    assert s.active_tools() == []
    s.close()  # settles: no TimeoutError


@pytest.mark.parametrize("case", ["system_exit_argparse", "keyboard_interrupt", "enametoolong", "type_error"])
def test_k8_async_entry_points_return_failed_results(agent: Agent, workspace: Path, case: str) -> None:
    raiser, kinds = RAISERS[case]
    s = agent.session(workspace, SessionOptions(permission_policy=PermissionPolicy(allow=["boom", "ls"])))
    _register(s, "boom", raiser, "async")

    async def main() -> list[Any]:
        return [
            await s.tool_async("boom", {}),
            await s.governed_tool_async("boom", {}),
            await s.tool_async("batch", {"invocations": [{"tool": "boom"}, {"tool": "boom"}]}),
        ]

    direct, governed, batch = asyncio.run(main())
    _assert_settled(s, direct, kinds)
    _assert_settled(s, governed, kinds)
    assert batch.exit_code == 1 and batch.error_kind == {"type": "partial_failure", "failed": 2, "total": 2}
    assert batch.metadata["failed_indices"] == [0, 1]
    # the sync future form (no running loop) too
    assert s.tool_async("boom", {}).result(timeout=30).exit_code == 1  # type: ignore[attr-defined]
    s.close()


def test_k8_parallel_batch_keeps_every_sibling_when_one_raises(agent: Agent, workspace: Path) -> None:
    """A read-only step fans out in a TaskGroup: one raising child must not become an ExceptionGroup."""
    s = agent.session(workspace)

    async def fine(args: dict[str, Any]) -> str:
        await asyncio.sleep(0.05)
        return f"ok {args.get('x')}"

    async def bad(args: dict[str, Any]) -> str:
        raise SystemExit(2)

    caps = {"read_only": True, "idempotent": True, "cancel_safe": True, "max_parallelism": 8}
    s.register_tool("fine", fine, description="ok", parameters=SCHEMA, capabilities=caps)
    s.register_tool("bad", bad, description="bad", parameters=SCHEMA, capabilities=caps)
    calls = [{"tool": "fine", "args": {"x": i}} for i in range(4)]
    calls.insert(2, {"tool": "bad", "args": {}})
    res = s.tool("batch", {"invocations": calls})
    assert res.exit_code == 0 and res.metadata["execution_mode"] == "parallel"
    assert res.metadata["failed_indices"] == [2] and res.metadata["success_count"] == 4
    assert "ok 0" in res.output and "ok 3" in res.output and "internal_error" not in res.output
    assert res.metadata["results"][2]["error_kind"]["exception"] == "SystemExit"
    assert s.active_tools() == []
    s.close()


def _deep(n: int) -> Any:
    value: Any = "leaf"
    for _ in range(n):
        value = {"x": value}
    return value


def test_k8_5000_deep_arguments_are_invalid_argument_everywhere(agent: Agent, workspace: Path) -> None:
    s = agent.session(workspace, SessionOptions(permission_policy=PermissionPolicy(allow=["*"])))

    def echo(args: dict[str, Any]) -> str:
        return "never"

    s.register_tool("echo", echo, description="echo", parameters=SCHEMA)
    deep = _deep(5000)
    for name, args in (
        ("echo", {"x": deep}),
        ("read", {"file_path": "README.md", "x": deep}),
        ("batch", {"invocations": [{"tool": "echo", "args": {"x": deep}}]}),
    ):
        for call in (s.tool, s.governed_tool, s.model_tool_call):
            res = call(name, args)
            assert res.exit_code == 1 and res.error_kind is not None
            assert res.error_kind["type"] == "invalid_argument", res.error_kind
            assert "nested" in res.output
            assert s.active_tools() == []
    assert s.tool("read", {"file_path": "README.md"}).exit_code == 0
    s.close()


def test_k4_k8_an_integer_over_the_int_string_limit_is_invalid_argument_everywhere(
    agent: Agent, workspace: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A host's Python int longer than 4300 digits reached the tool, whose message naming it raised
    ValueError ('Exceeds the limit ...', a traceback logged). It is refused before validation, saying so."""
    import sys

    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        huge = 10**5000
    finally:
        sys.set_int_max_str_digits(limit)
    s = agent.session(workspace, SessionOptions(permission_policy=PermissionPolicy(allow=["*"])))
    s.register_tool("echo", lambda args: "never", description="echo", parameters=SCHEMA)
    caplog.set_level(logging.ERROR)
    for name, args in (
        ("echo", {"x": [1, {"y": -huge}]}),
        ("read", {"file_path": "README.md", "offset": huge}),
        ("batch", {"invocations": [{"tool": "read", "args": {"file_path": "README.md", "offset": huge}}]}),
    ):
        for call in (s.tool, s.governed_tool, s.model_tool_call):
            res = call(name, args)
            assert res.error_kind is not None and res.error_kind["type"] == "invalid_argument", res.output
            assert "integer" in res.output and "longer than 4300 digits" in res.output, res.output
    assert [r.getMessage() for r in caplog.records if "raised" in r.getMessage()] == []
    assert s.tool("read", {"file_path": "README.md", "offset": 10**4299}).output.startswith("Offset 1000")
    assert s.tool("read", {"file_path": "README.md"}).exit_code == 0
    s.close()


def test_k8_built_in_tools_with_os_errors_are_typed(agent: Agent, workspace: Path) -> None:
    """A path component longer than NAME_MAX makes the OS say ENAMETOOLONG: a typed failure, not a raise."""
    s = agent.session(workspace, SessionOptions(permission_policy=PermissionPolicy(allow=["*"])))
    long_name = "a" * 300
    for name, args in (
        ("read", {"file_path": long_name}),
        ("ls", {"path": long_name}),
        ("write", {"file_path": f"{long_name}/x.txt", "content": "x"}),
        ("edit", {"file_path": long_name, "old_string": "a", "new_string": "b"}),
        ("search", {"mode": "grep", "query": "x", "path": long_name}),
        ("search", {"mode": "glob", "query": "*", "path": long_name}),
    ):
        for call in (s.tool, s.model_tool_call):
            res = call(name, args)
            assert res.exit_code == 1, (name, res.output)
            assert res.error_kind is not None
            assert res.error_kind["type"] in {"invalid_argument", "not_found", "path_outside_workspace"}
            assert s.active_tools() == []
    res = s.tool(
        "batch",
        {"invocations": [{"tool": "read", "args": {"file_path": long_name}}, {"tool": "ls", "args": {}}]},
    )
    assert res.exit_code == 0 and res.metadata["failed_indices"] == [0]
    s.close()


def test_k8_raising_hooks_and_confirmation_handlers_are_failed_results(agent: Agent, workspace: Path) -> None:
    def pre(_inp: Any) -> Any:
        raise SystemExit(1)

    s = agent.session(workspace, SessionOptions(pre_tool_hooks=[pre]))
    res = s.tool("ls", {"path": ""})
    assert res.exit_code == 1 and res.error_kind is not None and res.error_kind["type"] == "internal_error"
    assert s.active_tools() == []
    s.close()

    def post(_inp: Any) -> Any:
        raise ValueError("bad post hook")

    s = agent.session(workspace, SessionOptions(post_tool_hooks=[post]))
    res = s.tool("ls", {"path": ""})
    assert res.exit_code == 1 and res.error_kind is not None and res.error_kind["type"] == "invalid_argument"
    s.close()

    def confirm(_req: Any) -> bool:
        raise KeyboardInterrupt

    s = agent.session(workspace, SessionOptions(confirmation=confirm))
    res = s.model_tool_call("ls", {"path": ""})
    assert res.error_kind == {"type": "confirmation_rejected", "reason": "handler_error"}
    assert s.tool("ls", {"path": ""}).exit_code == 0
    s.close()


def test_k8_exception_table_maps_every_spelling_in_one_place() -> None:
    assert error_from_exception(OSError(errno.ENAMETOOLONG, "File name too long", "p"), "t").kind == (
        "invalid_argument"
    )
    assert error_from_exception(FileNotFoundError(errno.ENOENT, "No such file", "p"), "t").to_kind() == {
        "type": "not_found",
        "path": "p",
    }
    assert error_from_exception(PermissionError(errno.EACCES, "denied"), "t").to_kind() == {
        "type": "permission_denied",
        "reason": "os_permission",
    }
    assert error_from_exception(ConnectionResetError(errno.ECONNRESET, "reset"), "t").kind == "transport"
    assert error_from_exception(TimeoutError(), "t").kind == "timeout"
    unknown = error_from_exception(OSError(errno.EIO, "I/O error"), "t")
    assert isinstance(unknown, InternalError) and unknown.data == {"exception": "OSError", "errno": "EIO"}
    bug = error_from_exception(KeyError("k"), "t")
    assert bug.to_kind() == {"type": "internal_error", "exception": "KeyError", "errno": None}
    assert "KeyError" in bug.message and "'k'" in bug.message


async def test_k8_x3_a_branch_runner_that_raises_fails_that_branch_typed_and_the_others_go_on() -> None:
    """K-8/X-3: a runner's own defect for one branch (a TypeError, as a branch value of the wrong
    shape once raised in the fleet's budget wrapper) used to escape the branch's task: the whole
    fan-out ended with every branch ``cancelled``. Now that branch fails ``internal_error`` and the
    others complete."""
    from flows.fanout import Branch, FanOutPolicy, fan_out
    from kernel.result import ToolResult

    class Runner:
        async def run_branch(self, run_id: str, index: int, branch: Branch) -> ToolResult:
            if index == 1:
                raise TypeError("a defect in the runner")
            return ToolResult.success(branch.tool, f"ran {index}", {})

    branches = [Branch("ls", {}, f"b{i}") for i in range(3)]
    run = await fan_out(Runner(), "run-1", branches, FanOutPolicy(allow_partial_failure=True))
    statuses = [o.status for o in run.outcomes]
    assert statuses == ["succeeded", "failed", "succeeded"], statuses
    failed = run.outcomes[1].result
    assert failed is not None and failed.error_kind is not None
    assert failed.error_kind["type"] == "internal_error"
    assert "Traceback" not in failed.output
