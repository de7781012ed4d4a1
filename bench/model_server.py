"""A zero-latency OpenAI-compatible chat-completions endpoint for ``bench.agent`` (run as a process).

    python -m bench.model_server PORT

Every ``POST /v1/chat/completions`` is answered at once with the same assistant turn: one call of
the ``noop`` tool (plus usage), as JSON or, when the request streams, as SSE chunks. It reads and
parses the request body like a real server would, and keeps connections alive (HTTP/1.1), so a
request costs what the client side costs plus a little socket work.
"""

from __future__ import annotations

import json
import socket
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CALL = {"id": "call_1", "type": "function", "function": {"name": "noop", "arguments": "{}"}}
USAGE = {
    "prompt_tokens": 900,
    "completion_tokens": 5,
    "total_tokens": 905,
    "prompt_tokens_details": {"cached_tokens": 0},
}
MESSAGE = json.dumps(
    {
        "id": "chatcmpl-b",
        "object": "chat.completion",
        "created": 0,
        "model": "bench",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": None, "tool_calls": [CALL]},
                "finish_reason": "tool_calls",
            }
        ],
        "usage": USAGE,
    }
).encode()


def _chunks() -> bytes:
    base = {"id": "chatcmpl-b", "object": "chat.completion.chunk", "created": 0, "model": "bench"}
    pieces: list[dict[str, Any]] = [
        {
            **base,
            "choices": [
                {
                    "index": 0,
                    "delta": {"role": "assistant", "content": None, "tool_calls": [{"index": 0, **CALL}]},
                    "finish_reason": None,
                }
            ],
        },
        {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
        {**base, "choices": [], "usage": USAGE},
    ]
    return b"".join(b"data: " + json.dumps(p).encode() + b"\n\n" for p in pieces) + b"data: [DONE]\n\n"


STREAM = _chunks()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in separate writes: without NODELAY, Nagle + delayed ACK add ~40 ms.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        payload, kind = (STREAM, "text/event-stream") if body.get("stream") else (MESSAGE, "application/json")
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


def main() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
