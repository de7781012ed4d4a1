"""``anthropic:NAME`` — the Messages API through the official SDK (SPEC G-6).

Endpoint and key from this process's ``ANTHROPIC_BASE_URL`` / ``ANTHROPIC_API_KEY``. The neutral
conversation maps onto Messages like this: the system prompt is the top-level ``system``; an
assistant turn is ``text`` + ``tool_use`` blocks; consecutive tool results (and a user message that
follows them) become one ``user`` turn of ``tool_result`` blocks, since the API wants user and
assistant turns to alternate. Usage is normalised to OpenAI's convention: ``prompt_tokens`` =
``input_tokens + cache_read_input_tokens + cache_creation_input_tokens``; ``cached_tokens`` =
cache reads. ``max_tokens`` is mandatory on this API: ``DEFAULT_MAX_TOKENS`` unless the request says.
"""

from __future__ import annotations

import json
import re
import secrets
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import anthropic
import httpx2

from flows.providers.anthropic_events import StreamState, read_event, stop_reason, usage_of
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
from flows.providers.time_bounds import model_timeouts
from flows.providers.types import (
    Completion,
    Message,
    ModelRequest,
    ProviderFeatures,
    StreamItem,
    TextDelta,
    ToolCall,
)
from flows.providers.wire_values import as_name, as_object, as_text, field

DEFAULT_MAX_TOKENS = 4096
DEFAULT_BASE_URL = "https://api.anthropic.com"  # explicit: the SDK would otherwise read os.environ itself
PLACEHOLDER_KEY = "unused"
# No native JSON mode here: generate_object's json/strict modes fall back to a forced tool (G-3).
FEATURES = ProviderFeatures(tool_choice=True, json_mode=False, strict_schema=False)


class AnthropicMessagesProvider:
    features = FEATURES

    def __init__(self, model: str, env: Mapping[str, str]) -> None:
        self.model = model
        self.name = f"anthropic:{model}"
        # Only these two variables are kept; nothing else of the environment is read.
        self._env = {k: env.get(k) or "" for k in ("ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY")}
        self._timeouts = model_timeouts(env)  # idle bound and request ceiling (A3S_MODEL_*_TIMEOUT_S)
        self._clients = ClientsPerLoop(self._new_client)

    def _new_client(self) -> Any:
        return anthropic.AsyncAnthropic(
            api_key=self._env["ANTHROPIC_API_KEY"] or PLACEHOLDER_KEY,
            base_url=self._env["ANTHROPIC_BASE_URL"] or DEFAULT_BASE_URL,
            max_retries=0,  # the agent loop owns retries (bounded, visible in events)
            http_client=bounded_http_client(anthropic.DefaultAsyncHttpxClient),  # answers read bounded
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
            messages = self._clients.get().messages
            create = messages.create if request.stream else messages.with_raw_response.create
            response = await before_deadline(
                create(**params, stream=request.stream, timeout=self._http_timeout(deadline, started)),
                deadline,
                started,
            )
            if not request.stream:
                completion = _parse_body(await before_deadline(response.read(), deadline, started))
                if completion.message.content:
                    yield TextDelta(completion.message.content)
                yield completion
                return
            async for item in _read_stream(response, deadline, started):
                yield item
        except ResponseTooLarge as exc:
            raise exc.error() from None
        except anthropic.APIStatusError as exc:
            detail = body_detail(exc.body, self._env["ANTHROPIC_API_KEY"])
            if exc.status_code == 200:  # an `error` event inside the stream: its typed `type` decides
                raise stream_error(body_error_type(exc.body), detail) from None
            raise status_error(exc.status_code, exc.response.headers, detail) from None
        except (anthropic.APITimeoutError, httpx2.TimeoutException):  # mid-stream, httpx's own error
            raise self._timeouts.error(started, deadline) from None
        except (anthropic.APIConnectionError, httpx2.TransportError) as exc:
            if (big := too_large_in(exc)) is not None:  # the SDK wrapped it
                raise big.error() from None
            raise transport_error(exc) from None

    def _params(self, request: ModelRequest) -> dict[str, Any]:
        params: dict[str, Any] = {
            "model": self.model,
            "messages": wire_messages(request.messages),
            "max_tokens": request.max_tokens or DEFAULT_MAX_TOKENS,
        }
        if request.system:
            params["system"] = request.system
        if request.tools:
            params["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters}
                for t in request.tools
            ]
        choice = request.tool_choice
        if choice is not None and request.tools:
            if isinstance(choice, dict):
                params["tool_choice"] = {"type": "tool", "name": choice["name"]}
            else:
                params["tool_choice"] = {"type": {"required": "any"}.get(choice, choice)}
        if request.temperature is not None:
            params["temperature"] = request.temperature
        return params


def _input(arguments: str) -> dict[str, Any]:
    """``tool_use.input`` must be an object; a call whose text was not one (it failed in the kernel
    and the model saw why) is replayed as its raw text under ``_raw``."""
    try:
        value = json.loads(arguments or "{}")
    except (ValueError, RecursionError):
        return {"_raw": arguments}
    return value if isinstance(value, dict) else {"_raw": arguments}


def wire_messages(messages: list[Message]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "assistant":
            blocks: list[dict[str, Any]] = []
            if m.content:
                blocks.append({"type": "text", "text": m.content})
            blocks.extend(
                {"type": "tool_use", "id": c.id, "name": c.name, "input": _input(c.arguments)}
                for c in m.tool_calls
            )
            out.append({"role": "assistant", "content": blocks or [{"type": "text", "text": ""}]})
            continue
        if m.role == "tool":
            block: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": m.tool_call_id,
                "content": m.content,
            }
        else:
            block = {"type": "text", "text": m.content}
        if out and out[-1]["role"] == "user":
            out[-1]["content"].append(block)  # keep user/assistant alternation
        else:
            out.append({"role": "user", "content": [block]})
    return out


# A non-streamed body is read here, not by the SDK: its ``json.loads`` refuses an integer over Python's
# int-string limit (4300 digits) in a tool call's ``input`` with a ValueError that failed the whole
# run. Such an integer is kept as its digits and handed on in the call's argument text, where the
# kernel refuses that call (invalid_argument, saying why) and the run goes on — as when streamed.
# The digits travel as a string behind a marker drawn afresh for each body, so no string a model
# writes can pass for one.
class _LongInts:
    def __init__(self) -> None:
        self.marker = f"\x00{secrets.token_hex(16)}:"
        quoted = json.dumps(self.marker)[1:-1]  # how json.dumps writes the marker inside a string
        self._pattern = re.compile('"' + re.escape(quoted) + r'(-?\d+)"')
        self._quoted = quoted

    def parse_int(self, digits: str) -> int | str:
        try:
            return int(digits)
        except ValueError:
            return self.marker + digits

    def arguments(self, value: Any) -> str:
        """``value`` as JSON text, every kept integer written back as its digits."""
        text = json.dumps(value, ensure_ascii=False)
        return self._pattern.sub(r"\1", text) if self._quoted in text else text


def _parse_body(body: bytes) -> Completion:
    long_ints = _LongInts()
    try:
        response = json.loads(body, parse_int=long_ints.parse_int)
    except (ValueError, RecursionError):
        raise malformed("an answer that cannot be read as JSON") from None
    return _completion(as_object(response, "the answer"), long_ints.arguments)


def _completion(response: Any, arguments: Callable[[Any], str]) -> Completion:
    """A non-streamed ``Message`` body, parsed, as a ``Completion``; ``arguments`` writes a tool call's
    input. Fields are read as in a stream (``anthropic_events``): a block that is not an object is
    skipped, a name or id of the wrong type never handed on."""
    text: list[str] = []
    calls: list[ToolCall] = []
    content = field(response, "content")
    for block in content if isinstance(content, list) else ():
        if field(block, "type") == "text":
            text.append(as_text(field(block, "text")))
        elif field(block, "type") == "tool_use":
            call_id = as_name(field(block, "id")) or f"toolu_{len(calls)}"
            calls.append(
                ToolCall(call_id, as_name(field(block, "name")), arguments(field(block, "input") or {}))
            )
    stop = stop_reason(field(response, "stop_reason")) or "stop"
    return Completion(
        Message("assistant", "".join(text), tuple(calls)), usage_of(field(response, "usage")), stop
    )


async def _read_stream(events: Any, deadline: float, started: float) -> AsyncIterator[StreamItem]:
    state = StreamState()
    iterator = events.__aiter__()
    try:
        while True:
            try:
                event = await before_deadline(iterator.__anext__(), deadline, started)
            except StopAsyncIteration:
                break
            except (ValueError, RecursionError):  # the SDK's json.loads of the event's data
                raise malformed("an event whose data cannot be read as JSON") from None
            for item in read_event(event, state):
                yield item
    finally:
        await events.close()
    merged = state.calls.calls("toolu")
    if not state.started and not state.text and not merged:
        raise EmptyStream()
    stop = state.stop or ("tool_calls" if merged else "stop")
    yield Completion(Message("assistant", "".join(state.text), merged), state.usage, stop)
