"""Model providers behind one small protocol, chosen by a ``provider:model`` name (SPEC G-6, A-1, A-3).

``provider_for("openai:NAME" | "anthropic:NAME" | "scripted:FILE")`` returns a ``Provider``. Endpoint
and credentials come only from the environment of the process making the call (``env``, default
``os.environ`` read now): a model *name* is all that snapshots, jobs and events ever carry. A bad
name (no provider prefix, unknown provider, blank model, unreadable script) is ``InvalidArgument``
before any request. Providers are cached per (name, endpoint, key digest) in the process, so a
session does not build a new HTTP client per turn, and a changed environment gets a new one.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Mapping

from flows.providers.base import Provider, drain
from flows.providers.merge import ToolCallAccumulator
from flows.providers.time_bounds import IDLE_VAR, REQUEST_VAR
from flows.providers.types import (
    Completion,
    Message,
    ModelRequest,
    ProviderFeatures,
    StreamItem,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolDef,
    Usage,
)
from kernel.errors import InvalidArgument

__all__ = [
    "PROVIDERS",
    "Completion",
    "Message",
    "ModelRequest",
    "Provider",
    "ProviderFeatures",
    "StreamItem",
    "TextDelta",
    "ToolCall",
    "ToolCallAccumulator",
    "ToolCallDelta",
    "ToolDef",
    "Usage",
    "drain",
    "parse_model_name",
    "provider_for",
]

PROVIDERS = ("openai", "anthropic", "scripted")
MAX_MODEL_NAME_CHARS = 4096
_ENV_KEYS = {
    "openai": ("OPENAI_BASE_URL", "OPENAI_API_KEY"),
    "anthropic": ("ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY"),
}
_cache: dict[tuple[str, ...], Provider] = {}
_cache_lock = threading.Lock()


def parse_model_name(name: object) -> tuple[str, str]:
    """``"openai:gpt-4o"`` → ``("openai", "gpt-4o")``; anything malformed is ``InvalidArgument``."""
    if not isinstance(name, str) or not name.strip():
        raise InvalidArgument("model: a 'provider:model' name is required (e.g. openai:gpt-4o-mini)")
    if len(name) > MAX_MODEL_NAME_CHARS:
        raise InvalidArgument(f"model: name longer than {MAX_MODEL_NAME_CHARS} characters")
    provider, sep, model = name.partition(":")
    if not sep:
        raise InvalidArgument(
            f"model {name!r}: expected 'provider:model' with provider one of {', '.join(PROVIDERS)}"
        )
    if provider not in PROVIDERS:
        raise InvalidArgument(f"model {name!r}: unknown provider {provider!r} (use {', '.join(PROVIDERS)})")
    if not model.strip():
        raise InvalidArgument(f"model {name!r}: the model part is empty")
    return provider, model


def provider_for(name: str, env: Mapping[str, str] | None = None) -> Provider:
    """The provider for a model name, with endpoint and key from ``env`` (default: this process's)."""
    kind, model = parse_model_name(name)
    env = os.environ if env is None else env
    if kind == "scripted":
        from flows.providers.scripted import ScriptedProvider, script_key

        key: tuple[str, ...] = (name, *script_key(model))
        factory = lambda: ScriptedProvider(model)  # noqa: E731
    else:
        base_var, key_var = _ENV_KEYS[kind]
        secret = env.get(key_var) or ""
        # The cache key holds a digest of the key, never the key itself.
        key = (
            name,
            env.get(base_var) or "",
            hashlib.sha256(secret.encode()).hexdigest(),
            *(env.get(var) or "" for var in (IDLE_VAR, REQUEST_VAR)),  # the request bounds
        )
        if kind == "openai":
            from flows.providers.openai_chat import OpenAIChatProvider

            factory = lambda: OpenAIChatProvider(model, env)  # noqa: E731
        else:
            from flows.providers.anthropic_messages import AnthropicMessagesProvider

            factory = lambda: AnthropicMessagesProvider(model, env)  # noqa: E731
    with _cache_lock:
        cached = _cache.get(key)
        if cached is not None:
            return cached
    provider = factory()  # outside the lock: a scripted file is read here
    with _cache_lock:
        return _cache.setdefault(key, provider)
