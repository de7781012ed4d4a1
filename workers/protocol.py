"""The wire contract between the orchestrator and the workers (SPEC F-1, F-5; CONVENTIONS §8).

One job kind crosses Celery: ``a3s.tool``, whose only argument is a plain JSON *envelope*
(``JobEnvelope``): the session snapshot — by reference (``snapshot_digest``) or inline
(``snapshot``), at least one of them — the tool call, the run id, the branch index, a description
for Flower, an idempotency key and the origin.

The snapshot travels once per run, not once per job: the orchestrator stores its canonical JSON
(``snapshot_json``) under the content-addressed key ``snapshot:{digest}`` when it registers the
run, refreshes its TTL with the run's heartbeat, and each envelope names only the digest. A worker
caches restored sessions by digest and reads the key only on a miss; whatever it restores — read
from Redis or inline — must hash to the digest the envelope names (``snapshot_digest(...)``), so a
cached session always is exactly the snapshot the digest names. An envelope with the snapshot
inline and no digest (older orchestrators, tests) still works: the worker digests it itself. Only ``host_direct`` (trusted) and
``agent`` (full model-side policy) may come from a message: the nested origins are built by the
kernel itself, never by whoever can write to the broker (K-1, K-2).

Redis keys (all under ``KEY_PREFIX``) that both sides agree on:

- ``run:{run_id}``           hash: the orchestrator's live run (session, total, done, started_ms);
                             its existence tells a worker the run still listens and tells the
                             orchestrator that Redis has not lost the run's state;
- ``run:{run_id}:results``   list: one ``ResultItem`` per finished job, pushed by the worker before
                             it acknowledges the message (the orchestrator's fan-in reads it);
- ``runs``                   sorted set of live run ids (score: last heartbeat, ms) for ``status``;
- ``cancel:{task_id}``       a branch was cancelled: its job must not start, or must stop;
- ``deliveries:{task_id}``   how many times the job was delivered (the poison-job guard);
- ``snapshot:{digest}``      a session snapshot's canonical JSON (content-addressed, shared by
                             every run of the same snapshot; expires the orchestrator's ``RUN_KEY_TTL_MS`` after the
                             last heartbeat of a run that uses it);
- ``workers``                sorted set: every live worker's name (score: its last presence beat, ms);
- ``worker:{name}``          a worker's presence record (JSON: queues, pid, the delivery tags of the
                             messages it holds), refreshed every beat (``workers.presence``);
- ``consumers:{queue}``      sorted set: the workers consuming ``queue`` (score: last beat, ms) — what
                             a dispatcher checks before it sends a run's jobs.

Results are pushed with ``PUBLISH_LUA``: only while the run hash exists (a worker must never
resurrect a run whose state Redis lost), and a branch index is counted as done once.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

TOOL_TASK = "a3s.tool"
KEY_PREFIX = "a3s:fleet"
MAX_DESCRIPTION_CHARS = 500
MAX_BRANCH_INDEX = 100_000
ALLOWED_ORIGINS = ("host_direct", "agent")
DIGEST_PATTERN = r"^[0-9a-f]{64}$"

Origin = Literal["host_direct", "agent"]


class JobEnvelope(BaseModel):
    """What one ``a3s.tool`` message carries. Plain JSON; unknown fields are rejected."""

    model_config = ConfigDict(extra="forbid")

    snapshot: dict[str, Any] | None = None
    snapshot_digest: str | None = Field(default=None, pattern=DIGEST_PATTERN)
    tool: str = Field(min_length=1, max_length=128)
    args: dict[str, Any] = Field(default_factory=dict)
    run_id: str = Field(min_length=1, max_length=200)
    branch_index: int = Field(ge=0, le=MAX_BRANCH_INDEX)
    description: str = Field(default="", max_length=MAX_DESCRIPTION_CHARS)
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=300)
    origin: Origin = "host_direct"
    # All the call may spend of its session's budget here (``kernel.budget.Allotment``); the
    # session holds it. None: an older orchestrator, no allotment of its own.
    allotment: dict[str, int | None] | None = None

    @model_validator(mode="after")
    def _names_a_snapshot(self) -> JobEnvelope:
        if self.snapshot is None and self.snapshot_digest is None:
            raise ValueError("an envelope needs snapshot_digest or snapshot")
        return self

    def query_digest(self) -> str:
        """Digest of *what* is asked (tool, args, origin): a step result is only recovered for the
        same query (F-3), so a reused idempotency key with other arguments never matches."""
        body = json.dumps(
            [self.tool, self.args, self.origin], sort_keys=True, separators=(",", ":"), default=str
        )
        return hashlib.sha256(body.encode()).hexdigest()[:32]


def snapshot_json(snapshot: dict[str, Any]) -> str:
    """The canonical JSON of a snapshot: what is stored under ``snapshot:{digest}`` and hashed."""
    return json.dumps(snapshot, sort_keys=True, separators=(",", ":"), default=str)


def snapshot_digest(body: str) -> str:
    """sha256 (hex) of a snapshot's canonical JSON (``snapshot_json``)."""
    return hashlib.sha256(body.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class FleetKeys:
    prefix: str = KEY_PREFIX

    def run(self, run_id: str) -> str:
        return f"{self.prefix}:run:{run_id}"

    def results(self, run_id: str) -> str:
        return f"{self.prefix}:run:{run_id}:results"

    def runs(self) -> str:
        return f"{self.prefix}:runs"

    def cancel(self, task_id: str) -> str:
        return f"{self.prefix}:cancel:{task_id}"

    def deliveries(self, task_id: str) -> str:
        return f"{self.prefix}:deliveries:{task_id}"

    def snapshot(self, digest: str) -> str:
        return f"{self.prefix}:snapshot:{digest}"

    def workers(self) -> str:
        return f"{self.prefix}:workers"

    def worker(self, name: str) -> str:
        return f"{self.prefix}:worker:{name}"

    def consumers(self, queue: str) -> str:
        return f"{self.prefix}:consumers:{queue}"


def result_item(index: int, task_id: str, delivery: int, result: dict[str, Any]) -> str:
    return json.dumps(
        {"index": index, "task_id": task_id, "delivery": delivery, "result": result},
        separators=(",", ":"),
        default=str,
    )


# KEYS: run hash, results list. ARGV: item JSON, results TTL ms, branch index. Returns 1 if pushed.
PUBLISH_LUA = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('RPUSH', KEYS[2], ARGV[1])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
if redis.call('HSETNX', KEYS[1], 'd:' .. ARGV[3], 1) == 1 then
  redis.call('HINCRBY', KEYS[1], 'done', 1)
end
-- A copy beside the done flag: the orchestrator's fan-in recovers a result whose list item it
-- never received (a popped item lost with a dropped connection), instead of waiting forever.
redis.call('HSET', KEYS[1], 'r:' .. ARGV[3], ARGV[1])
return 1
"""

RESULTS_TTL_MS = 3600_000  # results of a run nobody reads any more expire


# ---- how a job is named for people (SPEC F-5) -------------------------------------------------------

MAX_TITLE_CHARS = 100
MAX_LABEL_VALUE_CHARS = 120


@dataclass(frozen=True, slots=True)
class JobLabel:
    """How Flower, ``a3s-fleet status`` and the worker's log name one job.

    ``name`` is the Celery ``shadow`` name — what Flower's task list shows in its Name column, from
    the client's ``task-sent`` event as well as from the worker's events; ``kwargsrepr`` is the JSON
    Flower shows as the job's kwargs (the envelope itself, with the snapshot digest, is not printed).
    """

    name: str
    kwargsrepr: str

    def send_options(self) -> dict[str, str]:
        """The keyword arguments of ``app.send_task`` that carry the label."""
        return {"shadow": self.name, "kwargsrepr": self.kwargsrepr, "argsrepr": "()"}


def job_label(
    run_id: str,
    slot: int | str,
    description: str = "",
    *,
    task: str = TOOL_TASK,
    tool: str | None = None,
    agent: str | None = None,
    **fields: Any,
) -> JobLabel:
    """The one naming rule of every fleet job (fan-out branches, direct calls, workflow steps, and
    any other job kind that comes later — e.g. an agent's child run names its ``agent``).

    ``name`` reads ``<task>:<title> [<run_id>:<slot>]``: the title is what a person recognises — the
    branch's description (a verify plan's ``kind: id``, a workflow's ``step <id>: <tool>``), prefixed
    with the agent for an agent's child run, or the tool when there is no description — and the
    bracket ties the job to its run (the parent run of a fan-out) and its branch index or step id.
    ``kwargsrepr`` carries the same facts as JSON: ``run_id``, ``branch_index`` (an int slot) or
    ``step_id`` (a string slot), ``description``, ``tool``, ``agent`` and any extra ``fields``
    (e.g. ``parent_run_id``); long values are cut, ``None`` values dropped.
    """
    head = description.strip() or tool or task
    if agent:
        head = f"{agent}: {head}"
    title = " ".join(head.split())
    if len(title) > MAX_TITLE_CHARS:
        title = title[: MAX_TITLE_CHARS - 1] + "…"
    slot_text = str(slot)[:MAX_LABEL_VALUE_CHARS]
    label: dict[str, Any] = {"run_id": run_id}
    if isinstance(slot, int):
        label["branch_index"] = slot
    else:
        label["step_id"] = slot_text
    label.update({"description": description, "tool": tool, "agent": agent, **fields})
    clean = {
        k: (v[:MAX_LABEL_VALUE_CHARS] if isinstance(v, str) else v) for k, v in label.items() if v is not None
    }
    return JobLabel(
        f"{task}:{title} [{run_id}:{slot_text}]", json.dumps(clean, ensure_ascii=False, default=str)
    )
