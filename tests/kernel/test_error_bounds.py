"""Error messages are bounded like outputs (SPEC K-8, R; issue 15 item 9).

A hostile argument echoed into an error (a 100 KB git ref, a 60 KB regex, a 1 MB exception text, a
hand-built ``error_kind``) never yields an ``error_kind`` string field above
``MAX_ERROR_FIELD_BYTES``; cuts are UTF-8 safe and carry a marker.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from kernel import PermissionPolicy, SessionOptions, ToolResult
from kernel.errors import MAX_ERROR_FIELD_BYTES, InvalidArgument, NotFound, bound_text
from orchestrator import Agent

LIMIT = MAX_ERROR_FIELD_BYTES + 64  # the bound plus the marker


def _assert_bounded(res: ToolResult) -> None:
    assert res.exit_code == 1 and res.error_kind is not None
    for key, value in res.error_kind.items():
        if isinstance(value, str):
            assert len(value.encode()) <= LIMIT, (key, len(value.encode()))
    assert len(json.dumps(res.error_kind).encode()) < 4 * LIMIT


def test_bound_text_is_utf8_safe_with_a_marker() -> None:
    text = "é" * 10_000  # 2 bytes each: a cut in the middle of a character would be invalid UTF-8
    out = bound_text(text, 1001)
    assert out.startswith("é" * 500) and "[" in out and "more bytes]" in out
    out.encode("utf-8")  # no lone surrogates, no half characters
    assert bound_text("short") == "short"
    err = InvalidArgument("x" * 1_000_000)
    assert len(err.message.encode()) <= LIMIT and len(err.to_kind()["message"].encode()) <= LIMIT
    assert len(NotFound("nf", path="p" * 100_000).to_kind()["path"]) <= LIMIT


def test_huge_inputs_through_several_tools_give_bounded_errors(agent: Agent, workspace: Path) -> None:
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    subprocess.run(
        [
            "git",
            "-C",
            str(workspace),
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "init",
        ],
        check=True,
    )
    s = agent.session(workspace, SessionOptions(permission_policy=PermissionPolicy(allow=["*"])))

    def shout(args: dict[str, Any]) -> str:
        raise ValueError("é" * 500_000)

    def hand_built(args: dict[str, Any]) -> ToolResult:
        return ToolResult("hand", "failed", 1, {}, {"type": "custom", "detail": "z" * 300_000, "n": 1})

    s.register_tool("shout", shout, description="raises", parameters={"type": "object"})
    s.register_tool("hand", hand_built, description="hand-built kind", parameters={"type": "object"})
    calls: list[tuple[str, dict[str, Any]]] = [
        ("git", {"command": "log", "ref": "r" * 100_000}),
        ("git", {"command": "checkout", "ref": "b" * 100_000}),
        ("git", {"command": "diff", "target": "t" * 100_000}),
        ("search", {"mode": "grep", "query": "(" * 60_000}),
        ("read", {"file_path": "d/" * 2000 + "x"}),
        ("edit", {"file_path": "README.md", "old_string": "nothere" * 20_000, "new_string": "y"}),
        ("shout", {}),
        ("hand", {}),
    ]
    for name, args in calls:
        for call in (s.tool, s.model_tool_call):
            res = call(name, args)
            _assert_bounded(res)
    hand = s.tool("hand", {})
    assert hand.error_kind is not None and hand.error_kind["n"] == 1
    assert hand.error_kind["detail"].endswith("more bytes]")
    # events carry the bounded kind too
    for e in s.events():
        if e.type == "tool_end" and e.data.get("error_kind"):
            for value in e.data["error_kind"].values():
                if isinstance(value, str):
                    assert len(value.encode()) <= LIMIT
    s.close()
