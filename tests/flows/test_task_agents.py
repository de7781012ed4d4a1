"""Agent definitions: built-in ``general`` / ``explore`` / ``verification`` and ``.a3s/agents/<name>.md`` (issue 9).

Custom files are read below ``.a3s`` without following a symlink (the race-free state-directory path);
an unknown agent is ``not_found``; a broken definition is ``invalid_argument`` naming the file.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from flows.task.agents import BUILTIN_AGENTS, list_agents, parse_agent_md, parse_tools, resolve_agent
from kernel.errors import InvalidArgument, NotFound
from kernel.workspace import LocalWorkspace


def write_agent(root: Path, name: str, text: str) -> Path:
    directory = root / ".a3s" / "agents"
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.md"
    path.write_text(text)
    return path


REVIEWER = """---
name: reviewer
description: Reviews a diff for bugs.
tools: [Read, Grep, Glob, bash]
model: openai:small
max_steps: 7
---
You review code. Be terse.
"""


def test_builtin_agents_and_their_tools() -> None:
    assert set(BUILTIN_AGENTS) == {"general", "explore", "verification"}
    surface = ["bash", "edit", "git", "ls", "read", "search", "task", "parallel_task", "write", "web_fetch"]
    assert BUILTIN_AGENTS["general"].surface(surface) == [
        "bash",
        "edit",
        "git",
        "ls",
        "read",
        "search",
        "write",
        "web_fetch",
    ]
    assert BUILTIN_AGENTS["explore"].surface(surface) == ["git", "ls", "read", "search", "web_fetch"]
    assert BUILTIN_AGENTS["explore"].read_only
    verification = BUILTIN_AGENTS["verification"]
    assert verification.surface(surface) == ["bash", "git", "ls", "read", "search", "web_fetch"]
    assert verification.read_only and verification.read_only_exempt == {"bash"}


def test_custom_agent_from_front_matter(tmp_path: Path) -> None:
    write_agent(tmp_path, "reviewer", REVIEWER)
    agent = resolve_agent(LocalWorkspace(tmp_path), "reviewer")
    assert agent.tools == ("read", "search", "bash")
    assert (agent.model, agent.max_steps, agent.system_prompt) == (
        "openai:small",
        7,
        "You review code. Be terse.",
    )
    assert agent.source == ".a3s/agents/reviewer.md"
    assert [a.name for a in list_agents(LocalWorkspace(tmp_path))[0]] == [
        "general",
        "explore",
        "verification",
        "reviewer",
    ]


def test_unknown_agent_is_not_found_naming_the_available_ones(tmp_path: Path) -> None:
    write_agent(tmp_path, "reviewer", REVIEWER)
    with pytest.raises(NotFound) as info:
        resolve_agent(LocalWorkspace(tmp_path), "nobody")
    assert "unknown agent 'nobody'" in info.value.message
    assert "general, explore, verification, reviewer" in info.value.message


def test_x3_an_unknown_agent_is_named_without_parsing_every_definition(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wrong name costs one directory listing: every definition file was parsed (up to 256 of
    64 KiB each) only to list the names in the error."""
    import flows.task.agents as agents

    for name in ("reviewer", "planner"):
        write_agent(tmp_path, name, REVIEWER.replace("reviewer", name))
    write_agent(tmp_path, "explore", REVIEWER)  # a built-in name: not listed twice

    def no_parse(*_args: object, **_kw: object) -> None:
        raise AssertionError("a definition was parsed")

    monkeypatch.setattr(agents, "parse_agent_md", no_parse)
    with pytest.raises(NotFound) as info:
        resolve_agent(LocalWorkspace(tmp_path), "nobody" * 40)
    assert "unknown agent 'nobodynobody" in info.value.message
    assert info.value.message.endswith("available agents: general, explore, verification, planner, reviewer")


def test_builtin_names_cannot_be_redefined_by_a_workspace(tmp_path: Path) -> None:
    write_agent(tmp_path, "explore", REVIEWER.replace("reviewer", "explore"))
    assert resolve_agent(LocalWorkspace(tmp_path), "explore") is BUILTIN_AGENTS["explore"]
    _, warnings = list_agents(LocalWorkspace(tmp_path))
    assert any("'explore' is a built-in agent" in w for w in warnings)


def test_a_symlinked_agent_file_or_directory_is_never_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "spy.md").write_text(REVIEWER.replace("reviewer", "spy"))
    ws = tmp_path / "ws"
    (ws / ".a3s" / "agents").mkdir(parents=True)
    os.symlink(outside / "spy.md", ws / ".a3s" / "agents" / "spy.md")
    with pytest.raises(InvalidArgument) as info:
        resolve_agent(LocalWorkspace(ws), "spy")
    assert ".a3s/agents/spy.md: cannot read" in info.value.message
    ws2 = tmp_path / "ws2"
    (ws2 / ".a3s").mkdir(parents=True)
    os.symlink(outside, ws2 / ".a3s" / "agents")
    with pytest.raises(Exception) as info2:
        resolve_agent(LocalWorkspace(ws2), "spy")
    assert getattr(info2.value, "kind", "") in ("permission_denied", "not_found")


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("no front matter", "must start with YAML front matter"),
        ("---\nname: x\n", "not closed"),
        ("---\n[1, 2]\n---\n", "must be a mapping"),
        ("---\nname: other\ndescription: d\n---\n", "does not match the file name"),
        ("---\nname: x\n---\n", "description is required"),
        ("---\nname: x\ndescription: d\nmodel: gpt4\n---\n", "model must be 'provider:model'"),
        ("---\nname: x\ndescription: d\nmax_steps: 0\n---\n", "max_steps must be an integer"),
        ("---\nname: x\ndescription: d\ntools: {a: 1}\n---\n", "tools must be a string or a list"),
        ("---\nname: x\ndescription: d\ntools: bash(rm *)\n---\n", "is not a tool name"),
        ("---\nname: x\ndescription: [\n---\n", "not valid YAML"),
    ],
)
def test_a_broken_definition_is_invalid_naming_the_file(text: str, why: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        parse_agent_md(text.encode(), source=".a3s/agents/x.md", expect_name="x")
    assert info.value.message.startswith(".a3s/agents/x.md: ") and why in info.value.message


def test_tools_accept_a_string_and_star_means_the_session_tools() -> None:
    assert parse_tools("Read, Grep  web_search") == ("read", "search", "web_search")
    assert parse_tools(["*"]) is None
    assert parse_tools(None) is None
    defn = parse_agent_md(b"---\nname: y\ndescription: d\n---\n", source="y.md")
    assert defn.tools is None and "sub-agent" in defn.system_prompt


@pytest.mark.parametrize(
    ("front", "why"),
    [
        ("name: x\ndescription: d\nwhen: 2001-99-99 10:00:00\n", "cannot be built (ValueError"),
        ("name: x\ndescription: !!float x\n", "cannot be built (ValueError"),
        ("? [a, b]\n: 1\nname: x\n", "not valid YAML"),
        ("name: 0x" + "f" * 9000 + "\ndescription: d\n", "name (type int) is invalid"),
        ("a: &a [1, *a]\nname: x\n", "refers to its own anchor"),
    ],
)
def test_x3_front_matter_that_cannot_be_built_is_invalid_not_an_exception(front: str, why: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        parse_agent_md(f"---\n{front}---\n".encode(), source=".a3s/agents/x.md", expect_name="x")
    assert info.value.message.startswith(".a3s/agents/x.md: ") and why in info.value.message


def test_x3_an_alias_bomb_agent_is_skipped_naming_the_problem(tmp_path: Path) -> None:
    lines = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    lines += [f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]" for p, c in zip("abcdefg", "bcdefgh", strict=True)]
    write_agent(tmp_path, "bomb", "---\n" + "\n".join(lines) + "\nname: *h\ndescription: *h\n---\n")
    write_agent(tmp_path, "late", "---\nname: late\ndescription: d\nwhen: 2001-13-01\n---\n")
    agents, warnings = list_agents(LocalWorkspace(tmp_path))
    assert [a.name for a in agents] == ["general", "explore", "verification"]
    assert any("bomb.md" in w and "alias bomb" in w for w in warnings)
    assert any("late.md" in w and "ValueError" in w for w in warnings)
    with pytest.raises(InvalidArgument) as info:
        resolve_agent(LocalWorkspace(tmp_path), "bomb")
    assert info.value.to_kind().get("reason") == "alias_bomb"
