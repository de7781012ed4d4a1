"""The session tools ``Skill`` and ``search_skills`` (SPEC S-2, M-2; REFERENCE 4.16).

Both read the session's ``SkillCatalog`` (``ctx.services["skills"]``) and are registered only when
the session has skills (at build, or when ``session.register_skill`` adds the first one).

- ``Skill {"skill": name}`` returns the skill's instructions (plus the list of the other files in
  its directory) and makes it an **active skill** of the session: its ``allowed-tools`` are written
  to the session state (``ACTIVE_SKILLS_KEY``), where the kernel's skill-restriction stage reads
  them when ``SessionOptions.enforce_skill_tool_restrictions`` is on (K-3; off by default, as in
  the reference). ``{"skill": name, "path": "reference/forms.md"}`` returns one file of the skill's
  directory instead (a relative path below it, no symlinks, at most ``MAX_SKILL_FILE_BYTES``); it
  does not change the active skills. An unknown skill is ``not_found``.
- ``search_skills {"query", "limit"?}`` ranks the skills by BM25 over name and description.
"""

from __future__ import annotations

import os
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from kernel.beneath import O_LIST_DIR, O_PATH_DIR, Fd, open_subdir, read_regular_at
from kernel.capabilities import ToolCapabilities
from kernel.context import ToolContext
from kernel.errors import InvalidArgument, NotFound
from kernel.options import ACTIVE_SKILLS_KEY
from kernel.result import ToolResult
from kernel.spec import ToolSpec
from tools.skills.catalog import SKILL_FILE, SkillCatalog, SkillDoc

SKILLS_SERVICE = "skills"
MAX_SKILL_FILE_BYTES = 256 * 1024
MAX_LISTED_FILES = 64
MAX_LIST_DEPTH = 3
MAX_SCANNED_ENTRIES = 4096  # directory entries read per listing, all levels together
DEFAULT_SEARCH_LIMIT = 10
MAX_SEARCH_LIMIT = 50


class SkillParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    skill: str = Field(min_length=1, max_length=64, description="The skill's name (see search_skills).")
    path: str | None = Field(
        default=None,
        min_length=1,
        max_length=512,
        description="Optional: a file of the skill's directory to read instead of its instructions.",
    )


class SearchSkillsParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    query: str = Field(min_length=1, max_length=1000, description="What you want to do, in a few words.")
    limit: int = Field(default=DEFAULT_SEARCH_LIMIT, ge=1, le=MAX_SEARCH_LIMIT)


def _catalog(ctx: ToolContext) -> SkillCatalog:
    catalog: SkillCatalog = ctx.service(SKILLS_SERVICE)
    return catalog


def _find(catalog: SkillCatalog, name: str) -> SkillDoc:
    skill = catalog.get(name)
    if skill is None:
        names = catalog.names()
        shown = ", ".join(names[:20]) + (" …" if len(names) > 20 else "")
        raise NotFound(f"Unknown skill: {name}. Skills of this session: {shown or '(none)'}", path=name)
    return skill


async def run_skill(ctx: ToolContext, params: SkillParams) -> ToolResult:
    skill = _find(_catalog(ctx), params.skill)
    if params.path is not None:
        text = read_skill_file(skill, params.path)
        return ToolResult.success(
            "Skill", text, {"skill": {"name": skill.name, "path": params.path, "bytes": len(text.encode())}}
        )
    activate(ctx.session_state, skill)
    files = list_skill_files(skill)
    parts = [f"# Skill: {skill.name}", "", skill.instructions.strip()]
    if files:
        parts += ["", 'Files of this skill (read one with Skill {"skill": …, "path": …}):']
        parts += [f"- {f}" for f in files]
    if skill.allowed_tools:
        parts += ["", "Allowed tools while this skill is active: " + ", ".join(skill.allowed_tools)]
    meta = {
        "skill": {
            "name": skill.name,
            "description": skill.description,
            "allowed_tools": list(skill.allowed_tools),
            "source": skill.source,
            "files": files,
        }
    }
    return ToolResult.success("Skill", "\n".join(parts) + "\n", meta)


def activate(state: dict[str, Any], skill: SkillDoc) -> None:
    """Make ``skill`` active (JSON in the session state: it survives snapshots and reaches workers)."""
    active = [
        s for s in state.get(ACTIVE_SKILLS_KEY) or [] if isinstance(s, dict) and s.get("name") != skill.name
    ]
    active.append({"name": skill.name, "allowed_tools": list(skill.allowed_tools)})
    state[ACTIVE_SKILLS_KEY] = active


async def run_search(ctx: ToolContext, params: SearchSkillsParams) -> ToolResult:
    ranked = _catalog(ctx).search(params.query, params.limit)
    if not ranked:
        return ToolResult.success(
            "search_skills", f"No skill matches {params.query!r}.\n", {"skills": [], "query": params.query}
        )
    lines = [f"{i}. {s.name} ({score:.3f}): {s.description}" for i, (s, score) in enumerate(ranked, 1)]
    lines.append('Load one with Skill {"skill": name}.')
    meta = {
        "query": params.query,
        "skills": [
            {"name": s.name, "description": s.description, "score": round(score, 6)} for s, score in ranked
        ],
    }
    return ToolResult.success("search_skills", "\n".join(lines) + "\n", meta)


def _parts(rel: str) -> list[str]:
    if rel.startswith("/") or "\x00" in rel or "\\" in rel:
        raise InvalidArgument(f"path {rel!r} must be relative to the skill's directory")
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if not parts or any(p == ".." for p in parts):
        raise InvalidArgument(f"path {rel!r} must name a file inside the skill's directory")
    return parts


def read_skill_file(skill: SkillDoc, rel: str) -> str:
    """One file below the skill's directory: no ``..``, no symlink followed, regular files only."""
    parts = _parts(rel)
    if skill.directory is None:
        raise NotFound(f"skill {skill.name!r} has no directory of files", path=rel)
    try:
        current = Fd(os.open(skill.directory, O_PATH_DIR))
        try:
            for part in parts[:-1]:
                nxt = open_subdir(current.fd, part)
                current.close()
                current = nxt
            data = read_regular_at(current.fd, parts[-1], MAX_SKILL_FILE_BYTES)
        finally:
            current.close()
    except ValueError as exc:  # not a regular file, or too large
        raise InvalidArgument(f"skill {skill.name!r}: {rel}: {exc}") from None
    except OSError as exc:
        raise NotFound(
            f"skill {skill.name!r}: {rel} is not a readable file of its directory ({exc.strerror or exc})",
            path=rel,
        ) from None
    if data is None:
        raise NotFound(f"skill {skill.name!r} has no file {rel}", path=rel)
    return data.decode("utf-8", "replace")


def list_skill_files(skill: SkillDoc) -> list[str]:
    """Relative paths of the files in the skill's directory (not SKILL.md; no dotfiles), sorted.

    Depth-first, at most ``MAX_LIST_DEPTH`` levels: one directory descriptor open per level, never
    one per subdirectory seen. At most ``MAX_SCANNED_ENTRIES`` directory entries are read in all
    and ``MAX_LISTED_FILES`` files listed: the model can write a skill's directory, and a million
    entries there made every ``Skill`` call read (and sort) each of them."""
    if skill.directory is None:
        return []
    try:
        root = Fd(os.open(skill.directory, O_PATH_DIR))
    except OSError:
        return []
    out: list[str] = []
    budget = [MAX_SCANNED_ENTRIES]
    try:
        _list_into(root, "", 0, out, budget)
    finally:
        root.close()
    return sorted(out)


def _list_into(directory: Fd, prefix: str, depth: int, out: list[str], budget: list[int]) -> None:
    entries: list[tuple[str, bool, bool]] = []  # (name, is a directory, is a regular file)
    try:
        listing = os.open(".", O_LIST_DIR, dir_fd=directory.fd)
    except OSError:
        return
    try:
        with os.scandir(listing) as scan:
            entry_iter = iter(scan)
            while budget[0] > 0:  # checked before reading: the budget is what is read
                entry = next(entry_iter, None)
                if entry is None:
                    break
                budget[0] -= 1
                if entry.name.startswith(".") or (not prefix and entry.name == SKILL_FILE):
                    continue
                entries.append(
                    (entry.name, entry.is_dir(follow_symlinks=False), entry.is_file(follow_symlinks=False))
                )
    except OSError:
        pass
    finally:
        os.close(listing)
    for name, is_dir, is_file in sorted(entries):
        if len(out) >= MAX_LISTED_FILES:
            return
        if is_file:
            out.append(f"{prefix}{name}")
        elif is_dir and depth + 1 < MAX_LIST_DEPTH and budget[0] > 0:
            try:
                sub = open_subdir(directory.fd, name)
            except OSError:
                continue
            try:
                _list_into(sub, f"{prefix}{name}/", depth + 1, out, budget)
            finally:
                sub.close()


SKILL_TOOL = ToolSpec(
    name="Skill",
    description=(
        "Load a skill: its instructions for a kind of task, written by the user for this workspace. "
        "Call search_skills first to find one. Optional path reads one file of the skill's directory."
    ),
    params=SkillParams,
    run=run_skill,
    capabilities=lambda _p: ToolCapabilities(idempotent=True),
    examples=({"skill": "release-notes"},),
)

SEARCH_SKILLS_TOOL = ToolSpec(
    name="search_skills",
    description="Find the skills of this session that fit a task (ranked by BM25 over name and description).",
    params=SearchSkillsParams,
    run=run_search,
    capabilities=lambda _p: ToolCapabilities.parallel_safe_read(8),
    examples=({"query": "write release notes"},),
)

SKILL_TOOLS = (SKILL_TOOL, SEARCH_SKILLS_TOOL)
