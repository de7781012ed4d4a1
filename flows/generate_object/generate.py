"""One structured generation: mode choice, request, validation and the repair loop (SPEC G-2..G-5).

Modes (G-3), decided from what the provider can do natively (``ProviderFeatures``):

=========  ===========================================================================
requested  used
=========  ===========================================================================
tool       a forced synthetic tool named ``schema_name`` whose arguments are the object;
           ``prompt`` when the provider cannot force a tool
auto       like ``tool``
strict     native strict JSON Schema (OpenAI ``response_format: json_schema, strict``) for
           an object root; otherwise, or when the server refuses or fails on it (an HTTP
           4xx or 408/5xx answer to the first request), like ``tool``
json       native JSON-object mode plus the schema in the prompt, for an object root;
           otherwise, or when the server refuses or fails on it, like ``tool``
prompt     the schema and "reply with only JSON" appended to the prompt
=========  ===========================================================================

The schema the provider sees is part of the request it needs (tool parameters, response format or
prompt text), never an extra request field. Each reply is parsed and validated with the caller's
schema; on failure the errors go back to the model — as the forced tool's result, or as a user
message — and it tries again, at most ``max_repair_attempts`` times, all inside one deadline that
started at admission. The repair transaction ends with ``invalid_argument`` naming the last errors.

Every request streams; partial objects go out as ``{"object_partial": …, "final": false}`` deltas,
at most one per ``PARTIAL_INTERVAL_S`` (G-5), replaced by ``{"object_partial_omitted": true,
"partial_bytes": N}`` past ``MAX_PARTIAL_BYTES``. The value is accepted only once complete and
valid, whether or not the stream ended with its terminal event. A stream that fails on the wire
(``transport``) after the bounded retries is tried once more as a blocking request, since both
providers have a distinct non-streaming transport.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from flows.agent.model_turn import model_turn
from flows.generate_object.params import Params
from flows.generate_object.partial import partial_json
from flows.generate_object.schema import NotJson, ObjectSchema, TooDeep, extract_json, loads
from flows.providers import (
    Completion,
    Message,
    ModelRequest,
    Provider,
    StreamItem,
    TextDelta,
    ToolCallDelta,
    ToolDef,
    Usage,
)
from flows.providers.errors import StatusTransport
from kernel.call_args import long_int_reason
from kernel.errors import InvalidArgument, ProviderError, Timeout, Transport

PARTIAL_INTERVAL_S = 0.1
MAX_PARTIAL_BYTES = 64 * 1024
OP = "generate_object"
DEFAULT_SYSTEM = (
    "You produce one JSON value that matches the JSON Schema you are given, exactly: "
    "every required property, no extra ones, the right types. No prose."
)

Delta = Callable[[Any], None]


@dataclass(frozen=True, slots=True)
class Outcome:
    object: Any
    repair_rounds: int
    mode_used: str
    usage: Usage
    raw_text: str


def choose_mode(requested: str, provider: Provider, schema: ObjectSchema) -> str:
    features = provider.features
    fallback = "tool" if features.tool_choice else "prompt"
    if requested == "prompt":
        return "prompt"
    if requested == "strict":
        return "strict" if features.strict_schema and not schema.wrapped else fallback
    if requested == "json":
        return "json" if features.json_mode and not schema.wrapped else fallback
    return fallback  # auto, tool


def _instructions(params: Params) -> str:
    about = f" ({params.schema_description})" if params.schema_description else ""
    return (
        f"\n\nRespond with only a JSON value — no prose, no code fences — that matches this JSON Schema "
        f"named {params.schema_name}{about}:\n{json.dumps(params.schema_, ensure_ascii=False)}"
    )


class _Partials:
    """Throttled partial-object deltas (G-5)."""

    def __init__(self, emit: Delta, loop: asyncio.AbstractEventLoop) -> None:
        self.emit = emit
        self.loop = loop
        self.text: list[str] = []
        self.size = 0  # bytes of ``text``, kept as it grows: past the cap it is never joined again
        self.last = 0.0

    def reset(self) -> None:
        self.text = []
        self.size = 0

    def __call__(self, item: StreamItem) -> None:
        if isinstance(item, TextDelta):
            piece = item.text
        elif isinstance(item, ToolCallDelta) and item.index == 0:
            piece = item.arguments
        else:
            return
        self.text.append(piece)
        self.size += len(piece.encode("utf-8", "surrogatepass"))
        now = self.loop.time()
        if now - self.last < PARTIAL_INTERVAL_S:
            return
        if self.size > MAX_PARTIAL_BYTES:
            # Joining (and encoding) the whole answer every 100 ms cost ~50 ms of the event loop each
            # time once it was large: a 32 MiB answer trickled on for its deadline.
            self.last = now
            self.emit({"object_partial_omitted": True, "partial_bytes": self.size, "final": False})
            return
        prefix = "".join(self.text)
        value = partial_json(prefix)
        if value is not None:  # nothing usable yet: the next piece may emit
            self.last = now
            self.emit({"object_partial": value, "final": False})


class _Generation:
    def __init__(
        self,
        provider: Provider,
        params: Params,
        deadline: float,
        started: float,
        emit: Delta,
        budget: Any,
        now_ms: Callable[[], int],
    ) -> None:
        self.now_ms = now_ms
        self.provider = provider
        self.params = params
        self.deadline = deadline
        self.started = started
        self.emit = emit
        self.budget = budget
        self.loop = asyncio.get_running_loop()
        self.schema = ObjectSchema(params.schema_)
        self.mode = choose_mode(params.mode, provider, self.schema)
        self.usage = Usage()
        self.partials = _Partials(emit, self.loop)
        user = params.prompt + (_instructions(params) if self.mode in ("prompt", "json") else "")
        self.messages: list[Message] = [Message("user", user)]

    def _timeout(self) -> Timeout:
        ms = int((self.loop.time() - self.started) * 1000)
        return Timeout(f"generate_object timed out after {ms}ms", op=OP, duration_ms=ms)

    def _request(self, stream: bool) -> ModelRequest:
        p = self.params
        req = ModelRequest(
            list(self.messages), system=p.system or DEFAULT_SYSTEM, stream=stream, deadline=self.deadline
        )
        if self.mode == "tool":
            description = p.schema_description or f"Return the {p.schema_name} object."
            req.tools = [ToolDef(p.schema_name, description, self.schema.tool_parameters())]
            req.tool_choice = {"name": p.schema_name}
        elif self.mode == "strict":
            req.response_format = {
                "type": "json_schema",
                "name": p.schema_name,
                "schema": p.schema_,
                "strict": True,
            }
        elif self.mode == "json":
            req.response_format = {"type": "json_object"}
        return req

    async def _ask(self, round_no: int) -> Completion:
        if self.loop.time() >= self.deadline:
            raise self._timeout()
        if self.budget is not None:
            self.budget.check_before_model(self.now_ms())

        def retry_event(kind: str, data: dict[str, Any]) -> None:
            if kind == "model_retry":
                self.emit({"model_retry": data})

        self.partials.reset()
        try:
            try:
                completion = await model_turn(
                    self.provider, self._request(True), round_no, retry_event, on_item=self.partials
                )
            except Transport as err:
                # The stream broke on the wire: one blocking request, if there is time left. (A
                # server that answered with a status would answer the same way: not retried here.)
                if isinstance(err, StatusTransport) or self.loop.time() >= self.deadline:
                    raise
                completion = await model_turn(self.provider, self._request(False), round_no, retry_event)
        except Timeout:
            raise self._timeout() from None
        u = completion.usage
        self.usage = self.usage + u
        if self.budget is not None:
            self.budget.charge_model(u.prompt_tokens, u.completion_tokens, u.cached_tokens)
        return completion

    def _value(self, completion: Completion) -> tuple[Any, str]:
        """The object the reply carries, and its raw text."""
        message = completion.message
        if self.mode == "tool" and message.tool_calls:
            call = next(
                (c for c in message.tool_calls if c.name == self.params.schema_name), message.tool_calls[0]
            )
            raw = call.arguments
            try:
                args = loads(raw or "{}")
            except TooDeep:
                raise
            except json.JSONDecodeError as exc:
                raise NotJson(f"the {call.name} arguments are not valid JSON ({exc})") from None
            except ValueError as exc:  # valid JSON over Python's int-string limit
                raise NotJson(long_int_reason(exc, f"the {call.name} arguments")) from None
            return self.schema.unwrap(args), raw
        return extract_json(message.content), message.content

    def _repair(self, completion: Completion, errors: list[str]) -> None:
        listing = "\n".join(f"- {e}" for e in errors)
        message = completion.message
        self.messages.append(message)
        if self.mode == "tool" and message.tool_calls:
            # Every call of the turn is answered; the first carries the validation errors.
            first = message.tool_calls[0]
            for call in message.tool_calls:
                text = (
                    f"Invalid {self.params.schema_name}: it does not match the schema:\n{listing}\n"
                    f"Call {self.params.schema_name} again with corrected arguments."
                    if call is first
                    else "Ignored."
                )
                self.messages.append(Message("tool", text, tool_call_id=call.id, name=call.name))
            return
        self.messages.append(
            Message(
                "user",
                f"That reply does not match the schema:\n{listing}\nReply with only the corrected JSON value.",
            )
        )

    async def run(self) -> Outcome:
        repairs = 0
        while True:
            try:
                completion = await self._ask(repairs)
            except (ProviderError, StatusTransport):
                # A server that refuses (4xx) or fails on (5xx) a native strict/JSON response format:
                # fall back once, before any repair, to the forced tool (or the prompt). A failure
                # that is not about the request repeats in the fallback and comes back typed.
                if self.mode in ("strict", "json") and repairs == 0:
                    self.mode = "tool" if self.provider.features.tool_choice else "prompt"
                    user = self.params.prompt + (_instructions(self.params) if self.mode == "prompt" else "")
                    self.messages = [Message("user", user)]
                    continue
                raise
            too_deep = False
            try:
                value, raw = self._value(completion)
                errors = self.schema.errors(value)
            except NotJson as exc:
                value, raw, errors = None, completion.message.content, [f"$: {exc}"]
                too_deep = isinstance(exc, TooDeep)
            if not errors:
                final: dict[str, Any] = {"final": True, "mode_used": self.mode, "repair_rounds": repairs}
                size = len(json.dumps(value).encode())
                if size > MAX_PARTIAL_BYTES:
                    final.update(object_partial_omitted=True, partial_bytes=size)
                else:
                    final["object_partial"] = value
                self.emit(final)
                return Outcome(value, repairs, self.mode, self.usage, raw)
            if repairs >= self.params.max_repair_attempts:
                raise InvalidArgument(
                    f"generate_object: the model's object does not match the schema after {repairs} repair "
                    f"round(s): " + "; ".join(errors),
                    validation_errors=errors,
                    repair_rounds=repairs,
                    mode_used=self.mode,
                    **({"reason": "too_deep"} if too_deep else {}),
                )
            repairs += 1
            self._repair(completion, errors)


async def generate(
    provider: Provider,
    params: Params,
    *,
    deadline: float,
    started: float,
    emit: Delta,
    budget: Any = None,
    now_ms: Callable[[], int] | None = None,
) -> Outcome:
    """Generate a schema-valid object (see the module docstring); raises the typed error otherwise.
    ``deadline``/``started`` are event-loop times; ``budget`` is the session's ``BudgetTracker``
    (checked before each request with ``now_ms``, charged after)."""
    clock = now_ms or (lambda: 0)
    return await _Generation(provider, params, deadline, started, emit, budget, clock).run()
