"""Agent definitions: who a ``task`` child is — tools, system prompt, model, step bound (SPEC X-3; issue 9).

Built in (names reserved):

- ``general`` — the session's tools (minus delegation: a child never starts children of its own);
- ``explore`` — read-only tools (``read``, ``ls``, ``search``, ``git``, ``web_fetch``, ``web_search``,
  ``Skill``, ``search_skills``), and every call must be declared read-only for its arguments (K-5):
  ``git status`` passes, ``git commit`` is refused;
- ``verification`` — the read-only tools plus ``bash`` (to run checks).

Custom agents live in ``<workspace>/.a3s/agents/<name>.md``: YAML front matter with ``name`` (must
match the file name), ``description`` (required), optional ``tools`` (a YAML list or a string of names
separated by commas or spaces; ``Read``/``Grep``/``Glob``/``Bash``… map onto this surface; absent =
the session's tools), ``model`` (``provider:model``), ``max_steps`` (1–1000); the body is the system
prompt. Files are read below the host's state directory one component at a time without following a
symlink (``kernel.statedir``, the race-free path for ``.a3s``), at most ``MAX_AGENT_BYTES``; the front
matter is read by ``kernel.front_matter`` (safe loader, alias bombs and unbuildable values refused,
typed); a definition that breaks a rule is ``invalid_argument`` naming the file. An unknown name is
``not_found`` listing the agents that exist (by file name: no definition is parsed to say so). Workspaces without a local root (``git:REPO@REV``) offer
the built-ins only.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from kernel.beneath import O_LIST_DIR, read_regular_at
from kernel.errors import InvalidArgument, NotFound, PermissionDenied
from kernel.front_matter import FrontMatterError, load_mapping, shown_value
from kernel.statedir import open_state_dir
from kernel.workspace import Workspace

AGENTS_DIR = "agents"
MAX_AGENT_BYTES = 64 * 1024
MAX_FRONT_MATTER_BYTES = 16 * 1024
MAX_AGENT_TOOLS = 64
MAX_DESCRIPTION_CHARS = 1024
MAX_AGENT_STEPS = 1000
MAX_LISTED_AGENTS = 256
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
MODEL_RE = re.compile(r"^[a-z][a-z0-9_-]*:.+$")
# A child never delegates further (no unbounded trees of runs): these are never on a child's surface.
DELEGATION_TOOLS = frozenset({"task", "parallel_task"})
READ_ONLY_TOOLS = ("read", "ls", "search", "git", "web_fetch", "web_search", "Skill", "search_skills")
_TOOL_ALIASES = {
    "read": "read",
    "write": "write",
    "edit": "edit",
    "multiedit": "edit",
    "bash": "bash",
    "ls": "ls",
    "grep": "search",
    "glob": "search",
    "search": "search",
    "webfetch": "web_fetch",
    "web_fetch": "web_fetch",
    "websearch": "web_search",
    "web_search": "web_search",
    "patch": "patch",
    "git": "git",
}

_BASE_PROMPT = (
    "You are a sub-agent started by another agent to do one task in this workspace. Work only on "
    "that task, use the tools you are given, and finish with a concise final answer: what you found "
    "or did, with the file paths and line numbers that support it. Your final message is all the "
    "parent agent sees."
)


@dataclass(frozen=True)
class AgentDef:
    """One agent: ``tools`` None means the session's tools (minus delegation)."""

    name: str
    description: str
    system_prompt: str
    tools: tuple[str, ...] | None = None
    read_only: bool = False
    # With ``read_only``: tools exempt from the per-call read-only rule (``verification``'s bash).
    read_only_exempt: frozenset[str] = frozenset()
    model: str | None = None
    max_steps: int | None = None
    source: str = "builtin"

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "tools": list(self.tools) if self.tools is not None else None,
            "read_only": self.read_only,
            "model": self.model,
            "max_steps": self.max_steps,
            "source": self.source,
        }

    def surface(self, session_tools: list[str]) -> list[str]:
        """The tool names a child of this agent is offered, from its parent session's surface."""
        names = [n for n in session_tools if n not in DELEGATION_TOOLS]
        if self.tools is None:
            return names
        wanted = set(self.tools)
        return [n for n in names if n in wanted]


BUILTIN_AGENTS: dict[str, AgentDef] = {
    "general": AgentDef(
        name="general",
        description="General-purpose agent with the session's tools, for multi-step tasks.",
        system_prompt=_BASE_PROMPT,
    ),
    "explore": AgentDef(
        name="explore",
        description="Read-only explorer: finds files, reads code and answers questions about it.",
        system_prompt=_BASE_PROMPT
        + " You are read-only: you cannot change files or run commands; report what you find.",
        tools=READ_ONLY_TOOLS,
        read_only=True,
    ),
    "verification": AgentDef(
        name="verification",
        description="Verifier: reads code and runs checks with bash (tests, linters) without editing files.",
        system_prompt=_BASE_PROMPT
        + " You verify: read the code and run checks with bash (tests, linters, builds); do not edit "
        "files. Report each check you ran with its outcome.",
        tools=(*READ_ONLY_TOOLS, "bash"),
        read_only=True,
        read_only_exempt=frozenset({"bash"}),
    ),
}


def resolve_agent(workspace: Workspace, name: str) -> AgentDef:
    """The agent called ``name``: built in, else ``.a3s/agents/<name>.md`` (``not_found`` otherwise)."""
    builtin = BUILTIN_AGENTS.get(name)
    if builtin is not None:
        return builtin
    if NAME_RE.match(name) and workspace.root is not None:
        data = _read_agent_file(workspace.root, f"{name}.md")
        if data is not None:
            return parse_agent_md(data, source=f".a3s/agents/{name}.md", expect_name=name)
    known = ", ".join(agent_names(workspace))
    raise NotFound(f"unknown agent {name[:80]!r}; available agents: {known}", path=name)


def agent_names(workspace: Workspace) -> list[str]:
    """The names an unknown agent's error lists: built-ins, then the workspace's agent files by name
    (at most ``MAX_LISTED_AGENTS``), without reading them — a wrong name costs one directory
    listing, not a parse of every definition (256 files of up to 64 KiB each)."""
    names = list(BUILTIN_AGENTS)
    root = workspace.root
    if root is None:
        return names
    try:
        directory = open_state_dir(root, AGENTS_DIR, create=False)
    except (PermissionDenied, OSError):
        return names
    with directory:
        try:
            files = _agent_files(directory.fd)
        except OSError:
            return names
    for file in files:
        name = file[: -len(".md")]
        if name not in BUILTIN_AGENTS and NAME_RE.match(name):
            names.append(name)
    return names


def _agent_files(dir_fd: int) -> list[str]:
    """The first ``MAX_LISTED_AGENTS`` ``*.md`` names of the agents directory, sorted."""
    listing = os.open(".", O_LIST_DIR, dir_fd=dir_fd)
    try:
        return sorted(e.name for e in os.scandir(listing) if e.name.endswith(".md"))[:MAX_LISTED_AGENTS]
    finally:
        os.close(listing)


def list_agents(workspace: Workspace) -> tuple[list[AgentDef], list[str]]:
    """Built-ins first, then the workspace's valid agents (by name), and warnings for skipped files."""
    agents = list(BUILTIN_AGENTS.values())
    warnings: list[str] = []
    root = workspace.root
    if root is None:
        return agents, warnings
    try:
        directory = open_state_dir(root, AGENTS_DIR, create=False)
    except FileNotFoundError:
        return agents, warnings
    except (PermissionDenied, OSError) as exc:
        return agents, [f"agents: cannot open .a3s/agents ({getattr(exc, 'message', None) or exc})"]
    with directory:
        for file in _agent_files(directory.fd):
            name = file[: -len(".md")]
            label = f".a3s/agents/{file}"
            if name in BUILTIN_AGENTS:
                warnings.append(f"agents: {label} ignored: {name!r} is a built-in agent")
                continue
            if not NAME_RE.match(name):
                warnings.append(f"agents: {label} ignored: invalid agent name")
                continue
            try:
                data = read_regular_at(directory.fd, file, MAX_AGENT_BYTES)
                if data is not None:
                    agents.append(parse_agent_md(data, source=label, expect_name=name))
            except (OSError, ValueError) as exc:
                warnings.append(f"agents: {label} skipped ({exc})")
            except InvalidArgument as exc:
                warnings.append(f"agents: {exc.message}")
    return agents, warnings


def _read_agent_file(root: Any, file: str) -> bytes | None:
    try:
        directory = open_state_dir(root, AGENTS_DIR, create=False)
    except FileNotFoundError:
        return None
    with directory:
        try:
            return read_regular_at(directory.fd, file, MAX_AGENT_BYTES)
        except OSError as exc:  # a symlink (ELOOP), a directory, unreadable
            raise InvalidArgument(f".a3s/agents/{file}: cannot read ({exc.strerror or exc})") from None
        except ValueError as exc:
            raise InvalidArgument(f".a3s/agents/{file}: {exc}") from None


def parse_agent_md(data: bytes, *, source: str, expect_name: str | None = None) -> AgentDef:
    """Parse an agent file (front matter + system prompt); ``InvalidArgument`` naming what is wrong."""
    if len(data) > MAX_AGENT_BYTES:
        raise InvalidArgument(f"{source}: larger than {MAX_AGENT_BYTES} bytes")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InvalidArgument(f"{source}: not UTF-8 text") from None
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].strip() != "---":
        raise InvalidArgument(f"{source}: must start with YAML front matter between '---' lines")
    end = next((i for i in range(1, len(lines)) if lines[i].strip() == "---"), None)
    if end is None:
        raise InvalidArgument(f"{source}: front matter is not closed by a '---' line")
    front = "".join(lines[1:end])
    if len(front.encode("utf-8")) > MAX_FRONT_MATTER_BYTES:
        raise InvalidArgument(f"{source}: front matter is larger than {MAX_FRONT_MATTER_BYTES} bytes")
    try:
        meta = load_mapping(front)
    except FrontMatterError as exc:
        raise InvalidArgument(f"{source}: front matter {exc.message}", reason=exc.reason) from None
    name = meta.get("name")
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise InvalidArgument(
            f"{source}: name {shown_value(name)} is invalid (letters, digits, '_', '.', '-')"
        )
    if expect_name is not None and name != expect_name:
        raise InvalidArgument(
            f"{source}: front matter name {name!r} does not match the file name {expect_name!r}"
        )
    description = meta.get("description")
    if not isinstance(description, str) or not description.strip():
        raise InvalidArgument(f"{source}: description is required")
    if len(description) > MAX_DESCRIPTION_CHARS:
        raise InvalidArgument(f"{source}: description is longer than {MAX_DESCRIPTION_CHARS} characters")
    model = meta.get("model")
    if model is not None and (not isinstance(model, str) or not MODEL_RE.match(model)):
        raise InvalidArgument(f"{source}: model must be 'provider:model' (e.g. openai:gpt-4o-mini)")
    max_steps = meta.get("max_steps")
    if max_steps is not None and (
        isinstance(max_steps, bool) or not isinstance(max_steps, int) or not 1 <= max_steps <= MAX_AGENT_STEPS
    ):
        raise InvalidArgument(f"{source}: max_steps must be an integer from 1 to {MAX_AGENT_STEPS}")
    body = "".join(lines[end + 1 :]).strip()
    return AgentDef(
        name=name,
        description=" ".join(description.split()),
        system_prompt=body or _BASE_PROMPT,
        tools=parse_tools(meta.get("tools"), source),
        model=model,
        max_steps=max_steps,
        source=source,
    )


def parse_tools(value: Any, source: str = "?") -> tuple[str, ...] | None:
    """``tools`` as names on this surface (``None`` when absent: the session's tools)."""
    if value is None:
        return None
    if isinstance(value, str):
        entries = [e for e in re.split(r"[\s,]+", value) if e]
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        entries = [e.strip() for e in value if e.strip()]
    else:
        raise InvalidArgument(f"{source}: tools must be a string or a list of strings")
    if len(entries) > MAX_AGENT_TOOLS:
        raise InvalidArgument(f"{source}: tools lists more than {MAX_AGENT_TOOLS} entries")
    out: list[str] = []
    for entry in entries:
        if entry == "*":
            return None
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_\-]{0,127}$", entry):
            raise InvalidArgument(f"{source}: tools entry {entry[:100]!r} is not a tool name")
        name = _TOOL_ALIASES.get(entry.lower(), entry)
        if name not in out:
            out.append(name)
    return tuple(out)
