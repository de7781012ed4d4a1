"""Skills: discovery, ``search_skills`` ranking, ``Skill`` loading and the tool restriction (SPEC M-2, S-2, K-3).

Skills live in ``.a3s/skills/<name>/SKILL.md`` (Agent Skills format) or are registered by the host.
The restriction is off by default (REFERENCE 4.16) and on with
``SessionOptions(enforce_skill_tool_restrictions=True)``.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Any

import pytest

from flows.sessions import options_from_snapshot
from kernel.errors import InvalidArgument
from kernel.options import SessionOptions
from kernel.policy import PermissionPolicy
from orchestrator import Agent
from tools.skills import parse_skill_md
from tools.skills.catalog import parse_allowed_tools

ALLOW_ALL = PermissionPolicy(allow=["*"])


def write_skill(root: Path, name: str, description: str, body: str = "Do it.", extra: str = "") -> Path:
    directory = root / ".a3s" / "skills" / name
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "SKILL.md").write_text(
        f"---\nname: {name}\ndescription: {description}\n{extra}---\n{body}\n"
    )
    return directory


@pytest.fixture()
def skilled(tmp_path: Path) -> Path:
    write_skill(
        tmp_path,
        "release-notes",
        "Write release notes from the git log of a release branch",
        "1. Run git log.\n2. Group by feature.",
        "allowed-tools: Read, Grep, Bash(git:*)\n",
    )
    refs = write_skill(
        tmp_path, "pdf-forms", "Fill PDF forms and extract form fields from PDF files", "See reference.md."
    )
    (refs / "reference.md").write_text("# Form fields\nUse pypdf.\n")
    (refs / "scripts").mkdir()
    (refs / "scripts" / "fill.py").write_text("print('fill')\n")
    write_skill(tmp_path, "code-review", "Review a pull request for bugs and style issues", "Read the diff.")
    (tmp_path / "notes.txt").write_text("hello\n")
    return tmp_path


def test_s2_skill_tools_appear_only_when_the_session_has_skills(
    agent: Agent, tmp_path: Path, skilled: Path
) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    with agent.session(plain) as s:
        assert "Skill" not in s.tool_names() and "search_skills" not in s.tool_names()
        s.register_skill(name="hello", description="Say hello politely", instructions="Say hello.")
        assert {"Skill", "search_skills"} <= set(s.tool_names())  # appear with the first skill
        assert s.kernel.registry.get("Skill").builtin  # session built-ins (S-2), not dynamic tools
    with agent.session(skilled) as s:
        assert {"Skill", "search_skills"} <= set(s.tool_names())
        assert [k["name"] for k in s.skills()] == ["code-review", "pdf-forms", "release-notes"]


def test_m2_skill_loads_instructions_and_lists_files(agent: Agent, skilled: Path) -> None:
    with agent.session(skilled, SessionOptions(permission_policy=ALLOW_ALL)) as s:
        result = s.model_tool_call("Skill", {"skill": "pdf-forms"})
        assert result.exit_code == 0
        assert result.output.startswith("# Skill: pdf-forms\n\nSee reference.md.")
        assert result.metadata["skill"]["files"] == ["reference.md", "scripts/fill.py"]
        ref = s.model_tool_call("Skill", {"skill": "pdf-forms", "path": "reference.md"})
        assert ref.output == "# Form fields\nUse pypdf.\n"
        for bad in ("../release-notes/SKILL.md", "/etc/passwd", "scripts/../../x"):
            refused = s.model_tool_call("Skill", {"skill": "pdf-forms", "path": bad})
            assert refused.error_kind["type"] == "invalid_argument", bad
        missing = s.model_tool_call("Skill", {"skill": "nope"})
        assert missing.error_kind == {"type": "not_found", "path": "nope"}
        assert "pdf-forms" in missing.output  # names the skills there are
        assert s.active_skills() == ["pdf-forms"]


def test_m2_a_symlink_inside_a_skill_is_never_followed(
    agent: Agent, skilled: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    outside = tmp_path_factory.mktemp("outside") / "secret.txt"
    outside.write_text("secret")
    os.symlink(outside, skilled / ".a3s" / "skills" / "pdf-forms" / "leak.md")
    os.symlink(outside.parent, skilled / ".a3s" / "skills" / "evil")
    with agent.session(skilled, SessionOptions(permission_policy=ALLOW_ALL)) as s:
        leak = s.model_tool_call("Skill", {"skill": "pdf-forms", "path": "leak.md"})
        assert leak.exit_code == 1 and "secret" not in leak.output
        assert "evil" not in [k["name"] for k in s.skills()]


def test_m2_search_skills_ranks_by_bm25_over_name_and_description(agent: Agent, skilled: Path) -> None:
    with agent.session(skilled, SessionOptions(permission_policy=ALLOW_ALL)) as s:
        result = s.model_tool_call("search_skills", {"query": "pdf form fields"})
        ranked = [k["name"] for k in result.metadata["skills"]]
        assert ranked[0] == "pdf-forms"
        review = s.model_tool_call("search_skills", {"query": "review my pull request"}).metadata["skills"]
        assert review[0]["name"] == "code-review"
        assert all(a["score"] >= b["score"] for a, b in itertools.pairwise(review))
        by_name = s.model_tool_call("search_skills", {"query": "release notes"}).metadata["skills"]
        assert by_name[0]["name"] == "release-notes"
        none = s.model_tool_call("search_skills", {"query": "kubernetes"})
        assert none.exit_code == 0 and none.metadata["skills"] == []


def test_m2_restriction_is_off_by_default(agent: Agent, skilled: Path) -> None:
    with agent.session(skilled, SessionOptions(permission_policy=ALLOW_ALL)) as s:
        s.model_tool_call("Skill", {"skill": "release-notes"})
        assert s.model_tool_call("write", {"file_path": "out.txt", "content": "x"}).exit_code == 0


def test_k3_m2_restriction_on_allows_only_the_active_skills_tools(agent: Agent, skilled: Path) -> None:
    options = SessionOptions(permission_policy=ALLOW_ALL, enforce_skill_tool_restrictions=True)
    with agent.session(skilled, options) as s:
        assert (
            s.model_tool_call("write", {"file_path": "a.txt", "content": "x"}).exit_code == 0
        )  # no skill yet
        loaded = s.model_tool_call("Skill", {"skill": "release-notes"})
        assert "read, search(grep), bash(git *)" in loaded.output
        denied = s.model_tool_call("write", {"file_path": "b.txt", "content": "x"})
        assert denied.error_kind == {"type": "permission_denied", "reason": "skill_restriction"}
        assert "release-notes" in denied.output and not (skilled / "b.txt").exists()
        assert s.model_tool_call("read", {"file_path": "notes.txt"}).exit_code == 0
        assert s.model_tool_call("search", {"mode": "grep", "query": "hello"}).exit_code == 0
        glob = s.model_tool_call("search", {"mode": "glob", "query": "*.txt"})
        assert glob.error_kind["reason"] == "skill_restriction"  # Grep maps to search(grep) only
        bash_git = s.model_tool_call("bash", {"command": "git status && rm -rf /tmp/x"})
        assert bash_git.error_kind["reason"] == "skill_restriction"  # every command must be allowed
        assert (
            s.model_tool_call("search_skills", {"query": "pdf"}).exit_code == 0
        )  # skill tools stay callable
        # A skill without allowed-tools does not lift the restriction; host-direct calls are not gated.
        s.model_tool_call("Skill", {"skill": "code-review"})
        assert (
            s.model_tool_call("write", {"file_path": "c.txt", "content": "x"}).error_kind["reason"]
            == "skill_restriction"
        )
        assert s.tool("write", {"file_path": "d.txt", "content": "x"}).exit_code == 0
        s.deactivate_skills()
        assert s.model_tool_call("write", {"file_path": "e.txt", "content": "x"}).exit_code == 0


def test_m2_restriction_and_registered_skills_survive_a_snapshot(agent: Agent, skilled: Path) -> None:
    options = SessionOptions(permission_policy=ALLOW_ALL, enforce_skill_tool_restrictions=True)
    with agent.session(skilled, options) as s:
        s.register_skill(
            name="only-read", description="Read files only", instructions="Read.", allowed_tools=["read"]
        )
        s.model_tool_call("Skill", {"skill": "only-read"})
        snapshot = s.snapshot()
    restored = agent.resume(snapshot, options_from_snapshot(snapshot, {}))  # what a fleet worker does
    try:
        assert "only-read" in [k["name"] for k in restored.skills()]
        assert restored.kernel.options.enforce_skill_tool_restrictions
        denied = restored.model_tool_call("write", {"file_path": "z.txt", "content": "x"})
        assert denied.error_kind["reason"] == "skill_restriction"
    finally:
        restored.close()


def test_m2_register_skill_from_a_path_and_inline(agent: Agent, tmp_path: Path, skilled: Path) -> None:
    host_skill = tmp_path / "host-skills" / "deploy"
    host_skill.mkdir(parents=True)
    (host_skill / "SKILL.md").write_text(
        "---\nname: deploy\ndescription: Deploy the service\n---\nShip it.\n"
    )
    with agent.session(skilled) as s:
        s.register_skill(host_skill)
        assert s.tool("Skill", {"skill": "deploy"}).output.startswith("# Skill: deploy\n\nShip it.")
        with pytest.raises(InvalidArgument, match="already registered"):
            s.register_skill(host_skill)
        with pytest.raises(InvalidArgument, match="skill name"):
            s.register_skill(name="Bad Name", description="x", instructions="y")
        with pytest.raises(InvalidArgument, match="description is required"):
            s.register_skill(name="ok", description=" ", instructions="y")


def test_m2_front_matter_is_parsed_safely_and_bounded() -> None:
    ok = parse_skill_md(
        b"---\nname: a\ndescription: b\nallowed-tools: read bash(npm:*)\nlicense: MIT\n---\nbody\n",
        source="t",
    )
    assert (
        ok.allowed_tools == ("read", "bash(npm *)")
        and ok.extra == {"license": "MIT"}
        and ok.instructions == "body"
    )
    bad = [
        (b"no front matter", "must start with YAML front matter"),
        (b"---\nname: a\n", "not closed"),
        (b"---\nname: a\ndescription: [unclosed\n---\n", "not valid YAML"),
        (b"---\n!!python/object/apply:os.system ['true']\n---\n", "not valid YAML"),
        (b"---\n- a\n---\n", "must be a mapping"),
        (b"---\nname: a\ndescription: " + b"x" * 20000 + b"\n---\n", "front matter is larger"),
        (b"---\nname: a\ndescription: b\nallowed-tools: 'read(('\n---\n", "not Tool or Tool"),
        (b"\xff\xfe", "not UTF-8"),
    ]
    for data, message in bad:
        with pytest.raises(InvalidArgument, match=message):
            parse_skill_md(data, source="t")
    with pytest.raises(InvalidArgument, match="larger than"):
        parse_skill_md(b"---\nname: a\ndescription: b\n---\n" + b"x" * (300 * 1024), source="t")
    with pytest.raises(InvalidArgument, match="does not match its directory"):
        parse_skill_md(b"---\nname: a\ndescription: b\n---\n", source="t", expect_name="other")
    assert parse_allowed_tools("Grep, Glob, WebFetch") == ("search(grep)", "search(glob)", "web_fetch")


def test_m2_front_matter_that_cannot_be_built_skips_the_skill_with_a_warning(skilled: Path) -> None:
    from tools.skills.catalog import discover_workspace_skills

    write_skill(skilled, "bad-date", "d", extra="when: 2001-99-99 10:00:00\n")
    write_skill(skilled, "bad-key", "d", extra="? [a, b]\n: 1\n")
    lines = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    lines += [f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]" for p, c in zip("abcdefg", "bcdefgh", strict=True)]
    write_skill(skilled, "bomb", "d", extra="\n".join(lines) + "\nmore: *h\n")
    skills, warnings = discover_workspace_skills(skilled)
    assert [s.name for s in skills] == ["code-review", "pdf-forms", "release-notes"]
    assert any("bad-date" in w and "ValueError" in w for w in warnings)
    assert any("bad-key" in w and "not valid YAML" in w for w in warnings)
    assert any("skills/bomb" in w and "alias bomb" in w for w in warnings)


def test_m2_a_broken_skill_is_skipped_with_a_warning(agent: Agent, skilled: Path) -> None:
    broken = skilled / ".a3s" / "skills" / "broken"
    broken.mkdir()
    (broken / "SKILL.md").write_text("---\nname: other-name\ndescription: x\n---\n")
    with agent.session(skilled) as s:
        names = [k["name"] for k in s.skills()]
        assert "broken" not in names and "other-name" not in names and len(names) == 3
        assert any("broken" in w for w in s.kernel.services["skills"].warnings)


class _CountingScandir:
    """``os.scandir`` that counts the entries it yields."""

    read = 0

    def __init__(self, it: Any) -> None:
        self.it = it

    def __enter__(self) -> _CountingScandir:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.it.close()

    def __iter__(self) -> Any:
        for entry in self.it:
            _CountingScandir.read += 1
            yield entry


def test_m2_a_skills_file_listing_reads_a_bounded_number_of_entries_depth_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The model can fill a skill's directory: the listing reads at most 4,096 entries in all, holding
    one descriptor per level (it read and sorted every entry of every directory, and held one
    descriptor per subdirectory seen: 4,500 here)."""
    from tools.skills.catalog import load_skill_path
    from tools.skills.tool import MAX_LISTED_FILES, MAX_SCANNED_ENTRIES, list_skill_files

    directory = write_skill(tmp_path, "crowded", "A skill with a crowded directory")
    for i in range(4500):
        (directory / f"d{i:04}").mkdir()
    (directory / "d0001" / "deep.md").write_text("x\\n")
    real_scandir = os.scandir
    monkeypatch.setattr(_CountingScandir, "read", 0)
    monkeypatch.setattr(os, "scandir", lambda fd: _CountingScandir(real_scandir(fd)))
    files = list_skill_files(load_skill_path(directory))
    assert _CountingScandir.read <= MAX_SCANNED_ENTRIES
    assert len(files) <= MAX_LISTED_FILES and files == sorted(files)
    refs = write_skill(tmp_path, "refs", "A skill with a few files")
    for sub in ("b", "a"):
        (refs / sub).mkdir()
        (refs / sub / "x.md").write_text("x\\n")
    (refs / "top.md").write_text("top\\n")
    assert list_skill_files(load_skill_path(refs)) == ["a/x.md", "b/x.md", "top.md"]
