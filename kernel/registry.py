"""The tool registry and its scoped views (SPEC S-1..S-4, K-3; REFERENCE §2).

A session's ``Registry`` is built from an explicit list of specs, checked as it is built (duplicate
or invalid names and schemas fail). Built-ins cannot be shadowed or unregistered by dynamic tools
(host tools, MCP tools). ``names()`` lists everything callable, sorted; ``definitions()`` only the
model-visible tools, sorted — hidden aliases stay callable but cost no schema tokens.

``ScopedRegistry`` is what an invocation resolves in: a view restricted to an allow-list. A nested
call resolves in its parent's scope and can never fall back to the raw registry.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterable
from typing import Any

from kernel.errors import InvalidArgument, NotFound
from kernel.spec import ToolSpec


class Registry:
    def __init__(self, builtins: Iterable[ToolSpec] = ()) -> None:
        self._tools: dict[str, ToolSpec] = {}
        self._lock = threading.Lock()
        for spec in builtins:
            self._add(dataclasses.replace(spec, builtin=True) if not spec.builtin else spec)

    def _add(self, spec: ToolSpec) -> None:
        if spec.name in self._tools:
            raise InvalidArgument(f"duplicate tool name {spec.name!r}")
        self._tools[spec.name] = spec

    def register(self, spec: ToolSpec) -> None:
        """Add a dynamic (host or MCP) tool; built-ins cannot be shadowed."""
        if spec.builtin:
            raise InvalidArgument("dynamic tools cannot claim to be built-in")
        _ = spec.json_schema  # a dynamic tool's schema is checked at registration, not at first use
        with self._lock:
            existing = self._tools.get(spec.name)
            if existing is not None and existing.builtin:
                raise InvalidArgument(f"tool {spec.name!r} is a built-in and cannot be shadowed")
            if existing is not None:
                raise InvalidArgument(f"tool {spec.name!r} is already registered")
            self._tools = {**self._tools, spec.name: spec}

    def add_session_tool(self, spec: ToolSpec) -> bool:
        """A session built-in that appears after the session was built (``Skill`` and ``search_skills``
        when the first skill is registered). False when it is already there; a dynamic tool holding
        the name is an error."""
        with self._lock:
            existing = self._tools.get(spec.name)
            if existing is not None:
                if existing.builtin:
                    return False
                raise InvalidArgument(f"tool {spec.name!r} is taken by a dynamic tool")
            builtin = spec if spec.builtin else dataclasses.replace(spec, builtin=True)
            self._tools = {**self._tools, spec.name: builtin}
            return True

    def unregister(self, name: str) -> bool:
        with self._lock:
            spec = self._tools.get(name)
            if spec is None or spec.builtin:
                return False
            tools = dict(self._tools)
            del tools[name]
            self._tools = tools
            return True

    def get(self, name: str) -> ToolSpec | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return sorted(self._tools)

    def definitions(self) -> list[dict[str, Any]]:
        return [self._tools[n].definition() for n in sorted(self._tools) if self._tools[n].visible]

    def scoped(self, allowed: Iterable[str] | None = None) -> ScopedRegistry:
        return ScopedRegistry(self, None if allowed is None else frozenset(allowed))


class ScopedRegistry:
    """A registry view; ``narrow`` only ever shrinks it."""

    __slots__ = ("_allowed", "_registry")

    def __init__(self, registry: Registry, allowed: frozenset[str] | None) -> None:
        self._registry = registry
        self._allowed = allowed

    def resolve(self, name: str) -> ToolSpec:
        if self._allowed is not None and name not in self._allowed:
            if self._registry.get(name) is None:
                raise NotFound(f"Unknown tool: {name}", path=name)
            raise NotFound(f"Tool '{name}' is not available in this scope", path=name)
        spec = self._registry.get(name)
        if spec is None:
            raise NotFound(f"Unknown tool: {name}", path=name)
        return spec

    def names(self) -> list[str]:
        names = self._registry.names()
        return names if self._allowed is None else [n for n in names if n in self._allowed]

    def narrow(self, allowed: Iterable[str]) -> ScopedRegistry:
        allowed_set = frozenset(allowed)
        if self._allowed is not None:
            allowed_set &= self._allowed
        return ScopedRegistry(self._registry, allowed_set)
