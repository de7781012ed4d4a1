"""The conversation a session's agent runs share, and how it lives in the snapshot (SPEC A-2).

A ``Conversation`` is the neutral message list (``flows.providers.types.Message``) plus the model
*name* it was held with and the usage it cost. ``to_json`` goes into ``snapshot["conversation"]``;
``SessionFactory.resume`` rebuilds it, so ``agent.resume(snapshot)`` continues the conversation in
another process or on a worker, with that process's own endpoint and key. No endpoint, key or
header is ever part of it.

``pending_calls`` are the tool calls of the last assistant turn that have no result yet: a run that
was suspended (``a3s_suspend``) or interrupted leaves them, and a continuation answers them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from flows.providers.types import Message, ToolCall, Usage
from kernel.errors import InvalidArgument

CONVERSATION_SCHEMA = "a3s.fleet.conversation.v1"
# The session's model name, in session_state: JSON, snapshotted, read by model-backed tools
# (generate_object) on whichever process runs them.
MODEL_STATE_KEY = "agent_model"


@dataclass
class Conversation:
    messages: list[Message] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)

    def append(self, message: Message) -> None:
        self.messages.append(message)

    def pending_calls(self) -> list[ToolCall]:
        """Calls of the last assistant turn still waiting for a tool message."""
        for i in range(len(self.messages) - 1, -1, -1):
            m = self.messages[i]
            if m.role == "assistant":
                answered = {x.tool_call_id for x in self.messages[i + 1 :] if x.role == "tool"}
                return [c for c in m.tool_calls if c.id not in answered]
            if m.role == "user":
                return []
        return []

    def to_json(self, model: str | None) -> dict[str, Any]:
        return {
            "schema": CONVERSATION_SCHEMA,
            "model": model,
            "messages": [m.to_json() for m in self.messages],
            "usage": self.usage.to_json(),
        }

    @classmethod
    def from_json(cls, data: Any) -> Conversation:
        if data is None:
            return cls()
        if not isinstance(data, dict) or data.get("schema") != CONVERSATION_SCHEMA:
            raise InvalidArgument(f"snapshot conversation: expected schema {CONVERSATION_SCHEMA}")
        try:
            messages = [Message.from_json(m) for m in data.get("messages") or []]
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidArgument(f"snapshot conversation: a message is malformed ({exc})") from None
        return cls(messages, Usage.from_json(data.get("usage")))
