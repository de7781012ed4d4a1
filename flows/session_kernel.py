"""Assembling a session's kernel from a surface: shared by ``SessionFactory.build`` and the CLI's
one-call path (``orchestrator.cli_direct``), so both get the same kernel — transform policy pinned
and validated, artifact store, event log, clock, change compaction — and every call goes through the
one ``Kernel.invoke`` (K-3). Light on purpose: kernel modules only, no tool, flow or SDK import
(CLI start-up, issue 13 item 7).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kernel.artifacts import ArtifactStore, MemoryArtifactStore
from kernel.clock import IdFactory, SystemClock
from kernel.events import EventSink, FanoutSink, MemoryEventSink
from kernel.kernel import Kernel
from kernel.options import SessionOptions
from kernel.projection import Projector, ToolResultTransformPolicyV1, compact_change_metadata
from kernel.registry import Registry
from kernel.statedir import ensure_state_dir
from kernel.workspace import Workspace


def checked_policy(options: SessionOptions) -> ToolResultTransformPolicyV1:
    """The session's pinned transform policy (conservative unless the options name one), validated."""
    policy = options.tool_result_transform_policy or ToolResultTransformPolicyV1.conservative()
    policy.validate_policy()
    return policy


def artifact_store(workspace: Workspace, options: SessionOptions) -> ArtifactStore:
    root = workspace.root
    if root is not None and "write" in workspace.capabilities:
        # The host's state directory exists before any sandboxed command runs (the sandbox binds it
        # read-only) and is never followed through a symlink (kernel/statedir.py).
        ensure_state_dir(root)
        if options.artifact_store == "file":
            from kernel.artifact_files import FileArtifactStore

            return FileArtifactStore.for_workspace(root)
    return MemoryArtifactStore()


def assemble_kernel(
    workspace: Workspace,
    options: SessionOptions,
    registry: Registry,
    *,
    session_id: str,
    ids: IdFactory,
    sinks: Sequence[EventSink] = (),
    services: dict[str, Any] | None = None,
    session_state: dict[str, Any] | None = None,
    budget_used: dict[str, Any] | None = None,
    started_ms: int | None = None,
    policy: ToolResultTransformPolicyV1 | None = None,
    artifacts: ArtifactStore | None = None,
) -> tuple[Kernel, MemoryEventSink]:
    """The kernel of one session on ``workspace`` with ``registry`` as its surface, and its in-memory
    event log (``sinks`` and ``options.services["event_sink"]`` receive the events too). ``policy``
    and ``artifacts`` come from ``checked_policy``/``artifact_store`` when a caller made them before
    starting anything that would need undoing."""
    policy = policy if policy is not None else checked_policy(options)
    artifacts = artifacts if artifacts is not None else artifact_store(workspace, options)
    memory = MemoryEventSink()
    all_sinks: list[EventSink] = [*sinks, memory]
    if "event_sink" in options.services:
        all_sinks.append(options.services["event_sink"])
    kernel = Kernel(
        session_id=session_id,
        registry=registry,
        workspace=workspace,
        options=options,
        projector=Projector(policy, artifacts),
        artifacts=artifacts,
        sink=FanoutSink(*all_sinks) if len(all_sinks) > 1 else memory,
        clock=SystemClock(),
        ids=ids,
        compact_change=compact_change_metadata,
        services=services,
        session_state=session_state,
        budget_used=budget_used,
        started_ms=started_ms,
    )
    return kernel, memory
