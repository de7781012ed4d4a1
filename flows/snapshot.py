"""Session snapshots (SPEC R-5): versioned JSON with enough state to rebuild the session elsewhere.

The transform policy is pinned: resuming without a policy inherits the snapshot's; an explicitly
different policy is rejected; a snapshot whose recorded binding no longer matches its own policy
(drift) is rejected too. Callables (hooks, confirmation handler) are not data: the host re-supplies
them on resume.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from kernel.errors import InvalidArgument

if TYPE_CHECKING:
    from kernel.kernel import Kernel

SNAPSHOT_SCHEMA = "a3s.fleet.session-snapshot.v1"


def json_safe(state: dict[str, Any]) -> dict[str, Any]:
    """The entries of ``state`` that survive JSON (objects such as indexes stay behind)."""
    out: dict[str, Any] = {}
    for key, value in state.items():
        try:
            json.dumps(value)
        except (TypeError, ValueError):
            continue
        out[key] = value
    return out


def build_snapshot(kernel: Kernel, workspace_name: str) -> dict[str, Any]:
    policy = kernel.projector.policy  # type: ignore[attr-defined]
    return {
        "schema": SNAPSHOT_SCHEMA,
        "session_id": kernel.session_id,
        "workspace": workspace_name,
        "created_ms": kernel.started_ms,
        "config": {
            "tool_result_transform_policy": policy.to_json(),
            "permission_policy": kernel.policy.to_json(),
            "budget": kernel.budget.budget.to_json(),
            "settings": kernel.options.settings_json(),
        },
        "transform_binding": policy.binding(),
        "budget_used": kernel.budget.usage(),
        "session_state": json_safe(kernel.session_state),
        "host_tools": [n for n in kernel.registry.names() if not kernel.registry.get(n).builtin],  # type: ignore[union-attr]
    }


def check_snapshot(snapshot: dict[str, Any]) -> None:
    if not isinstance(snapshot, dict) or snapshot.get("schema") != SNAPSHOT_SCHEMA:
        raise InvalidArgument(f"not a session snapshot (expected schema {SNAPSHOT_SCHEMA})")
    for key in ("session_id", "workspace", "config", "transform_binding"):
        if key not in snapshot:
            raise InvalidArgument(f"session snapshot is missing {key!r}")
