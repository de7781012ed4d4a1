"""Permission policy (SPEC K-3, S-4): rules people already know, decisions as values (CONVENTIONS §5).

``PermissionPolicy(allow=[...], ask=[...], deny=[...])`` of rules ``Tool`` or ``Tool(specifier)``.
The tool part is a glob on the tool name (``mcp__github__*``); the specifier is a glob on the call's
*subjects*: the resolved workspace-relative paths of file tools (every file a patch touches), each
command a ``bash`` line runs (``kernel.shell_commands``), the host for web tools, the ``mode`` for
``search``. Globs are ``fnmatch`` globs (matched in linear time by ``glob_fullmatch``), so ``*`` also crosses ``/`` (``read(src/*)`` covers all
of ``src/``).

A call may have several subjects, and every one must pass: the call is denied if any subject is
denied, asks if any asks, and is allowed only when all are allowed (per subject: deny > ask >
allow, unmatched = ask). A subject may hold *unknown* parts (a shell expansion): a deny or ask rule
matches when it could match some text the subject stands for, an allow rule only when it matches
every such text; an ``OPAQUE`` subject therefore matches every deny rule and no allow rule.
``decide`` is a pure function of (tool, subjects, policy).

``allow_read_only=True`` also allows, where no deny or ask rule matched, every call whose declared
capabilities for *its* arguments are read-only (``read``, ``ls``, ``search`` modes that read,
read-only ``git`` subcommands, trusted read-only MCP tools…): ``a3s-fleet run``'s default
policy. It is data, so it travels in snapshots and a worker enforces it like any rule.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from fnmatch import translate
from typing import Any

from kernel.errors import InvalidArgument
from kernel.shell_commands import Segments, Subject

_RULE = re.compile(r"^\s*([A-Za-z0-9_*?\[\]\-]+)\s*(?:\((.*)\))?\s*$", re.DOTALL)
MAX_INTERSECTION_STATES = 2_000_000
UNKNOWN_MARK = "\x00"  # stands for an unknown part in the text an allow rule is matched against

Atom = tuple[str, str]  # ("*", ""), ("?", ""), ("[", class regex), ("c", char)


@dataclass(frozen=True, slots=True)
class Allow:
    """A permission decision: the call may run."""

    reason: str = "allowed by permission policy"


@dataclass(frozen=True, slots=True)
class Ask:
    """A permission decision: the call needs confirmation."""

    reason: str = "no permission rule matched"


@dataclass(frozen=True, slots=True)
class Deny:
    """A denial. Also what a pre-tool hook returns to block a call (``retryable``, ``retry_after_ms``)."""

    reason: str = "denied"
    retryable: bool = False
    retry_after_ms: int | None = None


Decision = Allow | Ask | Deny
Subjects = str | Subject | Sequence[str | Subject] | None


@dataclass(frozen=True, slots=True)
class Rule:
    """One parsed permission rule: the tool pattern and its specifier atoms."""

    text: str
    tool: re.Pattern[str]
    atoms: tuple[Atom, ...] | None  # None: no specifier, the rule matches every call of the tool

    @classmethod
    def parse(cls, text: str) -> Rule:
        m = _RULE.match(text)
        if not m:
            raise InvalidArgument(f"invalid permission rule {text!r}: expected Tool or Tool(specifier)")
        tool, spec = m.group(1), m.group(2)
        tool_rx = re.compile(translate(tool))
        if spec is None or spec.strip() in ("", "*", "**"):
            return cls(text=text.strip(), tool=tool_rx, atoms=None)
        atoms = glob_atoms(spec.strip())
        return cls(text.strip(), tool_rx, atoms)

    def applies_to(self, tool: str) -> bool:
        return self.tool.match(tool) is not None

    def may_match(self, subject: Subject | None) -> bool:
        """Deny/ask: could the specifier match some text of some form of ``subject``?"""
        if self.atoms is None:
            return True
        if subject is None:
            return False
        return any(_intersects(self.atoms, form) for form in subject.forms)

    def covers(self, subject: Subject | None) -> bool:
        """Allow: does the specifier match every text of one allow form of ``subject``?"""
        if self.atoms is None:
            return True
        if subject is None:
            return False
        return any(glob_fullmatch(self.atoms, _with_unknowns(form)) for form in subject.allow)

    def matches(self, tool: str, subject: str | None) -> bool:
        """One literal subject (kept for callers that have a plain string)."""
        return self.applies_to(tool) and self.covers(None if subject is None else Subject.literal(subject))


@dataclass(frozen=True)
class PermissionPolicy:
    """Allow/ask/deny rules (``tool`` or ``tool(specifier)``); deny wins, then ask, then allow."""

    allow: tuple[str, ...] = ()
    ask: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    allow_read_only: bool = False
    _compiled: tuple[tuple[Rule, ...], tuple[Rule, ...], tuple[Rule, ...]] = field(
        init=False, repr=False, compare=False
    )

    def __init__(self, allow: Any = (), ask: Any = (), deny: Any = (), allow_read_only: bool = False) -> None:
        object.__setattr__(self, "allow", tuple(allow))
        object.__setattr__(self, "ask", tuple(ask))
        object.__setattr__(self, "deny", tuple(deny))
        object.__setattr__(self, "allow_read_only", allow_read_only is True)
        compiled = tuple(tuple(Rule.parse(r) for r in rules) for rules in (self.deny, self.ask, self.allow))
        object.__setattr__(self, "_compiled", compiled)

    def rules_for(self, tool: str) -> bool:
        """Does any rule (of any kind) apply to ``tool``? (Callers may skip computing subjects.)"""
        return any(r.applies_to(tool) for rules in self._compiled for r in rules)

    def decide(self, tool: str, subjects: Subjects, *, read_only: bool = False) -> Decision:
        """Deny if any subject is denied, ask if any asks, allow only when every one is allowed
        (or, with ``allow_read_only``, when the call is ``read_only``)."""
        subs = _as_subjects(subjects)
        deny, ask, allow = (tuple(r for r in rules if r.applies_to(tool)) for rules in self._compiled)
        for rule in deny:
            if any(rule.may_match(s) for s in subs):
                return Deny(f"Tool '{tool}' is blocked by permission policy ({rule.text})")
        for rule in ask:
            if any(rule.may_match(s) for s in subs):
                return Ask(f"permission rule {rule.text} asks for confirmation")
        if read_only and self.allow_read_only:
            return Allow("read-only call")
        used: list[str] = []
        for s in subs:
            found = next((r for r in allow if r.covers(s)), None)
            if found is None:
                return Ask("no permission rule matched" if len(subs) == 1 else "not every part is allowed")
            if found.text not in used:
                used.append(found.text)
        return Allow(f"allowed by {', '.join(used)}")

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"allow": list(self.allow), "ask": list(self.ask), "deny": list(self.deny)}
        if self.allow_read_only:
            data["allow_read_only"] = True
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> PermissionPolicy:
        data = data or {}
        unknown = set(data) - {"allow", "ask", "deny", "allow_read_only"}
        if unknown:
            raise InvalidArgument(f"unknown permission policy keys: {sorted(unknown)}")
        return cls(
            allow=data.get("allow", ()),
            ask=data.get("ask", ()),
            deny=data.get("deny", ()),
            allow_read_only=data.get("allow_read_only") is True,
        )


def _as_subjects(value: Subjects) -> list[Subject | None]:
    if value is None:
        return [None]
    if isinstance(value, str):
        return [Subject.literal(value)]
    if isinstance(value, Subject):
        return [value]
    subs: list[Subject | None] = [Subject.literal(v) if isinstance(v, str) else v for v in value]
    return subs or [None]


# ---- globs over text with unknown parts ---------------------------------------------------------


def glob_atoms(pattern: str) -> tuple[Atom, ...]:
    """``fnmatch`` syntax as atoms: ``*``, ``?``, ``[...]`` (``[!...]`` negated), literal chars."""
    atoms: list[Atom] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        i += 1
        if c == "*":
            if not atoms or atoms[-1][0] != "*":
                atoms.append(("*", ""))
        elif c == "?":
            atoms.append(("?", ""))
        elif c == "[":
            j = i
            if j < n and pattern[j] == "!":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            while j < n and pattern[j] != "]":
                j += 1
            if j >= n:
                atoms.append(("c", "["))
                continue
            body = pattern[i:j]
            i = j + 1
            negate = body.startswith("!")
            if negate:
                body = body[1:]
            body = body.replace("\\", "\\\\").replace("[", "\\[").replace("]", "\\]")
            if body.startswith("^"):
                body = "\\" + body
            atoms.append(("[", f"[{'^' if negate else ''}{body}]"))
        else:
            atoms.append(("c", c))
    return tuple(atoms)


def glob_fullmatch(atoms: tuple[Atom, ...], text: str) -> bool:
    """Does the glob match all of ``text`` (where ``UNKNOWN_MARK`` is an unknown part: only ``*`` may
    consume one)? Linear glob matching — only the last ``*`` is ever retried, O(len(text)·len(atoms)):
    the model chooses ``text``, and as a backtracking regex ``*curl*|*sh*`` took 49.5 s on 16 KB."""
    i = j = 0
    star, mark = -1, 0
    while j < len(text):
        if i < len(atoms) and atoms[i][0] == "*":
            star, mark = i, j
            i += 1
        elif i < len(atoms) and _atom_matches(atoms[i], text[j]):
            i += 1
            j += 1
        elif star >= 0:
            i, mark = star + 1, mark + 1
            j = mark
        else:
            return False
    while i < len(atoms) and atoms[i][0] == "*":
        i += 1
    return i == len(atoms)


def _atom_matches(atom: Atom, char: str) -> bool:
    kind, value = atom
    if kind == "c":
        return char == value
    return char != UNKNOWN_MARK and (kind == "?" or _class_matches(value, char))


@functools.lru_cache(maxsize=4096)
def _class_matches(char_class: str, char: str) -> bool:
    return re.fullmatch(char_class, char, re.DOTALL) is not None


def _with_unknowns(form: Segments) -> str:
    return "".join(UNKNOWN_MARK if s is None else s.replace(UNKNOWN_MARK, "") for s in form)


def _form_atoms(form: Segments) -> list[Atom]:
    atoms: list[Atom] = []
    for seg in form:
        if seg is None:
            if not atoms or atoms[-1][0] != "*":
                atoms.append(("*", ""))
        else:
            atoms.extend(("c", ch) for ch in seg)
    return atoms


def _one_char_overlap(rule: Atom, char: str) -> bool:
    kind, value = rule
    if kind == "?":
        return True
    if kind == "c":
        return value == char
    return re.fullmatch(value, char) is not None


def _intersects(rule: tuple[Atom, ...], form: Segments) -> bool:
    """Is there a text matched by ``rule`` that ``form`` (with unknown parts) can stand for?

    The product of the two patterns' automata, explored from (0, 0). Sound for deny and ask: when
    in doubt (a product too large to explore) it answers True.
    """
    if all(seg is not None for seg in form):
        return glob_fullmatch(rule, "".join(s for s in form if s is not None))
    f = _form_atoms(form)
    r_len, f_len = len(rule), len(f)
    if (r_len + 1) * (f_len + 1) > MAX_INTERSECTION_STATES:
        return True
    stack = [(0, 0)]
    seen = {(0, 0)}
    while stack:
        i, j = stack.pop()
        if i == r_len and j == f_len:
            return True
        r_star = i < r_len and rule[i][0] == "*"
        f_star = j < f_len and f[j][0] == "*"
        nxt: list[tuple[int, int]] = []
        if r_star:
            nxt.append((i + 1, j))
        if f_star:
            nxt.append((i, j + 1))
        if i < r_len and j < f_len:
            if r_star and not f_star:
                nxt.append((i, j + 1))
            elif f_star and not r_star:
                nxt.append((i + 1, j))  # the unknown part can be whatever this atom needs
            elif not r_star and not f_star and _one_char_overlap(rule[i], f[j][1]):
                nxt.append((i + 1, j + 1))
        for state in nxt:
            if state not in seen:
                seen.add(state)
                stack.append(state)
    return False
