"""References in a model's or an MCP server's schema: local, resolvable, never fetched (SPEC K-4, G-2, M-1).

``kernel.schema_refs`` crawls a schema once; every ``$ref``/``$dynamicRef`` must start with ``#`` and
resolve to a schema from its own base URI; validators it builds look up only what that crawl found.
"""

from __future__ import annotations

import socket
from typing import Any

import jsonschema
import pytest
import referencing

from kernel.schema_refs import RefRefused, check_refs, ref_validator
from kernel.spec import ToolSpec

D = jsonschema.Draft202012Validator


@pytest.mark.parametrize(
    ("schema", "words"),
    [
        ({"$ref": "https://evil.example/s.json"}, "only local references"),
        (
            {"type": "array", "items": {"$dynamicRef": "https://evil.example/s.json#meta"}},
            "only local references",
        ),
        ({"$defs": {"A": {"$id": "sub.json", "$ref": "other.json"}}}, "only local references"),
        ({"$ref": "#/$defs/missing"}, "does not resolve"),
        ({"type": "object", "$ref": "#/type"}, "does not resolve to a schema"),
        ({"$defs": {"A": {"$id": "https://e.example/a.json", "$ref": "#/$defs/B"}}}, "does not resolve"),
        ({"type": "array", "items": {"$ref": "#nowhere"}}, "does not resolve"),
    ],
)
def test_k4_a_reference_that_is_not_local_or_resolves_nowhere_is_refused(
    schema: dict[str, Any], words: str
) -> None:
    with pytest.raises(RefRefused, match=words):
        check_refs(schema, D)


def test_g2_local_pointers_anchors_and_dynamic_anchors_resolve() -> None:
    schema = {
        "type": "object",
        "properties": {
            "a": {"$ref": "#/$defs/A"},
            "b": {"$ref": "#bee"},
            "c": {"$dynamicRef": "#node"},
        },
        "$defs": {"A": {"type": "integer"}, "B": {"$anchor": "bee", "type": "string"}},
        "$dynamicAnchor": "node",
        "enum_holder": {"enum": [{"$ref": "https://data.example/not-a-reference"}]},
    }
    validator = ref_validator(D, schema)
    errors = sorted(e.message for e in validator.iter_errors({"a": "x", "b": 1}))
    assert errors == ["'x' is not of type 'integer'", "1 is not of type 'string'"]


def test_k4_a_validator_never_crawls_or_retrieves_while_validating(monkeypatch: pytest.MonkeyPatch) -> None:
    schema = {
        "type": "array",
        "items": {"anyOf": [{"$ref": "#num"}, {"$ref": "#/$defs/s"}]},
        "$defs": {"n": {"$anchor": "num", "type": "integer"}, "s": {"type": "string"}},
    }
    validator = ref_validator(D, schema)
    crawls: list[int] = []
    real_crawl = referencing.Registry.crawl

    def counted(self: Any) -> Any:
        crawls.append(1)
        return real_crawl(self)

    monkeypatch.setattr(referencing.Registry, "crawl", counted)
    assert [e.message for e in validator.iter_errors([1, "a"] * 200)] == []
    assert crawls == []


def test_m1_a_host_tool_schema_with_a_remote_reference_is_refused_at_registration() -> None:
    """Before: jsonschema's default registry fetched the URI (urlopen) on the first call."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(0.2)
    port = listener.getsockname()[1]

    async def run(_ctx: Any, _args: Any) -> str:
        return "ok"

    try:
        with pytest.raises(RefRefused, match="only local references"):
            ToolSpec(
                name="remote_ref",
                description="d",
                run=run,
                parameters={
                    "type": "object",
                    "properties": {"a": {"$dynamicRef": f"http://127.0.0.1:{port}/s.json"}},
                },
            )
        with pytest.raises(TimeoutError):
            listener.accept()  # nobody connected
    finally:
        listener.close()
