"""``SessionOptions``: everything a host may set on a session; every field optional (SPEC R-1, K-3).

Only the JSON-safe part (policy, permission rules, budget, limits, settings) goes into a snapshot;
callables (confirmation handler, hooks, redactor) are re-supplied by the host on resume.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from kernel.budget import Budget
from kernel.hooks import PostToolHook, PreToolHook
from kernel.policy import PermissionPolicy
from kernel.redact import SecretRedactor

if TYPE_CHECKING:
    from kernel.projection import ToolResultTransformPolicyV1

DEFAULT_CONFIRMATION_TIMEOUT_MS = 30_000
DEFAULT_TOOL_TIMEOUT_MS = 600_000
DEFAULT_MAX_CONCURRENT_CALLS = 32
DEFAULT_TOOL_SLOTS = 16
MAX_NESTING_DEPTH = 8
# Session state key of the active skills ([{"name", "allowed_tools"}]), written by the `Skill` tool and
# read by the kernel's skill-restriction stage; JSON, so it travels in snapshots (issue 10).
ACTIVE_SKILLS_KEY = "active_skills"
# The skill tools themselves stay callable under a skill restriction (a model can switch skills).
SKILL_TOOL_NAMES = frozenset({"Skill", "search_skills"})


@dataclass(frozen=True, slots=True)
class ConfirmationRequest:
    """What a confirmation handler receives: one request object; it answers True (approve) or False."""

    session_id: str
    call_id: str
    tool: str
    args: Any
    origin: str
    reason: str


ConfirmationHandler = Callable[[ConfirmationRequest], bool | Awaitable[bool]]


@dataclass
class SessionOptions:
    """Everything a host may set on a session; every field optional (module docstring)."""

    tool_result_transform_policy: ToolResultTransformPolicyV1 | None = None
    permission_policy: PermissionPolicy | None = None
    confirmation: ConfirmationHandler | None = None
    confirmation_timeout_ms: int = DEFAULT_CONFIRMATION_TIMEOUT_MS
    pre_tool_hooks: Sequence[PreToolHook] = ()
    post_tool_hooks: Sequence[PostToolHook] = ()
    budget: Budget | None = None
    secret_redactor: SecretRedactor | None = None
    # Skill restriction (off by default, as in the reference): when set, only these tools pass.
    skill_allowed_tools: frozenset[str] | None = None
    tool_timeouts_ms: dict[str, int] = field(default_factory=dict)
    default_tool_timeout_ms: int = DEFAULT_TOOL_TIMEOUT_MS
    max_concurrent_calls: int = DEFAULT_MAX_CONCURRENT_CALLS
    tool_slots: dict[str, int] = field(default_factory=dict)
    default_tool_slots: int = DEFAULT_TOOL_SLOTS
    max_nesting_depth: int = MAX_NESTING_DEPTH
    # Tool runtime settings (read by tools through ctx.settings).
    bash_sandbox: Literal["auto", "always", "never"] = "auto"
    # Network tools (issue 12; docs/network.md). `net_allow` opens the SSRF guard for this session:
    # hosts (`intranet.corp`, `*.corp`) or addresses/CIDRs (`127.0.0.1`, `10.0.0.0/8`); None = the
    # process's A3S_NET_ALLOW (empty by default). For tests on loopback and private deployments only.
    net_allow: tuple[str, ...] | None = None
    # Who shares web_search's circuit breakers (SPEC W-3): this session; the run (this session and
    # the `task` children it delegated, whose ids are "<parent>.<task_id>"); or every session of the
    # fleet/process.
    search_breaker_scope: Literal["session", "run", "fleet"] = "session"
    # bash (issue 15): host environment variables a sandboxed/model-side command may see besides
    # the built-in allow-list; exact names, or a prefix ending in "*". Names only, never values.
    bash_env_passthrough: tuple[str, ...] = ()
    workspace_retrieval: bool = False
    artifact_store: Literal["file", "memory"] = "file"
    services: dict[str, Any] = field(default_factory=dict)
    # Dynamic workflows (issue 11): `dynamic_workflow` is always callable (session.workflow), and
    # shown to the model only when the host offers it.
    offer_dynamic_workflow: bool = False
    # --- MCP servers and skills (issue 10; docs/mcp-and-skills.md) ---
    # Servers in the .mcp.json shape ({"mcpServers": {name: {command, args, env, cwd} | {url, headers}}}),
    # over the process's A3S_MCP_CONFIG. Never snapshotted: a snapshot names servers, never commands.
    mcp_servers: Any = None
    # Also read <workspace>/.mcp.json. It starts programs: only for workspaces the user trusts.
    mcp_workspace_config: bool = False
    # The active skill's allowed-tools restrict model-side calls (off by default, as in the reference).
    enforce_skill_tool_restrictions: bool = False

    def settings_json(self) -> dict[str, Any]:
        return {
            "confirmation_timeout_ms": self.confirmation_timeout_ms,
            "skill_allowed_tools": sorted(self.skill_allowed_tools) if self.skill_allowed_tools else None,
            "tool_timeouts_ms": dict(self.tool_timeouts_ms),
            "default_tool_timeout_ms": self.default_tool_timeout_ms,
            "max_concurrent_calls": self.max_concurrent_calls,
            "tool_slots": dict(self.tool_slots),
            "default_tool_slots": self.default_tool_slots,
            "max_nesting_depth": self.max_nesting_depth,
            "bash_sandbox": self.bash_sandbox,
            "net_allow": list(self.net_allow) if self.net_allow is not None else None,
            "search_breaker_scope": self.search_breaker_scope,
            "bash_env_passthrough": list(self.bash_env_passthrough),
            "workspace_retrieval": self.workspace_retrieval,
            "artifact_store": self.artifact_store,
            "offer_dynamic_workflow": self.offer_dynamic_workflow,
            "enforce_skill_tool_restrictions": self.enforce_skill_tool_restrictions,
        }
