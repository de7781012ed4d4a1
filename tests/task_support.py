"""Helpers for sub-agent tests: scripted model answers chosen by the conversation (SPEC X-3).

Concurrent children make interleaved requests, so a scripted server answers by *whose* conversation
a request is: ``by_prompt({"PARENT": [turn0, turn1], "child 0": [...]})`` picks the script whose key
occurs in the request's first user message, and the turn by how many assistant messages it already
holds (the scripted provider's stateless rule).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

Turn = dict[str, Any]


def first_user_text(body: dict[str, Any]) -> str:
    for m in body.get("messages") or []:
        if m.get("role") == "user":
            content = m.get("content")
            if isinstance(content, list):
                return "".join(part.get("text", "") for part in content if isinstance(part, dict))
            return str(content or "")
    return ""


def by_prompt(scripts: dict[str, list[Turn]]) -> Callable[[dict[str, Any]], Turn | None]:
    def route(body: dict[str, Any]) -> Turn | None:
        text = first_user_text(body)
        key = max((k for k in scripts if k in text), key=len, default=None)
        if key is None:
            return None
        step = sum(1 for m in body.get("messages") or [] if m.get("role") == "assistant")
        turns = scripts[key]
        return turns[min(step, len(turns) - 1)]

    return route


def task_call(*items: dict[str, Any], call_id: str = "call_task", **options: Any) -> Turn:
    return {"tool_calls": [{"id": call_id, "name": "task", "arguments": {"tasks": list(items), **options}}]}


def item(prompt: str, agent: str = "explore", **extra: Any) -> dict[str, Any]:
    return {"agent": agent, "description": f"do {prompt}", "prompt": prompt, **extra}


def tool_messages(body: dict[str, Any]) -> list[str]:
    return [str(m.get("content")) for m in body.get("messages") or [] if m.get("role") == "tool"]


def dumps(value: Any) -> str:
    return json.dumps(value)
