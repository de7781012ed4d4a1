"""Scripted model servers on 127.0.0.1 for provider and loop tests (no hosted API is ever contacted).

``ScriptedOpenAIServer`` speaks OpenAI chat completions (``POST /v1/chat/completions``);
``ScriptedAnthropicServer`` speaks the Anthropic Messages API (``POST /v1/messages``). Each replays a
script of turns — one per request, in order — streaming or not as the request asks, and records
every request it saw (``requests``: path, lower-cased headers, JSON body).

A turn has the scripted-file shape (``flows/providers/scripted.py``): ``{"text", "tool_calls":
[{"id"?, "name", "arguments"}], "usage"}``, plus server-only keys:

- ``{"status": 429, "retry_after": "1", "body": {...}}`` — answer that status (and header);
- ``{"delay_s": 0.2, ...}`` — wait before answering (with any other turn);
- ``{"await_peak": 2, ...}`` — a barrier: wait (at most ``HOLD_S``) until at least that many
  requests have been in flight at once, then answer. ``peak_in_flight`` is the most requests the
  server has held at the same time, so a test proves a concurrency bound without timings;
- ``{"hold": threading.Event(), ...}`` — wait (at most ``HOLD_S``) until the test sets the event
  (in-process routes only): a request held until something happened, instead of a guessed delay;
- ``{"disconnect": true}`` — close the connection without an answer;
- ``{"stream_error": {"type": "overloaded_error", "message": "..."}}`` — a 200 stream whose first
  event is an error event;
- ``{"empty_stream": true}`` — a streamed request gets a 200 stream with no event at all (what
  llama.cpp's server does when it cannot stream an automatic tool choice); a blocking one is
  answered normally;
- ``{"no_terminal": true, ...}`` — a stream that just stops after the content: no finish reason,
  no usage chunk, no ``[DONE]`` / ``message_stop`` (some endpoints do that).

A tool call's ``arguments`` text that this process cannot load (an integer over Python's 4300-digit
int-string limit) is still sent as the non-streamed Anthropic ``input``, verbatim.

Streaming splits text into a few chunks and each tool call's arguments into ``arg_chunks`` pieces;
only the first piece of a call has its id and name, later ones carry ``"name": ""`` (the shape of
REFERENCE #139). OpenAI usage comes in a last chunk with ``choices: []`` when the request set
``stream_options.include_usage``. An exhausted script answers 500 (unless ``repeat_last``).

    with ScriptedOpenAIServer([{"text": "hi"}]) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
"""

from __future__ import annotations

import abc
import json
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TEXT_CHUNKS = 3
RAW_JSON_KEY = "\u0000raw"  # a message's JSON text spliced in verbatim by ``_json`` (see _message)
HOLD_S = 30.0  # ``await_peak`` and ``hold`` give up after this (the test then fails on what it checks)


@dataclass
class SeenRequest:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


def _pieces(text: str, n: int) -> list[str]:
    if not text:
        return []
    size = max(1, -(-len(text) // max(1, n)))
    return [text[i : i + size] for i in range(0, len(text), size)]


def _arguments(call: dict[str, Any]) -> str:
    args = call.get("arguments", {})
    return args if isinstance(args, str) else json.dumps(args)


def _usage(turn: dict[str, Any], body: dict[str, Any]) -> dict[str, int]:
    given = turn.get("usage") or {}
    prompt = given.get("prompt_tokens", max(1, len(json.dumps(body.get("messages", []))) // 4))
    completion = given.get("completion_tokens", max(1, len(turn.get("text", "")) // 4))
    return {
        "prompt_tokens": int(prompt),
        "completion_tokens": int(completion),
        "cached_tokens": int(given.get("cached_tokens", 0)),
    }


class _ScriptedServer(abc.ABC):
    api_path = ""
    base_path = ""
    env_names: tuple[str, str] = ("", "")

    def __init__(
        self,
        turns: Iterable[dict[str, Any]] = (),
        *,
        repeat_last: bool = False,
        arg_chunks: int = 3,
        route: Callable[[dict[str, Any]], dict[str, Any] | None] | None = None,
    ):
        # ``route(body) -> turn``: choose the answer from the request itself instead of the script's
        # order (concurrent conversations — sub-agents — whose requests interleave).
        self.route = route
        self._turns: deque[dict[str, Any]] = deque(turns)
        self._last: dict[str, Any] | None = None
        self.repeat_last = repeat_last
        self.arg_chunks = arg_chunks
        self.requests: list[SeenRequest] = []
        self._lock = threading.Lock()
        self._flight = threading.Condition(self._lock)
        self.in_flight = 0
        self.peak_in_flight = 0
        self._thread: threading.Thread | None = None
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def setup(self) -> None:
                super().setup()
                # Headers and body go out in separate writes: without NODELAY, Nagle + delayed ACK add ~40 ms.
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def do_POST(self) -> None:
                owner._enter()
                try:
                    owner._handle(self)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True  # the client gave up (a deadline, a cancel): fine
                finally:
                    owner._leave()

        # Bound now (so base_url is known before `with`); served from __enter__ to __exit__.
        self._server: ThreadingHTTPServer | None = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True

    # ---- lifecycle ----------------------------------------------------------------------------

    def __enter__(self) -> _ScriptedServer:
        assert self._server is not None
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05})
        self._thread.daemon = True
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None and self._thread is not None
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.base_path}"

    def env(self) -> dict[str, str]:
        return {self.env_names[0]: self.base_url, self.env_names[1]: "sk-test-scripted"}

    def add(self, *turns: dict[str, Any]) -> None:
        with self._lock:
            self._turns.extend(turns)

    def _next(self) -> dict[str, Any] | None:
        with self._lock:
            if self._turns:
                self._last = self._turns.popleft()
                return self._last
            return self._last if self.repeat_last else None

    # ---- concurrency ----------------------------------------------------------------------------

    def _enter(self) -> None:
        with self._flight:
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
            self._flight.notify_all()

    def _leave(self) -> None:
        with self._flight:
            self.in_flight -= 1

    def _await_peak(self, n: int) -> None:
        with self._flight:
            self._flight.wait_for(lambda: self.peak_in_flight >= n, timeout=HOLD_S)

    # ---- one request ----------------------------------------------------------------------------

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {}
        with self._lock:
            self.requests.append(SeenRequest(h.path, {k.lower(): v for k, v in h.headers.items()}, body))
        if h.path.split("?")[0] != self.api_path:
            return self._json(h, 404, self._error_body("not_found_error", f"no route {h.path}"))
        turn = self.route(body) if self.route is not None else self._next()
        if turn is None:
            return self._json(h, 500, self._error_body("api_error", "scripted server: script exhausted"))
        if turn.get("await_peak"):
            self._await_peak(int(turn["await_peak"]))
        if turn.get("hold") is not None:
            turn["hold"].wait(HOLD_S)
        if turn.get("delay_s"):
            time.sleep(float(turn["delay_s"]))
        if turn.get("disconnect"):
            h.close_connection = True
            h.connection.close()
            return None
        if "status" in turn:
            headers = {"Retry-After": str(turn["retry_after"])} if "retry_after" in turn else {}
            err = turn.get("body") or self._error_body(
                "rate_limit_error" if turn["status"] == 429 else "api_error",
                f"scripted status {turn['status']}",
            )
            return self._json(h, int(turn["status"]), err, headers)
        if body.get("stream"):
            if turn.get("empty_stream"):
                return self._sse(h, [])
            return self._sse(h, list(self._stream_events(turn, body)))
        return self._json(h, 200, self._message(turn, body))

    def _json(
        self, h: BaseHTTPRequestHandler, status: int, payload: Any, headers: dict[str, str] | None = None
    ) -> None:
        raw = payload.pop(RAW_JSON_KEY, {}) if isinstance(payload, dict) else {}
        text = json.dumps(payload)
        for token, verbatim in raw.items():  # JSON this process cannot load: sent as the script wrote it
            text = text.replace(json.dumps(token), verbatim)
        data = text.encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(data)

    def _sse(self, h: BaseHTTPRequestHandler, events: list[tuple[str | None, Any]]) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.send_header("Cache-Control", "no-cache")
        h.send_header("Connection", "close")
        h.end_headers()
        h.close_connection = True
        for name, data in events:
            frame = (
                (f"event: {name}\n" if name else "")
                + "data: "
                + (data if isinstance(data, str) else json.dumps(data))
                + "\n\n"
            )
            h.wfile.write(frame.encode())
            h.wfile.flush()

    # wire-specific
    @abc.abstractmethod
    def _error_body(self, type_: str, message: str) -> dict[str, Any]: ...

    @abc.abstractmethod
    def _message(self, turn: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]: ...

    @abc.abstractmethod
    def _stream_events(
        self, turn: dict[str, Any], body: dict[str, Any]
    ) -> Iterable[tuple[str | None, Any]]: ...


class ScriptedOpenAIServer(_ScriptedServer):
    api_path = "/v1/chat/completions"
    base_path = "/v1"
    env_names = ("OPENAI_BASE_URL", "OPENAI_API_KEY")

    def _error_body(self, type_: str, message: str) -> dict[str, Any]:
        return {"error": {"message": message, "type": type_, "code": None}}

    @staticmethod
    def _usage_json(u: dict[str, int]) -> dict[str, Any]:
        return {
            "prompt_tokens": u["prompt_tokens"],
            "completion_tokens": u["completion_tokens"],
            "total_tokens": u["prompt_tokens"] + u["completion_tokens"],
            "prompt_tokens_details": {"cached_tokens": u["cached_tokens"]},
        }

    def _message(self, turn: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
        calls = turn.get("tool_calls") or []
        message: dict[str, Any] = {"role": "assistant", "content": turn.get("text") or None}
        if calls:
            message["tool_calls"] = [
                {
                    "id": c.get("id") or f"call_{i}",
                    "type": "function",
                    "function": {"name": c["name"], "arguments": _arguments(c)},
                }
                for i, c in enumerate(calls)
            ]
        return {
            "id": f"chatcmpl-{len(self.requests)}",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model", "scripted"),
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": self._usage_json(_usage(turn, body)),
        }

    def _stream_events(self, turn: dict[str, Any], body: dict[str, Any]) -> Iterable[tuple[str | None, Any]]:
        base = {
            "id": f"chatcmpl-{len(self.requests)}",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": body.get("model", "scripted"),
        }

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

        if turn.get("stream_error"):
            yield None, {"error": turn["stream_error"]}
            return
        yield None, chunk({"role": "assistant", "content": ""})
        for piece in _pieces(turn.get("text", ""), TEXT_CHUNKS):
            yield None, chunk({"content": piece})
        calls = turn.get("tool_calls") or []
        for i, c in enumerate(calls):
            pieces = _pieces(_arguments(c), self.arg_chunks) or [""]
            first = {
                "index": i,
                "id": c.get("id") or f"call_{i}",
                "type": "function",
                "function": {"name": c["name"], "arguments": ""},
            }
            yield None, chunk({"tool_calls": [first]})
            for piece in pieces:
                # Later pieces repeat the name as "" (#139): a client must not let it erase the real one.
                yield (
                    None,
                    chunk({"tool_calls": [{"index": i, "function": {"name": "", "arguments": piece}}]}),
                )
        if turn.get("no_terminal"):
            return
        yield None, chunk({}, "tool_calls" if calls else "stop")
        if (body.get("stream_options") or {}).get("include_usage"):
            yield None, {**base, "choices": [], "usage": self._usage_json(_usage(turn, body))}
        yield None, "[DONE]"


class ScriptedAnthropicServer(_ScriptedServer):
    api_path = "/v1/messages"
    base_path = ""
    env_names = ("ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY")

    def _error_body(self, type_: str, message: str) -> dict[str, Any]:
        return {"type": "error", "error": {"type": type_, "message": message}}

    @staticmethod
    def _usage_json(u: dict[str, int], output: int | None = None) -> dict[str, Any]:
        return {
            "input_tokens": u["prompt_tokens"] - u["cached_tokens"],
            "output_tokens": u["completion_tokens"] if output is None else output,
            "cache_read_input_tokens": u["cached_tokens"],
            "cache_creation_input_tokens": 0,
        }

    def _message(self, turn: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
        content: list[dict[str, Any]] = []
        if turn.get("text"):
            content.append({"type": "text", "text": turn["text"]})
        calls = turn.get("tool_calls") or []
        raw: dict[str, str] = {}
        for i, c in enumerate(calls):
            try:
                value: Any = json.loads(_arguments(c))
            except ValueError:  # e.g. an integer over Python's int-string limit: valid JSON all the same
                value = f"\u0000raw-input-{i}"
                raw[value] = _arguments(c)
            content.append(
                {"type": "tool_use", "id": c.get("id") or f"toolu_{i}", "name": c["name"], "input": value}
            )
        return {
            **({RAW_JSON_KEY: raw} if raw else {}),
            "id": f"msg_{len(self.requests)}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model", "scripted"),
            "content": content,
            "stop_reason": "tool_use" if calls else "end_turn",
            "stop_sequence": None,
            "usage": self._usage_json(_usage(turn, body)),
        }

    def _stream_events(self, turn: dict[str, Any], body: dict[str, Any]) -> Iterable[tuple[str | None, Any]]:
        if turn.get("stream_error"):
            yield "error", {"type": "error", "error": turn["stream_error"]}
            return
        usage = _usage(turn, body)
        message = {**self._message({"text": ""}, body), "content": [], "stop_reason": None}
        message["usage"] = self._usage_json(usage, output=1)
        yield "message_start", {"type": "message_start", "message": message}
        index = 0
        if turn.get("text"):
            yield (
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {"type": "text", "text": ""},
                },
            )
            for piece in _pieces(turn["text"], TEXT_CHUNKS):
                yield (
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "text_delta", "text": piece},
                    },
                )
            yield "content_block_stop", {"type": "content_block_stop", "index": index}
            index += 1
        calls = turn.get("tool_calls") or []
        for i, c in enumerate(calls):
            start = {"type": "tool_use", "id": c.get("id") or f"toolu_{i}", "name": c["name"], "input": {}}
            yield (
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": start},
            )
            for piece in _pieces(_arguments(c), self.arg_chunks):
                yield (
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": piece},
                    },
                )
            yield "content_block_stop", {"type": "content_block_stop", "index": index}
            index += 1
        if turn.get("no_terminal"):
            return
        yield "ping", {"type": "ping"}
        yield (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "tool_use" if calls else "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": usage["completion_tokens"]},
            },
        )
        yield "message_stop", {"type": "message_stop"}
