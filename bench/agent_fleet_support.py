"""What ``bench.agent_fleet`` needs besides the fleet: a zero-latency OpenAI-compatible endpoint and the
bare-Celery baseline (``celery -A bench.agent_fleet_support:app``) whose task makes the same HTTP call.

The endpoint answers every ``POST /v1/chat/completions`` at once with one fixed assistant message
(streamed when the request asks), keep-alive, TCP_NODELAY, from a thread per connection: the model is
not what is measured. It records the last request body it saw.

The bare task makes *the same HTTP call* as a child run: the request body a child sent (recorded by
the endpoint, handed to the bare workers through Redis key ``BODY_KEY``; only the prompt changes per
task), sent with the same official ``openai`` SDK (one client per worker process) — so what differs
is only what a3s adds around the call: the job envelope, the child's session, the agent loop, the
kernel, the bounded result and the fan-in.
"""

from __future__ import annotations

import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

BARE_TASK = "bench.chat"
BODY_KEY = "bench:agent_fleet:child_request"
ANSWER = "The answer is 42."


def _completion(stream: bool) -> list[bytes]:
    usage = {"prompt_tokens": 20, "completion_tokens": 6, "total_tokens": 26}
    if not stream:
        body = {
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "created": 0,
            "model": "bench",
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": ANSWER}, "finish_reason": "stop"}
            ],
            "usage": usage,
        }
        return [json.dumps(body).encode()]
    base = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 0, "model": "bench"}
    chunks = [
        {
            **base,
            "choices": [
                {"index": 0, "delta": {"role": "assistant", "content": ANSWER}, "finish_reason": None}
            ],
        },
        {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        {**base, "choices": [], "usage": usage},
    ]
    return [f"data: {json.dumps(c)}\n\n".encode() for c in chunks] + [b"data: [DONE]\n\n"]


class ZeroLatencyServer:
    """``with ZeroLatencyServer() as s: s.base_url`` — ``http://127.0.0.1:PORT/v1``."""

    def __init__(self) -> None:
        self.last_body: dict[str, Any] = {}
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body are separate writes: without TCP_NODELAY, Nagle's algorithm and the
            # client's delayed ACK stall every answer by ~40 ms — then the endpoint is all we measure.
            disable_nagle_algorithm = True

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                body = json.loads(raw or b"{}")
                owner.last_body = body
                stream = bool(body.get("stream"))
                parts = _completion(stream)
                self.send_response(200)
                if stream:
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    for p in parts:
                        self.wfile.write(f"{len(p):x}\r\n".encode() + p + b"\r\n")
                    self.wfile.write(b"0\r\n\r\n")
                else:
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(parts[0])))
                    self.end_headers()
                    self.wfile.write(parts[0])

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> ZeroLatencyServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


_CLIENT: Any = None
_BODY: dict[str, Any] | None = None


def _chat(prompt: str) -> str:
    import openai
    import redis

    global _CLIENT, _BODY
    if _CLIENT is None:
        _CLIENT = openai.OpenAI(base_url=os.environ["OPENAI_BASE_URL"], max_retries=0, timeout=30)
    if _BODY is None:
        raw = redis.Redis.from_url(os.environ["A3S_BROKER_URL"]).get(BODY_KEY)
        _BODY = json.loads(raw or b"{}")
    body = dict(_BODY)
    messages = [dict(m) for m in body.pop("messages", [])]
    for m in messages:
        if m.get("role") == "user":
            m["content"] = prompt
    response = _CLIENT.chat.completions.create(messages=messages, **body)
    return str(response.choices[0].message.content)


def make_bare_app() -> Any:
    from celery import Celery

    from config.settings import Settings
    from workers.app import celery_config

    app = Celery("bench-bare-chat", set_as_current=False)
    app.conf.update(celery_config(Settings()))

    @app.task(name=BARE_TASK, shared=False)
    def chat(prompt: str) -> str:
        return _chat(prompt)

    return app


_APP: Any = None


def __getattr__(name: str) -> Any:
    global _APP
    if name != "app":
        raise AttributeError(name)
    if _APP is None:
        _APP = make_bare_app()
    return _APP
