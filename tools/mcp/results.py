"""An MCP ``CallToolResult`` as a ``ToolResult`` (SPEC M-1, R-6): text for the model, the rest as artifacts.

- text blocks become the output, joined by newlines, in order;
- structured content is kept in ``metadata.mcp.structured_content`` (inline up to
  ``MAX_INLINE_STRUCTURED_BYTES`` of JSON, else stored as an artifact named in
  ``structured_content_uri``); when the server sent no text it is also the output (as JSON);
- images, audio and blob resources are decoded and stored in the session's artifact store; the
  output names each with its MIME type, size and ``a3s://tool-output/…`` URI (``session.read_artifact``
  and ``a3s-fleet artifact`` give the bytes back); embedded text resources are inlined under a
  header with their URI; resource links are listed;
- ``is_error: true`` (the tool reported a failure the model can correct) is ``exit_code 1`` with no
  ``error_kind``: the server's own words are the output.

The kernel then sanitises and projects the output and attaches evidence, as for every tool.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import mcp_types as types
import msgspec

from kernel.artifacts import ArtifactStore
from kernel.result import ToolResult

MAX_INLINE_STRUCTURED_BYTES = 64 * 1024
MAX_BLOCK_SUMMARIES = 256


def to_tool_result(
    name: str, server: str, tool: str, result: types.CallToolResult, artifacts: ArtifactStore
) -> ToolResult:
    lines: list[str] = []
    blocks: list[dict[str, Any]] = []
    for block in result.content:
        summary = _block(name, block, lines, artifacts)
        if len(blocks) < MAX_BLOCK_SUMMARIES:
            blocks.append(summary)
    meta: dict[str, Any] = {
        "server": server,
        "tool": tool,
        "is_error": bool(result.is_error),
        "content": blocks,
    }
    if len(result.content) > MAX_BLOCK_SUMMARIES:
        meta["content_omitted"] = len(result.content) - MAX_BLOCK_SUMMARIES
    structured = result.structured_content
    if structured is not None:
        try:
            data = msgspec.json.encode(structured)  # C speed: this runs on every structured result
        except (TypeError, ValueError, RecursionError, msgspec.EncodeError):
            data = None
            meta["structured_content_error"] = "not serializable as JSON"
        if data is not None:
            if len(data) <= MAX_INLINE_STRUCTURED_BYTES:
                meta["structured_content"] = structured
            else:
                meta["structured_content_uri"] = artifacts.put(name, data)
                meta["structured_content_bytes"] = len(data)
            if not any(b.get("type") == "text" for b in blocks):
                lines.append(data.decode("utf-8", "replace"))
    output = "\n".join(lines)
    return ToolResult(name=name, output=output, exit_code=1 if result.is_error else 0, metadata={"mcp": meta})


def _block(name: str, block: Any, lines: list[str], artifacts: ArtifactStore) -> dict[str, Any]:
    kind = getattr(block, "type", "unknown")
    if isinstance(block, types.TextContent):
        lines.append(block.text)
        return {"type": "text", "chars": len(block.text)}
    if isinstance(block, (types.ImageContent, types.AudioContent)):
        return _binary(name, kind, block.mime_type, block.data, None, lines, artifacts)
    if isinstance(block, types.EmbeddedResource):
        res = block.resource
        if isinstance(res, types.TextResourceContents):
            lines.append(f"[resource {res.uri}" + (f" ({res.mime_type})" if res.mime_type else "") + "]")
            lines.append(res.text)
            return {
                "type": "resource",
                "uri": str(res.uri),
                "mime_type": res.mime_type,
                "chars": len(res.text),
            }
        return _binary(name, "resource", res.mime_type, res.blob, str(res.uri), lines, artifacts)
    if isinstance(block, types.ResourceLink):
        label = block.title or block.name
        lines.append(f"[resource link {label}: {block.uri}]")
        return {
            "type": "resource_link",
            "uri": str(block.uri),
            "name": block.name,
            "mime_type": block.mime_type,
        }
    lines.append(f"[{kind} content omitted]")
    return {"type": str(kind)}


def _binary(
    name: str,
    kind: str,
    mime: str | None,
    data_b64: str,
    source_uri: str | None,
    lines: list[str],
    artifacts: ArtifactStore,
) -> dict[str, Any]:
    mime = mime or "application/octet-stream"
    try:
        data = base64.b64decode(data_b64, validate=True)
    except (binascii.Error, ValueError):
        lines.append(f"[{kind} {mime}: not valid base64, omitted]")
        return {"type": kind, "mime_type": mime, "error": "invalid base64"}
    uri = artifacts.put(name, data)
    where = f" from {source_uri}" if source_uri else ""
    lines.append(f"[{kind} {mime}, {len(data)} bytes{where}: {uri}]")
    out: dict[str, Any] = {"type": kind, "mime_type": mime, "bytes": len(data), "uri": uri}
    if source_uri:
        out["resource_uri"] = source_uri
    return out
