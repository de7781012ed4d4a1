"""Skills in the Agent Skills format and the ``Skill`` / ``search_skills`` session tools (SPEC M-2).

``catalog`` parses ``SKILL.md`` (front matter + instructions), discovers a workspace's skills and
ranks them; ``tool`` holds the two tools. docs/mcp-and-skills.md describes the format and rules.
"""

from __future__ import annotations

from tools.skills.catalog import (
    SkillCatalog,
    SkillDoc,
    discover_workspace_skills,
    load_skill_path,
    make_skill,
    parse_skill_md,
)
from tools.skills.tool import SKILL_TOOLS, SKILLS_SERVICE

__all__ = [
    "SKILLS_SERVICE",
    "SKILL_TOOLS",
    "SkillCatalog",
    "SkillDoc",
    "discover_workspace_skills",
    "load_skill_path",
    "make_skill",
    "parse_skill_md",
]
