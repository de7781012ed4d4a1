"""The wire contract of ``a3s.agent`` jobs: agent runs on the fleet (SPEC A-1, A-4, X-3, F-1, F-5; issue 9).

One job kind, ``a3s.agent``, whose only argument is a plain JSON ``AgentEnvelope``. Its ``kind``:

- ``run`` — an agent run from a prompt (a batch job's session turn): ``snapshot`` (or its digest)
  is the run's session, ``run`` what it is asked (prompt, agent, max_steps, output_schema, model);
- ``child`` — one ``task`` child: ``snapshot_digest`` names the *parent's* session (workspace,
  rules, limits), ``child`` is the planned ``ChildSpec`` (agent definition resolved, budget share,
  model), ``child_session_id`` the child's own session;
- ``resume`` — the continuation of a suspended run: ``sid`` names the suspension
  (``workers.state.suspend``), which holds everything else;
- ``deadline`` — a suspended ``task`` call's ``timeout_ms`` passed: settle group ``group`` of ``sid``.

``report`` says where a finished run's result goes: ``list`` — the run list of an orchestrator that
waits (``workers.protocol.PUBLISH_LUA``: the batch command, or an SDK session's ``task`` fan-in);
``fanin`` — a suspended parent's fan-in (may trigger its continuation); ``event`` — a background
child: a ``subagent_end`` event on the parent's session stream and a result key the SDK reads.

Every run segment is one job; its idempotency key is ``(agent_run_id, query digest, seg:<n>)`` in the
step store (F-3), so a redelivered segment recovers its outcome instead of running again.
``cancel_keys`` are task ids whose cancel flag also stops the job (a batch job cancelled while it is
suspended stops its children and its continuation). A model is named, never an endpoint or a key:
each worker calls its models with its own environment (A-1).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from workers.protocol import DIGEST_PATTERN, KEY_PREFIX

AGENT_TASK = "a3s.agent"
MAX_ID_CHARS = 300
MAX_CANCEL_KEYS = 8
TASK_RESULT_TTL_S = 7 * 24 * 3600  # a background child's result waits this long for the SDK

Kind = Literal["run", "child", "resume", "deadline"]


class ListTarget(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["list"] = "list"
    run_id: str = Field(min_length=1, max_length=MAX_ID_CHARS)
    index: int = Field(ge=0)


class FanInTarget(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["fanin"] = "fanin"
    sid: str = Field(min_length=1, max_length=MAX_ID_CHARS)
    group: int = Field(ge=0, le=1000)
    index: int = Field(ge=0, le=1000)


class EventTarget(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["event"] = "event"
    session_id: str = Field(min_length=1, max_length=MAX_ID_CHARS)
    call_id: str = Field(default="", max_length=MAX_ID_CHARS)


Target = ListTarget | FanInTarget | EventTarget


class RunRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    prompt: str = Field(min_length=1)
    agent: str | None = None
    max_steps: int | None = Field(default=None, ge=1, le=1000)
    output_schema: dict[str, Any] | None = None
    model: str | None = None


class AgentEnvelope(BaseModel):
    """What one ``a3s.agent`` message carries. Plain JSON; unknown fields are rejected."""

    model_config = ConfigDict(extra="forbid")

    kind: Kind
    agent_run_id: str = Field(min_length=1, max_length=MAX_ID_CHARS)
    segment: int = Field(default=0, ge=0, le=10_000)
    snapshot: dict[str, Any] | None = None
    snapshot_digest: str | None = Field(default=None, pattern=DIGEST_PATTERN)
    run: RunRequest | None = None
    child: dict[str, Any] | None = None
    child_session_id: str | None = Field(default=None, max_length=MAX_ID_CHARS)
    sid: str | None = Field(default=None, max_length=MAX_ID_CHARS)
    group: int | None = Field(default=None, ge=0, le=1000)
    report: Target | None = Field(default=None, discriminator="type")
    cancel_keys: list[str] = Field(default_factory=list, max_length=MAX_CANCEL_KEYS)
    description: str = Field(default="", max_length=500)

    @model_validator(mode="after")
    def _fields_of_kind(self) -> AgentEnvelope:
        need: dict[str, tuple[str, ...]] = {
            "run": ("run",),
            "child": ("child", "child_session_id", "snapshot_digest"),
            "resume": ("sid",),
            "deadline": ("sid", "group"),
        }
        missing = [f for f in need[self.kind] if getattr(self, f) is None]
        if missing:
            raise ValueError(f"a {self.kind!r} envelope needs {', '.join(missing)}")
        if self.kind == "run" and self.snapshot is None and self.snapshot_digest is None:
            raise ValueError("a 'run' envelope needs snapshot or snapshot_digest")
        return self

    def query_digest(self) -> str:
        """What the segment is asked (F-3: a reused id with another question never recovers)."""
        body = json.dumps(
            [
                self.kind,
                self.segment,
                self.sid,
                self.snapshot_digest,
                self.run and self.run.model_dump(),
                self.child and self.child.get("task_id"),
            ],
            sort_keys=True,
            separators=(",", ":"),
            default=str,
        )
        return hashlib.sha256(body.encode()).hexdigest()[:32]


def suspension_id(agent_run_id: str, segment: int) -> str:
    """A run's segment ``n`` suspends under this id (deterministic: a redelivery finds it)."""
    return f"{agent_run_id}:s{segment}"


def child_task_id(sid: str, group: int, index: int) -> str:
    """The Celery task id (and agent run id) of child ``index`` of group ``group`` of ``sid``."""
    return f"{sid}:g{group}:c{index}"


def continuation_task_id(agent_run_id: str, segment: int) -> str:
    return f"{agent_run_id}:s{segment}:resume"


def task_result_key(task_id: str, prefix: str = KEY_PREFIX) -> str:
    """Where a background child's ``TaskResult`` waits for the SDK (``session.task_result``)."""
    return f"{prefix}:task:{task_id}"
