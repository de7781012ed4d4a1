"""``openai:NAME`` — any OpenAI-compatible chat-completions server through the official SDK (SPEC G-6).

The hosted API, vLLM, llama.cpp's server and Ollama all speak this wire format. Endpoint and key come
from the environment of the process making the call (``OPENAI_BASE_URL`` / ``OPENAI_API_KEY``, the
SDK's own variables); a local server without a key gets a placeholder, since the SDK insists on one.

Streaming asks for ``stream_options.include_usage`` so the usage arrives in the last chunk (with an
empty ``choices`` list); tool-call pieces are merged by index (``merge.py``, #139).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx2
import openai

from flows.providers.base import ClientsPerLoop, before_deadline, drain, seconds_left
from flows.providers.errors import (
    EmptyStream,
    body_detail,
    body_error_type,
    malformed,
    status_error,
    stream_error,
    transport_error,
)
from flows.providers.http_bounds import ResponseTooLarge, bounded_http_client, too_large_in
from flows.providers.openai_chunks import StreamState, completion_of, read_chunk
from flows.providers.time_bounds import model_timeouts
from flows.providers.types import (
    Completion,
    Message,
    ModelRequest,
    ProviderFeatures,
    StreamItem,
    TextDelta,
    Usage,
)

DEFAULT_BASE_URL = "https://api.openai.com/v1"  # explicit: the SDK would otherwise read os.environ itself
PLACEHOLDER_KEY = "unused"  # local servers need no key, the SDK requires a string
FEATURES = ProviderFeatures(tool_choice=True, json_mode=True, strict_schema=True)


class OpenAIChatProvider:
    features = FEATURES

    def __init__(self, model: str, env: Mapping[str, str]) -> None:
        self.model = model
        self.name = f"openai:{model}"
        # Only these two variables are kept; nothing else of the environment is read.
        self._env = {k: env.get(k) or "" for k in ("OPENAI_BASE_URL", "OPENAI_API_KEY")}
        self._timeouts = model_timeouts(env)  # idle bound and request ceiling (A3S_MODEL_*_TIMEOUT_S)
        self._clients = ClientsPerLoop(self._new_client)

    def _new_client(self) -> Any:
        return openai.AsyncOpenAI(
            api_key=self._env["OPENAI_API_KEY"] or PLACEHOLDER_KEY,
            base_url=self._env["OPENAI_BASE_URL"] or DEFAULT_BASE_URL,
            max_retries=0,  # the agent loop owns retries (bounded, visible in events)
            http_client=bounded_http_client(openai.DefaultAsyncHttpxClient),  # answers read bounded
        )

    def _http_timeout(self, deadline: float, started: float) -> Any:
        return self._timeouts.http_timeout(seconds_left(deadline, started))

    async def complete(self, request: ModelRequest) -> Completion:
        return await drain(self.stream(request))

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        started = time.monotonic()
        deadline = self._timeouts.deadline(request.deadline, started)  # the run's, or the ceiling
        params = self._params(request)
        try:
            if not request.stream:
                # The body is parsed here, not by the SDK: what cannot be read is a typed error.
                raw = await before_deadline(
                    self._clients.get().chat.completions.with_raw_response.create(
                        **params, timeout=self._http_timeout(deadline, started)
                    ),
                    deadline,
                    started,
                )
                completion = completion_of(_parse_body(raw.content))
                if completion.message.content:
                    yield TextDelta(completion.message.content)
                yield completion
                return
            chunks = await before_deadline(
                self._clients.get().chat.completions.create(
                    **params,
                    stream=True,
                    stream_options={"include_usage": True},
                    timeout=self._http_timeout(deadline, started),
                ),
                deadline,
                started,
            )
            async for item in _read_stream(chunks, deadline, started):
                yield item
        except ResponseTooLarge as exc:
            raise exc.error() from None
        except openai.APIStatusError as exc:
            raise _status_error(exc, self._env["OPENAI_API_KEY"]) from None
        except (openai.APITimeoutError, httpx2.TimeoutException):  # mid-stream, httpx's own error
            raise self._timeouts.error(started, deadline) from None
        except (openai.APIConnectionError, httpx2.TransportError) as exc:
            if (big := too_large_in(exc)) is not None:  # the SDK wrapped it
                raise big.error() from None
            raise transport_error(exc) from None
        except openai.APIError as exc:  # an error object inside a 200 stream
            key = self._env["OPENAI_API_KEY"]
            raise stream_error(body_error_type(exc.body), body_detail(exc.body, key)) from None

    def _params(self, request: ModelRequest) -> dict[str, Any]:
        params: dict[str, Any] = {"model": self.model, "messages": wire_messages(request)}
        if request.tools:
            # As ``extra_body``: the same JSON on the wire, but the SDK does not walk every nested key
            # of every tool schema through its TypedDict transform (~5 ms a request for the built-in
            # surface — more than the rest of an agent step). The schemas are plain JSON already.
            params["extra_body"] = {
                "tools": [
                    {
                        "type": "function",
                        "function": {
                            "name": t.name,
                            "description": t.description,
                            "parameters": t.parameters,
                        },
                    }
                    for t in request.tools
                ]
            }
        if request.tool_choice is not None:
            choice = request.tool_choice
            params["tool_choice"] = (
                {"type": "function", "function": {"name": choice["name"]}}
                if isinstance(choice, dict)
                else choice
            )
        fmt = request.response_format
        if fmt is not None:
            if fmt.get("type") == "json_schema":
                params["response_format"] = {
                    "type": "json_schema",
                    "json_schema": {
                        "name": fmt["name"],
                        "schema": fmt["schema"],
                        "strict": bool(fmt.get("strict", True)),
                    },
                }
            else:
                params["response_format"] = {"type": "json_object"}
        if request.max_tokens is not None:
            params["max_tokens"] = request.max_tokens
        if request.temperature is not None:
            params["temperature"] = request.temperature
        return params


def wire_messages(request: ModelRequest) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if request.system:
        out.append({"role": "system", "content": request.system})
    for m in request.messages:
        if m.role == "tool":
            out.append({"role": "tool", "tool_call_id": m.tool_call_id, "content": m.content})
        elif m.role == "assistant" and m.tool_calls:
            out.append(
                {
                    "role": "assistant",
                    "content": m.content or None,
                    "tool_calls": [
                        {
                            "id": c.id,
                            "type": "function",
                            "function": {"name": c.name, "arguments": c.arguments or "{}"},
                        }
                        for c in m.tool_calls
                    ],
                }
            )
        else:
            out.append({"role": m.role, "content": m.content})
    return out


def _status_error(exc: openai.APIStatusError, key: str) -> Exception:
    return status_error(exc.status_code, exc.response.headers, body_detail(exc.body, key))


def _parse_body(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        raise malformed("an answer that cannot be read as JSON") from None


async def _read_stream(chunks: Any, deadline: float, started: float) -> AsyncIterator[StreamItem]:
    state = StreamState()
    iterator = chunks.__aiter__()
    try:
        while True:
            try:
                chunk = await before_deadline(iterator.__anext__(), deadline, started)
            except StopAsyncIteration:
                break
            except (ValueError, RecursionError):  # the SDK's json.loads of the chunk's data
                raise malformed("a chunk whose data cannot be read as JSON") from None
            for item in read_chunk(chunk, state):
                yield item
    finally:
        await chunks.close()
    merged = state.calls.calls()
    if not state.text and not merged and not state.stop and state.usage == Usage():
        raise EmptyStream()
    stop = state.stop or ("tool_calls" if merged else "stop")
    yield Completion(Message("assistant", "".join(state.text), merged), state.usage, stop)
