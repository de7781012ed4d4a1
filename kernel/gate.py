"""The policy stages of K-3 — skill restriction → permission policy → confirmation — for the
governed (model-side) origins; trusted host-direct calls and trusted built-in nesting pass through.

A refusal emits ``permission_denied`` and raises ``PermissionDenied``; a confirmation that times
out, fails or is declined raises ``ConfirmationRejected`` (REFERENCE 4.16; docs/kernel.md). Rules are
matched on the subjects of a call: every simple command of a bash line, a path in its lexical and
its physical (symlink-resolved) workspace-relative form, or the literal argument.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, NoReturn

from kernel.errors import ConfirmationRejected, PermissionDenied
from kernel.hooks import call_maybe_async, freeze
from kernel.invocation import CONTAINED, Invocation
from kernel.options import ACTIVE_SKILLS_KEY, SKILL_TOOL_NAMES, ConfirmationRequest, SessionOptions
from kernel.policy import Allow, Ask, Deny, PermissionPolicy
from kernel.shell_commands import Subject, command_subjects_or_opaque
from kernel.spec import ToolSpec
from kernel.workspace import Workspace

log = logging.getLogger(__name__)
# How the gate records what it decided: the kernel's event emitter (type, call, label, data).
Emit = Callable[[str, Invocation, str, dict[str, Any]], None]


class PolicyGate:
    """One session's policy stages; ``check`` returns when the call may go on, or raises."""

    def __init__(
        self,
        *,
        session_id: str,
        options: SessionOptions,
        policy: PermissionPolicy,
        workspace: Workspace,
        session_state: dict[str, Any],
        emit: Emit,
    ) -> None:
        self.session_id = session_id
        self.options = options
        self.policy = policy
        self.workspace = workspace
        self.session_state = session_state
        self._emit = emit
        self._skill_policies: dict[tuple[str, ...], PermissionPolicy] = {}

    async def check(self, inv: Invocation, spec: ToolSpec, params: Any, label: str) -> None:
        """Skill restriction → permission policy → confirmation (model-side origins only)."""
        if not inv.governed:
            return
        allowed = self.options.skill_allowed_tools
        if allowed is not None and inv.name not in allowed:
            self._deny(
                inv, label, "skill_restriction", f"Tool '{inv.name}' is not allowed by the active skill"
            )
        if self.options.enforce_skill_tool_restrictions and inv.name not in SKILL_TOOL_NAMES:
            self._active_skill_gate(inv, spec, params, label)
        subjects = self._subjects(spec, params) if self.policy.rules_for(inv.name) else None
        read_only = self.policy.allow_read_only and spec.capabilities(params).read_only
        decision = self.policy.decide(inv.name, subjects, read_only=read_only)
        if isinstance(decision, Deny):
            self._deny(inv, label, "permission_policy", f"Permission denied: {decision.reason}.")
        needs_confirmation = isinstance(decision, Ask) or spec.requires_confirmation(params)
        if isinstance(decision, Allow) and not needs_confirmation:
            return
        reason = decision.reason if isinstance(decision, Ask) else "the tool asks for confirmation"
        await self._confirm(inv, label, reason)

    def _active_skill_gate(self, inv: Invocation, spec: ToolSpec, params: Any, label: str) -> None:
        """K-3 skill restriction (REFERENCE 4.16): while active skills list ``allowed-tools``, a call
        must be allowed by at least one of them (rules matched like permission allow rules)."""
        active = self.session_state.get(ACTIVE_SKILLS_KEY)
        if not isinstance(active, list):
            return
        restricting = [
            (str(s.get("name")), tuple(s["allowed_tools"]))
            for s in active
            if isinstance(s, dict) and isinstance(s.get("allowed_tools"), list) and s["allowed_tools"]
        ]
        if not restricting:
            return
        subjects: list[Subject] | None = None
        for _name, rules in restricting:
            policy = self._skill_policies.get(rules)
            if policy is None:
                policy = self._skill_policies[rules] = PermissionPolicy(allow=rules)
            if not policy.rules_for(inv.name):
                continue
            if subjects is None:
                subjects = self._subjects(spec, params)
            if isinstance(policy.decide(inv.name, subjects), Allow):
                return
        names = ", ".join(name for name, _ in restricting)
        self._deny(
            inv,
            label,
            "skill_restriction",
            f"Tool '{inv.name}' is not allowed by the active skill(s) {names} (their allowed-tools)",
        )

    def _subjects(self, spec: ToolSpec, params: Any) -> list[Subject] | None:
        """What the rules are matched against (see ``ToolSpec.subject_kind`` and docs/kernel.md)."""
        raw = spec.subject(params)
        if raw is None:
            return None
        items = [raw] if isinstance(raw, str) else list(raw)
        if spec.subject_kind == "command":
            return [s for line in items for s in command_subjects_or_opaque(line)]
        if spec.subject_kind == "path":
            return [Subject.literal(form) for path in items for form in self._path_forms(path)]
        return [Subject.literal(item) for item in items]

    def _path_forms(self, path: str) -> list[str]:
        """A path as written resolves (or is refused with the resolver's typed error): its lexical
        workspace-relative form and the physical one symlinks lead to ('.' is the root)."""
        ws = self.workspace
        forms = [ws.normalize(path) or "."]
        resolve = getattr(ws, "resolve", None)
        root = ws.root
        if callable(resolve) and root is not None:
            real = resolve(path)
            physical = "." if real == root else real.relative_to(root).as_posix()
            if physical not in forms:
                forms.append(physical)
        return forms

    async def _confirm(self, inv: Invocation, label: str, reason: str) -> None:
        handler = self.options.confirmation
        if handler is None:
            self._deny(
                inv,
                label,
                "missing_confirmation_manager",
                f"Permission denied: Tool '{inv.name}' needs confirmation ({reason}) and no confirmation handler is configured.",
            )
        request = ConfirmationRequest(self.session_id, inv.call_id, inv.name, freeze(inv.args), label, reason)
        self._emit("confirmation_request", inv, label, {"reason": reason})
        timeout_s = self.options.confirmation_timeout_ms / 1000
        try:
            async with asyncio.timeout(timeout_s):
                approved = await call_maybe_async(handler, request)
        except TimeoutError:
            raise ConfirmationRejected(
                f"Confirmation for tool '{inv.name}' timed out after {self.options.confirmation_timeout_ms}ms; denied",
                reason="timeout",
            ) from None
        except CONTAINED as exc:
            log.error("confirmation handler failed for %s", inv.name, exc_info=exc)
            raise ConfirmationRejected(
                f"Confirmation for tool '{inv.name}' failed ({type(exc).__name__}); denied",
                reason="handler_error",
            ) from None
        if approved is not True:
            raise ConfirmationRejected(f"Tool '{inv.name}' was rejected by the user", reason="rejected")

    def _deny(self, inv: Invocation, label: str, reason: str, message: str) -> NoReturn:
        self._emit("permission_denied", inv, label, {"reason": reason, "message": message})
        raise PermissionDenied(message, reason=reason)
