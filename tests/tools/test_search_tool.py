"""The search tool surface (SPEC Q-1, K-4, K-5, S-2): mode exposure, capabilities, subject."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kernel.capabilities import ToolCapabilities
from kernel.errors import InvalidArgument
from kernel.result import ToolResult
from kernel.testing import make_context
from kernel.workspace import LocalWorkspace
from tools.search import TOOL, build_search_tool


def modes(spec: Any) -> list[str]:
    return spec.json_schema["properties"]["mode"]["enum"]


def test_q1_mode_enum_lists_only_servable_modes() -> None:
    assert modes(build_search_tool({"search"})) == ["grep", "glob"]
    assert modes(build_search_tool({"search", "read"})) == ["grep", "glob", "bm25"]
    assert build_search_tool({"read"}) is None
    assert build_search_tool({"write"}) is None

    async def semantic(ctx: Any, params: Any) -> ToolResult:
        return ToolResult.success("search", "semantic ran")

    full = build_search_tool({"search", "read"}, True, {"semantic": semantic, "hybrid": semantic})
    assert modes(full) == ["grep", "glob", "bm25", "semantic", "hybrid"]
    # Retrieval enabled without runners: the modes stay hidden.
    assert modes(build_search_tool({"search", "read"}, True)) == ["grep", "glob", "bm25"]
    assert TOOL.json_schema["required"] == ["mode", "query"]


def test_q1_missing_mode_is_invalid_argument_naming_the_capability() -> None:
    spec = build_search_tool({"search"})
    assert spec is not None
    with pytest.raises(InvalidArgument, match="'read'") as exc:
        spec.validate({"mode": "bm25", "query": "x"})
    assert "/mode" in exc.value.message
    with pytest.raises(InvalidArgument, match="Workspace Retrieval"):
        spec.validate({"mode": "semantic", "query": "x"})
    with pytest.raises(InvalidArgument, match="unknown search mode"):
        spec.validate({"mode": "fuzzy", "query": "x"})
    with pytest.raises(InvalidArgument, match="additional property"):
        spec.validate({"mode": "grep", "query": "x", "regex": True})
    with pytest.raises(InvalidArgument, match="/query"):
        spec.validate({"mode": "grep"})


async def test_q1_extra_runner_receives_retrieval_modes(tmp_path: Path) -> None:
    async def semantic(ctx: Any, params: Any) -> ToolResult:
        return ToolResult.success("search", f"semantic:{params.query}")

    spec = build_search_tool({"search", "read"}, True, {"semantic": semantic, "hybrid": semantic})
    assert spec is not None
    ctx = make_context(LocalWorkspace(tmp_path))
    res = await spec.run(ctx, spec.validate({"mode": "semantic", "query": "q"}))
    assert res.output == "semantic:q"


@pytest.mark.parametrize(
    ("args", "caps"),
    [
        ({"mode": "glob", "query": "*"}, ToolCapabilities.read_only_paginated(16)),
        ({"mode": "grep", "query": "x"}, ToolCapabilities.parallel_safe_read(16)),
        ({"mode": "grep", "query": "x", "output_mode": "summary"}, ToolCapabilities.parallel_safe_read(16)),
        ({"mode": "grep", "query": "x", "output_mode": "count"}, ToolCapabilities.read_only_paginated(16)),
        (
            {"mode": "grep", "query": "x", "output_mode": "files_with_matches"},
            ToolCapabilities.read_only_paginated(16),
        ),
        ({"mode": "bm25", "query": "x"}, ToolCapabilities.parallel_safe_read(2)),
    ],
)
def test_k5_capabilities_per_mode(args: dict[str, Any], caps: ToolCapabilities) -> None:
    assert TOOL.capabilities(TOOL.validate(args)) == caps


def test_q1_subject_is_the_mode_and_path_is_checked() -> None:
    assert TOOL.subject(TOOL.validate({"mode": "grep", "query": "x"})) == "grep"
    assert TOOL.path_fields == ("path",)
    assert TOOL.name == "search" and "search" in TOOL.requires


async def test_q1_blank_query_is_refused(tmp_path: Path) -> None:
    ctx = make_context(LocalWorkspace(tmp_path))
    for mode in ("grep", "glob", "bm25"):
        with pytest.raises(InvalidArgument, match="blank"):
            await TOOL.run(ctx, TOOL.validate({"mode": mode, "query": "   "}))
