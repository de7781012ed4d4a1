"""Skills in the Agent Skills format and the session's catalog of them (SPEC M-2; issue 10).

A skill is a directory holding ``SKILL.md``: YAML front matter between ``---`` lines, then the
instructions (Markdown). Front matter: ``name`` (1-64 of lowercase letters, digits and single
hyphens; must match the directory), ``description`` (1-1024 characters: what the skill does and
when to use it), optional ``allowed-tools`` (a YAML list, or one string of entries separated by
commas or spaces: ``read search(grep) bash(git *)``). Other keys (``license``, ``metadata``…) are
kept in ``extra`` and ignored.

``allowed-tools`` entries are permission-rule patterns (``Tool`` or ``Tool(specifier)``, docs/kernel.md).
Names written for other agents are mapped onto this surface: ``Read``/``Write``/``Edit``/``Bash``/
``LS`` → lower case, ``Grep`` → ``search(grep)``, ``Glob`` → ``search(glob)``, ``WebFetch`` →
``web_fetch``, ``WebSearch`` → ``web_search``, and the ``cmd:*`` form → ``cmd *``
(``Bash(git:*)`` → ``bash(git *)``). An entry that does not parse makes the skill invalid.

Where skills come from: ``<workspace>/.a3s/skills/<name>/SKILL.md`` of a local workspace (read
below the host's state directory without following a symlink, ``kernel.statedir``), and
``session.register_skill(...)``. Parsing is defensive: ``SKILL.md`` at most ``MAX_SKILL_BYTES``,
front matter at most ``MAX_FRONT_MATTER_BYTES`` read by ``kernel.front_matter`` (libyaml's safe
loader; alias bombs, deep nesting and values that cannot be built are typed refusals), at most
``MAX_SKILLS`` skills; a skill that breaks a rule is skipped with a warning naming it.
"""

from __future__ import annotations

import errno
import os
import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kernel.beneath import O_LIST_DIR, open_subdir, read_regular_at
from kernel.errors import InvalidArgument, NotFound, PermissionDenied
from kernel.front_matter import FrontMatterError, load_mapping, shown_value
from kernel.policy import Rule
from kernel.statedir import open_state_dir

SKILL_FILE = "SKILL.md"
MAX_SKILL_BYTES = 256 * 1024
MAX_FRONT_MATTER_BYTES = 16 * 1024
MAX_SKILLS = 256
MAX_NAME_CHARS = 64
MAX_DESCRIPTION_CHARS = 1024
MAX_ALLOWED_TOOLS = 64
NAME_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
_TOOL_ALIASES = {
    "read": "read",
    "write": "write",
    "edit": "edit",
    "multiedit": "edit",
    "bash": "bash",
    "ls": "ls",
    "git": "git",
    "patch": "patch",
    "search": "search",
    "batch": "batch",
    "program": "program",
    "task": "task",
    "download": "download",
    "webfetch": "web_fetch",
    "web_fetch": "web_fetch",
    "websearch": "web_search",
    "web_search": "web_search",
}
_MODE_ALIASES = {"grep": "search(grep)", "glob": "search(glob)"}
_ENTRY_RE = re.compile(r"[^\s,(]+(?:\([^)]*\))?")


@dataclass(frozen=True)
class SkillDoc:
    """One skill: its front matter, instructions and where it came from."""

    name: str
    description: str
    instructions: str
    allowed_tools: tuple[str, ...] = ()
    source: str = "registered"  # "workspace" | "registered" | a host path
    directory: str | None = None  # the skill's directory on this machine, when it has one
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """JSON form (snapshots carry registered skills so a worker offers them too)."""
        return {
            "name": self.name,
            "description": self.description,
            "instructions": self.instructions,
            "allowed_tools": list(self.allowed_tools),
            "source": self.source,
            "directory": self.directory,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SkillDoc:
        return make_skill(
            name=data.get("name"),
            description=data.get("description"),
            instructions=data.get("instructions") or "",
            allowed_tools=data.get("allowed_tools"),
            source=str(data.get("source") or "registered"),
            directory=data.get("directory"),
        )


def make_skill(
    *,
    name: Any,
    description: Any,
    instructions: Any,
    allowed_tools: Any = None,
    source: str = "registered",
    directory: str | None = None,
    extra: Mapping[str, Any] | None = None,
) -> SkillDoc:
    """A validated skill; ``InvalidArgument`` naming what is wrong."""
    if not isinstance(name, str) or not name or len(name) > MAX_NAME_CHARS or not NAME_RE.match(name):
        raise InvalidArgument(
            f"skill name {shown_value(name)} is invalid: 1-{MAX_NAME_CHARS} lowercase letters, digits and single hyphens"
        )
    if not isinstance(description, str) or not description.strip():
        raise InvalidArgument(f"skill {name!r}: description is required")
    if len(description) > MAX_DESCRIPTION_CHARS:
        raise InvalidArgument(
            f"skill {name!r}: description is longer than {MAX_DESCRIPTION_CHARS} characters"
        )
    if not isinstance(instructions, str):
        raise InvalidArgument(f"skill {name!r}: instructions must be text")
    if len(instructions.encode("utf-8", "surrogatepass")) > MAX_SKILL_BYTES:
        raise InvalidArgument(f"skill {name!r}: instructions are larger than {MAX_SKILL_BYTES} bytes")
    return SkillDoc(
        name=name,
        description=" ".join(description.split()),
        instructions=instructions,
        allowed_tools=parse_allowed_tools(allowed_tools, name),
        source=source,
        directory=directory,
        extra=dict(extra or {}),
    )


def parse_allowed_tools(value: Any, skill: str = "?") -> tuple[str, ...]:
    """``allowed-tools`` as normalised permission-rule patterns (see the module docstring)."""
    if value is None:
        return ()
    if isinstance(value, str):
        texts = [value]
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        texts = value
    else:
        raise InvalidArgument(f"skill {skill!r}: allowed-tools must be a string or a list of strings")
    entries = [e for text in texts for e in _ENTRY_RE.findall(text)]
    junk = "".join(_ENTRY_RE.sub("", text) for text in texts).strip(" ,\t\r\n")
    if junk:
        raise InvalidArgument(
            f"skill {skill!r}: allowed-tools has an entry that is not Tool or Tool(specifier): {junk[:200]!r}"
        )
    if len(entries) > MAX_ALLOWED_TOOLS:
        raise InvalidArgument(f"skill {skill!r}: allowed-tools lists more than {MAX_ALLOWED_TOOLS} entries")
    out: list[str] = []
    for entry in entries:
        rule = _normalise(entry)
        try:
            Rule.parse(rule)
        except InvalidArgument:
            raise InvalidArgument(
                f"skill {skill!r}: allowed-tools entry {entry[:200]!r} is not Tool or Tool(specifier)"
            ) from None
        if rule not in out:
            out.append(rule)
    return tuple(out)


def _normalise(entry: str) -> str:
    tool, paren, rest = entry.partition("(")
    spec = rest[:-1] if paren and rest.endswith(")") else None
    key = tool.strip().lower()
    if key in _MODE_ALIASES and spec in (None, "", "*"):
        return _MODE_ALIASES[key]
    name = _TOOL_ALIASES.get(key, tool.strip())
    if spec is None:
        return name
    spec = spec.strip()
    if spec.endswith(":*"):  # Bash(git:*) → bash(git *)
        spec = spec[:-2] + " *"
    return f"{name}({spec})"


def parse_skill_md(
    data: bytes, *, source: str, directory: str | None = None, expect_name: str | None = None
) -> SkillDoc:
    """Parse ``SKILL.md`` bytes (front matter + instructions); ``InvalidArgument`` when it breaks a rule."""
    if len(data) > MAX_SKILL_BYTES:
        raise InvalidArgument(f"{source}: SKILL.md is larger than {MAX_SKILL_BYTES} bytes")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InvalidArgument(f"{source}: SKILL.md is not UTF-8 text") from None
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].strip() != "---":
        raise InvalidArgument(f"{source}: SKILL.md must start with YAML front matter between '---' lines")
    end = next((i for i in range(1, len(lines)) if lines[i].strip() == "---"), None)
    if end is None:
        raise InvalidArgument(f"{source}: SKILL.md front matter is not closed by a '---' line")
    front = "".join(lines[1:end])
    if len(front.encode("utf-8")) > MAX_FRONT_MATTER_BYTES:
        raise InvalidArgument(
            f"{source}: SKILL.md front matter is larger than {MAX_FRONT_MATTER_BYTES} bytes"
        )
    try:
        meta = load_mapping(front)
    except FrontMatterError as exc:
        raise InvalidArgument(f"{source}: SKILL.md front matter {exc.message}", reason=exc.reason) from None
    name = meta.get("name")
    if expect_name is not None and name != expect_name:
        raise InvalidArgument(
            f"{source}: front matter name {shown_value(name)} does not match its directory {expect_name!r}"
        )
    known = {"name", "description", "allowed-tools", "allowed_tools"}
    return make_skill(
        name=name,
        description=meta.get("description"),
        instructions="".join(lines[end + 1 :]).strip("\n"),
        allowed_tools=meta.get("allowed-tools", meta.get("allowed_tools")),
        source=source,
        directory=directory,
        extra={str(k): v for k, v in meta.items() if k not in known},
    )


def discover_workspace_skills(root: str | os.PathLike[str]) -> tuple[list[SkillDoc], list[str]]:
    """The skills under ``<root>/.a3s/skills/`` (sorted by name) and the warnings for those skipped."""
    try:
        skills_dir = open_state_dir(root, "skills", create=False)
    except FileNotFoundError:
        return [], []
    except (PermissionDenied, OSError) as exc:
        return [], [f"skills: cannot open .a3s/skills ({getattr(exc, 'message', None) or exc})"]
    skills: list[SkillDoc] = []
    warnings: list[str] = []
    with skills_dir:
        listing = os.open(".", O_LIST_DIR, dir_fd=skills_dir.fd)
        try:
            names = sorted(e.name for e in os.scandir(listing))
        finally:
            os.close(listing)
        for entry in names:
            if entry.startswith("."):
                continue
            if len(skills) >= MAX_SKILLS:
                warnings.append(f"skills: more than {MAX_SKILLS} skills in .a3s/skills; the rest are skipped")
                break
            label = f".a3s/skills/{entry}"
            try:
                with open_subdir(skills_dir.fd, entry) as sub:
                    data = read_regular_at(sub.fd, SKILL_FILE, MAX_SKILL_BYTES)
            except (NotADirectoryError, OSError, ValueError) as exc:
                warnings.append(f"skills: {label} skipped ({_why(exc)})")
                continue
            if data is None:
                continue  # a directory without SKILL.md is not a skill
            try:
                directory = os.path.join(os.fspath(root), ".a3s", "skills", entry)
                skills.append(
                    parse_skill_md(data, source="workspace", directory=directory, expect_name=entry)
                )
            except InvalidArgument as exc:
                warnings.append(f"skills: {label} skipped: {exc.message}")
    return skills, warnings


def load_skill_path(path: str | os.PathLike[str]) -> SkillDoc:
    """A skill from a host path: a skill directory or its ``SKILL.md`` file."""
    p = os.fspath(path)
    directory = p if os.path.isdir(p) else os.path.dirname(os.path.abspath(p))
    file = os.path.join(directory, SKILL_FILE) if os.path.isdir(p) else p
    try:
        with open(file, "rb") as fh:
            data = fh.read(MAX_SKILL_BYTES + 1)
    except OSError as exc:
        raise NotFound(f"skill {p}: cannot read {SKILL_FILE} ({exc.strerror or exc})", path=p) from None
    return parse_skill_md(
        data, source=directory, directory=directory, expect_name=os.path.basename(os.path.normpath(directory))
    )


def _why(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.errno is not None:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            return "a symlink or not a directory"
        return exc.strerror or str(exc)
    return str(exc)


class SkillCatalog:
    """The skills of one session, by name; thread-safe; ``search`` ranks them with bm25."""

    def __init__(self, skills: Iterable[SkillDoc] = ()) -> None:
        self._skills: dict[str, SkillDoc] = {}
        self._lock = threading.Lock()
        self.warnings: list[str] = []
        for skill in skills:
            self.add(skill)

    def add(self, skill: SkillDoc, *, replace: bool = False) -> None:
        with self._lock:
            if skill.name in self._skills and not replace:
                raise InvalidArgument(f"skill {skill.name!r} is already registered")
            if skill.name not in self._skills and len(self._skills) >= MAX_SKILLS:
                raise InvalidArgument(f"a session holds at most {MAX_SKILLS} skills")
            self._skills = {**self._skills, skill.name: skill}

    def get(self, name: str) -> SkillDoc | None:
        return self._skills.get(name)

    def names(self) -> list[str]:
        return sorted(self._skills)

    def all(self) -> list[SkillDoc]:
        skills = self._skills
        return [skills[n] for n in sorted(skills)]

    def __len__(self) -> int:
        return len(self._skills)

    def search(self, query: str, limit: int) -> list[tuple[SkillDoc, float]]:
        """Skills ranked by BM25 over name + description (``tools.search.bm25``'s tokenizer and
        parameters); only scores > 0; ties by name."""
        from tools.search.bm25 import K1, B, query_terms, tokenize

        terms = query_terms(query)
        docs = self.all()
        if not terms or not docs:
            return []
        tokens = [tokenize(f"{d.name.replace('-', ' ')} {d.name} {d.description}") for d in docs]
        avg = max(1.0, sum(len(t) for t in tokens) / len(tokens))
        n = len(docs)
        df = {t: sum(1 for toks in tokens if t in toks) for t in terms}
        scored: list[tuple[SkillDoc, float]] = []
        for doc, toks in zip(docs, tokens, strict=True):
            counts: dict[str, int] = {}
            for t in toks:
                counts[t] = counts.get(t, 0) + 1
            score = 0.0
            for t in terms:
                tf = counts.get(t, 0)
                if not tf:
                    continue
                idf = _idf(n, df[t])
                score += idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * len(toks) / avg))
            if score > 0:
                scored.append((doc, score))
        scored.sort(key=lambda item: (-item[1], item[0].name))
        return scored[:limit]


def _idf(n: int, df: int) -> float:
    import math

    return math.log(1 + (n - df + 0.5) / (df + 0.5))
