"""Pre- and post-tool hooks (SPEC K-3): one surface for each moment, each given one frozen input.

A pre-tool hook returns ``None`` (go on), a ``dict`` (rewritten arguments: validated again) or
``Deny(reason, retryable, retry_after_ms)`` → ``hook_denied``. It runs for every origin, trusted
host-direct included. A post-tool hook returns ``None`` or a replacement ``ToolResult``; what it
returns is still sanitised and projected. Hooks may be sync or async.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from kernel.policy import Deny
from kernel.result import ToolResult


def freeze(value: Any) -> Any:
    """A read-only deep view of JSON-like data (hooks must not mutate a call in place)."""
    if isinstance(value, dict):
        return MappingProxyType({k: freeze(v) for k, v in value.items()})
    if isinstance(value, list):
        return tuple(freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [thaw(v) for v in value]
    return value


@dataclass(frozen=True, slots=True)
class PreToolInput:
    """What a pre-tool hook sees: the call, before it runs."""

    session_id: str
    call_id: str
    parent_call_id: str | None
    tool: str
    args: Mapping[str, Any]
    origin: str


@dataclass(frozen=True, slots=True)
class PostToolInput:
    """What a post-tool hook sees: the call and its result."""

    session_id: str
    call_id: str
    parent_call_id: str | None
    tool: str
    args: Mapping[str, Any]
    origin: str
    result: ToolResult
    duration_ms: int


PreHookResult = dict[str, Any] | Deny | None
PreToolHook = Callable[[PreToolInput], PreHookResult | Awaitable[PreHookResult]]
PostToolHook = Callable[[PostToolInput], ToolResult | Awaitable[ToolResult | None] | None]


def is_async_callable(fn: object) -> bool:
    """An ``async def`` function, or an object whose ``__call__`` is one."""
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__)


async def call_maybe_async(fn: Callable[..., Any], *args: Any) -> Any:
    out = fn(*args)
    if inspect.isawaitable(out):
        out = await out
    return out
