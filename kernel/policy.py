"""Permission policy (SPEC K-3, S-4): rules people already know, decisions as values (CONVENTIONS §5).

``PermissionPolicy(allow=[...], ask=[...], deny=[...])`` of rules ``Tool`` or ``Tool(specifier)``.
The tool part is a glob on the tool name (``mcp__github__*``); the specifier is a glob on the call's
*subject*: the command for ``bash``, the path for file tools, the host for web tools, the ``mode``
for ``search``. Globs are ``fnmatch`` globs, so ``*`` also crosses ``/`` (``read(src/*)`` covers all
of ``src/``). Precedence deny > ask > allow; a call no rule matches is ``Ask``. ``decide`` is a pure
function of (tool, subject, policy).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from fnmatch import translate
from typing import Any

from kernel.errors import InvalidArgument

_RULE = re.compile(r"^\s*([A-Za-z0-9_*?\[\]\-]+)\s*(?:\((.*)\))?\s*$", re.DOTALL)


@dataclass(frozen=True, slots=True)
class Allow:
    reason: str = "allowed by permission policy"


@dataclass(frozen=True, slots=True)
class Ask:
    reason: str = "no permission rule matched"


@dataclass(frozen=True, slots=True)
class Deny:
    """A denial. Also what a pre-tool hook returns to block a call (``retryable``, ``retry_after_ms``)."""

    reason: str = "denied"
    retryable: bool = False
    retry_after_ms: int | None = None


Decision = Allow | Ask | Deny


@dataclass(frozen=True, slots=True)
class Rule:
    text: str
    tool: re.Pattern[str]
    specifier: re.Pattern[str] | None

    @classmethod
    def parse(cls, text: str) -> Rule:
        m = _RULE.match(text)
        if not m:
            raise InvalidArgument(f"invalid permission rule {text!r}: expected Tool or Tool(specifier)")
        tool, spec = m.group(1), m.group(2)
        spec_re = (
            None if spec is None or spec.strip() in ("", "*", "**") else re.compile(translate(spec.strip()))
        )
        return cls(text=text.strip(), tool=re.compile(translate(tool)), specifier=spec_re)

    def matches(self, tool: str, subject: str | None) -> bool:
        if not self.tool.match(tool):
            return False
        if self.specifier is None:
            return True
        return subject is not None and self.specifier.match(subject) is not None


@dataclass(frozen=True)
class PermissionPolicy:
    allow: tuple[str, ...] = ()
    ask: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    _compiled: tuple[tuple[Rule, ...], tuple[Rule, ...], tuple[Rule, ...]] = field(
        init=False, repr=False, compare=False
    )

    def __init__(self, allow: Any = (), ask: Any = (), deny: Any = ()) -> None:
        object.__setattr__(self, "allow", tuple(allow))
        object.__setattr__(self, "ask", tuple(ask))
        object.__setattr__(self, "deny", tuple(deny))
        compiled = tuple(tuple(Rule.parse(r) for r in rules) for rules in (self.deny, self.ask, self.allow))
        object.__setattr__(self, "_compiled", compiled)

    def decide(self, tool: str, subject: str | None) -> Decision:
        deny, ask, allow = self._compiled
        for rule in deny:
            if rule.matches(tool, subject):
                return Deny(f"Tool '{tool}' is blocked by permission policy ({rule.text})")
        for rule in ask:
            if rule.matches(tool, subject):
                return Ask(f"permission rule {rule.text} asks for confirmation")
        for rule in allow:
            if rule.matches(tool, subject):
                return Allow(f"allowed by {rule.text}")
        return Ask("no permission rule matched")

    def to_json(self) -> dict[str, list[str]]:
        return {"allow": list(self.allow), "ask": list(self.ask), "deny": list(self.deny)}

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> PermissionPolicy:
        data = data or {}
        unknown = set(data) - {"allow", "ask", "deny"}
        if unknown:
            raise InvalidArgument(f"unknown permission policy keys: {sorted(unknown)}")
        return cls(allow=data.get("allow", ()), ask=data.get("ask", ()), deny=data.get("deny", ()))
