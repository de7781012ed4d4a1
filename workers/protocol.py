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
                             last heartbeat of a run that uses it).

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
