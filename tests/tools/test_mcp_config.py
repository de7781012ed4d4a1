"""MCP configuration and the shape of MCP tool specs, without a server (SPEC M-1, K-4, K-5).

The ``.mcp.json`` shape other agents use; servers that cannot be expressed are skipped with a
warning naming them; names, schemas and annotations become kernel specs as docs/mcp-and-skills.md
says.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest

from kernel.errors import InvalidArgument
from tools.mcp import load_config_file, parse_config, session_config
from tools.mcp.config import McpServerConfig
from tools.mcp.connection import McpConnection
from tools.mcp.specs import SchemaRefused, build_spec, checked_schema, surface_name


def _conn(**kw: Any) -> McpConnection:
    return McpConnection(McpServerConfig(name="srv", transport="stdio", command="x", **kw))


def _tool(name: str = "t", schema: Any = None, **ann: Any) -> types.Tool:
    return types.Tool(
        name=name,
        description="d",
        input_schema=schema if schema is not None else {"type": "object", "properties": {}},
        annotations=types.ToolAnnotations(**ann) if ann else None,
    )


def test_m1_config_reads_the_mcp_json_shape_stdio_and_http() -> None:
    doc = {
        "mcpServers": {
            "files": {
                "command": "node",
                "args": ["srv.js", "--root", "${HOME_DIR}"],
                "env": {"TOKEN": "${T:-x}"},
            },
            "remote": {
                "type": "http",
                "url": "https://mcp.example/mcp",
                "headers": {"Authorization": "Bearer ${T}"},
            },
        },
        "otherAgentKey": True,
    }
    cfg = parse_config(doc, source="test", base_dir="/base", environ={"HOME_DIR": "/h", "T": "tok"})
    assert cfg.warnings == []
    files, remote = cfg.servers["files"], cfg.servers["remote"]
    assert files.transport == "stdio" and files.args == ("srv.js", "--root", "/h")
    assert dict(files.env) == {"TOKEN": "tok"}
    assert remote.transport == "http" and dict(remote.headers) == {"Authorization": "Bearer tok"}
    assert "tok" not in remote.describe()  # descriptions never carry secrets


def test_m1_config_skips_servers_that_cannot_be_expressed_with_a_warning_naming_them() -> None:
    doc = {
        "mcpServers": {
            "good": {"command": "x"},
            "bad__name": {"command": "x"},
            "both": {"command": "x", "url": "http://a"},
            "old": {"type": "sse", "url": "http://a/sse"},
            "unset": {"command": "${NOPE}"},
            "ftp": {"url": "ftp://a"},
            "slow": {"command": "x", "timeout_ms": 5},
        }
    }
    cfg = parse_config(doc, source="test", environ={})
    assert list(cfg.servers) == ["good"]
    text = "\n".join(cfg.warnings)
    for name in ("bad__name", "both", "old", "unset", "ftp", "slow"):
        assert f"MCP server '{name}'" in text
    assert "SSE transport is not supported" in text and "NOPE is not set" in text


def test_m1_config_file_errors_are_one_clear_invalid_argument(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(InvalidArgument, match="not valid JSON"):
        load_config_file(bad)
    with pytest.raises(InvalidArgument, match="cannot read"):
        load_config_file(tmp_path / "missing.json")
    with pytest.raises(InvalidArgument, match="must be an object"):
        parse_config({"mcpServers": []}, source="x")


def test_m1_relative_cwd_is_taken_from_the_config_files_directory(tmp_path: Path) -> None:
    path = tmp_path / "conf" / "mcp.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"mcpServers": {"a": {"command": "x", "cwd": "servers"}}}))
    assert load_config_file(path).servers["a"].cwd == str(tmp_path / "conf" / "servers")


def test_m1_workspace_config_is_read_only_on_opt_in(tmp_path: Path) -> None:
    """A workspace's own .mcp.json starts programs: ignored unless the user opted in."""
    (tmp_path / ".mcp.json").write_text(json.dumps({"mcpServers": {"ws": {"command": "evil"}}}))
    host = parse_config({"h": {"command": "ok"}}, source="host")
    assert list(session_config(host, None, tmp_path, read_workspace=False).servers) == ["h"]
    both = session_config(host, {"ws": {"command": "mine"}}, tmp_path, read_workspace=True)
    assert sorted(both.servers) == ["h", "ws"]
    assert both.servers["ws"].command == "mine"  # the session's own config wins over the workspace's


def test_m1_surface_names_are_sanitised_and_bounded() -> None:
    assert surface_name("github", "create_issue") == "mcp__github__create_issue"
    assert surface_name("fs", "read.file/v2") == "mcp__fs__read_file_v2"
    assert surface_name("fs", "") is None
    assert surface_name("fs", "x" * 200) is None


def test_k4_invalid_or_oversized_schemas_are_refused_at_registration() -> None:
    with pytest.raises(SchemaRefused, match="type 'string'"):
        checked_schema({"type": "string"})
    with pytest.raises(SchemaRefused, match="larger than"):
        checked_schema({"type": "object", "description": "x" * 300_000})
    with pytest.raises(SchemaRefused, match="only local references"):
        checked_schema({"type": "object", "properties": {"a": {"$ref": "https://evil.example/s.json"}}})
    with pytest.raises(SchemaRefused, match="does not resolve"):
        checked_schema({"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}})
    ok = checked_schema(
        {"type": "object", "properties": {"a": {"$ref": "#/$defs/A"}}, "$defs": {"A": {"type": "integer"}}}
    )
    assert ok["$defs"]["A"] == {"type": "integer"}
    # A reference is resolved from its own subschema's base ($id), as the validator will resolve it.
    with pytest.raises(SchemaRefused, match="does not resolve"):
        checked_schema(
            {
                "type": "object",
                "properties": {
                    "s": {"$id": "https://e.example/s.json", "properties": {"a": {"$ref": "#/$defs/A"}}}
                },
                "$defs": {"A": {"type": "integer"}},
            }
        )
    with pytest.raises(SchemaRefused, match="only local references"):
        checked_schema(
            {"type": "object", "properties": {"a": {"$dynamicRef": "https://evil.example/s.json"}}}
        )
    with pytest.raises(Exception, match=r"is not valid under any of the given schemas|is not of type"):
        build_spec(
            _conn(), _tool(schema={"type": "object", "properties": {"a": {"type": 12}}}), "mcp__srv__t"
        )


def test_k4_a_draft07_schema_validates_with_its_own_draft() -> None:
    schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {"pair": {"type": "array", "items": [{"type": "string"}, {"type": "integer"}]}},
        "additionalProperties": False,
    }
    spec = build_spec(_conn(), _tool(schema=schema), "mcp__srv__t")
    assert spec.validate({"pair": ["a", 1]}) == {"pair": ["a", 1]}
    with pytest.raises(InvalidArgument, match="/pair/1"):
        spec.validate({"pair": ["a", "b"]})


def test_k5_annotations_map_to_capabilities_and_confirmation() -> None:
    ro = build_spec(_conn(), _tool(read_only_hint=True), "mcp__srv__ro")
    caps = ro.capabilities({})
    assert caps.read_only and caps.idempotent and caps.allows_parallel_batch
    assert not ro.requires_confirmation({})
    idem = build_spec(_conn(), _tool(read_only_hint=False, idempotent_hint=True), "mcp__srv__i")
    assert idem.capabilities({}).idempotent and not idem.capabilities({}).read_only
    destructive = build_spec(_conn(), _tool(destructive_hint=True), "mcp__srv__d")
    assert destructive.requires_confirmation({}) and not destructive.capabilities({}).read_only
    plain = build_spec(_conn(), _tool(), "mcp__srv__p")
    assert plain.capabilities({}) == plain.capabilities({}).conservative().with_output("mixed")
    assert not plain.requires_confirmation({})
    distrusted = build_spec(_conn(trust_annotations=False), _tool(read_only_hint=True), "mcp__srv__x")
    assert not distrusted.capabilities({}).read_only
    assert ro.trust == "external" and not ro.builtin


def test_m1_errors_never_quote_the_url_query_or_a_header_value() -> None:
    config = McpServerConfig(
        name="w",
        transport="http",
        url="https://mcp.example/mcp?token=sekrit123",
        headers=(("Authorization", "Bearer abcdefgh1234"),),
    )
    conn = McpConnection(config)
    err = conn._start_error(
        OSError("401 for url 'https://mcp.example/mcp?token=sekrit123' (Bearer abcdefgh1234)"), None
    )
    assert "sekrit123" not in err.message and "abcdefgh1234" not in err.message
    assert "https://mcp.example/mcp" in err.message
