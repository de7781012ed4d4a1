"""The MCP server ``bench/mcp.py`` measures against, written with the SDK's ``MCPServer``.

python -m bench.mcp_server            # stdio
python -m bench.mcp_server http PORT  # streamable HTTP on 127.0.0.1:PORT/mcp
"""

from __future__ import annotations

import sys

from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

server = MCPServer("a3s-bench")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def echo(text: str) -> str:
    """Return ``text``."""
    return text


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
