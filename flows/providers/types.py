"""Provider-neutral model types: messages, tool calls, usage, requests and stream items (SPEC G-6, A-1).

A conversation is a list of ``Message``s in one shape whatever the wire format; each provider
translates it to its API (OpenAI chat completions, Anthropic messages) and back. Everything here is
plain data with ``to_json``/``from_json``, because a conversation lives in the session snapshot and
crosses processes (A-2): it names a model, never an endpoint or a key.

Tool-call ``arguments`` stay the raw JSON text the model produced: the loop parses it, and a model
that sent broken JSON sees the kernel's ``invalid_argument`` for it instead of a crash here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Role = Literal["user", "assistant", "tool"]


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # raw JSON text as the model sent it

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "arguments": self.arguments}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ToolCall:
        return cls(str(d["id"]), str(d["name"]), str(d.get("arguments") or ""))


@dataclass(frozen=True, slots=True)
class Message:
    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None  # role "tool": which call this answers
    name: str | None = None  # role "tool": the tool's name (Anthropic needs only the id)

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            d["tool_calls"] = [c.to_json() for c in self.tool_calls]
        if self.tool_call_id is not None:
            d["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            d["name"] = self.name
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Message:
        role = d.get("role")
        if role not in ("user", "assistant", "tool"):
            raise ValueError(f"message role must be user, assistant or tool, not {role!r}")
        return cls(
            role,
            str(d.get("content") or ""),
            tuple(ToolCall.from_json(c) for c in d.get("tool_calls") or ()),
            d.get("tool_call_id"),
            d.get("name"),
        )


@dataclass(frozen=True, slots=True)
class ToolDef:
    name: str
    description: str
    parameters: dict[str, Any]


# A count a server reports is clamped to [0, MAX_TOKEN_COUNT] (JSON-safe): a negative one used to be
# subtracted from the session budget (a server could hand back every token charged before), and a
# string, a list or Infinity raised out of the provider, losing the whole answer. Not a number: 0,
# as when the server sends no usage.
MAX_TOKEN_COUNT = 2**53 - 1


def token_count(value: object) -> int:
    """A usage counter from the wire as a non-negative int (see ``MAX_TOKEN_COUNT``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 0
    if value != value:  # NaN
        return 0
    if value >= MAX_TOKEN_COUNT:  # Infinity and absurd counts: as much as any budget allows
        return MAX_TOKEN_COUNT
    return max(0, int(value))


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts of one or more model requests. ``prompt_tokens`` includes cached ones (OpenAI's
    convention; Anthropic's separate counters are added up by its provider)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.cached_tokens + other.cached_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
        )

    def to_json(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
            "cached_tokens": self.cached_tokens,
            "cache_write_tokens": self.cache_write_tokens,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any] | None) -> Usage:
        d = d or {}
        return cls(
            token_count(d.get("prompt_tokens")),
            token_count(d.get("completion_tokens")),
            token_count(d.get("cached_tokens")),
            token_count(d.get("cache_write_tokens")),
        )


ToolChoice = Literal["auto", "none", "required"] | dict[str, str] | None


@dataclass(slots=True)
class ModelRequest:
    messages: list[Message]
    system: str | None = None
    tools: list[ToolDef] = field(default_factory=list)
    tool_choice: ToolChoice = None  # None: the provider's default (auto when tools are given)
    # {"type": "json_object"} | {"type": "json_schema", "name", "schema", "strict"}; None = text
    response_format: dict[str, Any] | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    stream: bool = True
    deadline: float | None = None  # time.monotonic() seconds; the request fails with timeout past it


@dataclass(frozen=True, slots=True)
class ProviderFeatures:
    """What ``generate_object`` may ask natively; anything else falls back (SPEC G-3)."""

    tool_choice: bool = True  # can force one named tool
    json_mode: bool = False  # response_format json_object
    strict_schema: bool = False  # response_format json_schema with strict


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """A streamed piece of a tool call, as the wire sent it (before merging by ``index``)."""

    index: int
    id: str | None
    name: str | None
    arguments: str


@dataclass(frozen=True, slots=True)
class Completion:
    message: Message  # role "assistant", tool calls merged
    usage: Usage
    stop_reason: str  # "stop" | "tool_calls" | "length" | provider-specific


StreamItem = TextDelta | ToolCallDelta | Completion
