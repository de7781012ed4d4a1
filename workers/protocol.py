"""The wire contract between the orchestrator and the workers (SPEC F-1, F-5; CONVENTIONS §8).

One job kind crosses Celery: ``a3s.tool``, whose only argument is a plain JSON *envelope*
(``JobEnvelope``): the session snapshot, the tool call, the run id, the branch index, a
description for Flower, an idempotency key and the origin. Only ``host_direct`` (trusted) and
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
- ``deliveries:{task_id}``   how many times the job was delivered (the poison-job guard).

Results are pushed with ``PUBLISH_LUA``: only while the run hash exists (a worker must never
resurrect a run whose state Redis lost), and a branch index is counted as done once.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

TOOL_TASK = "a3s.tool"
KEY_PREFIX = "a3s:fleet"
MAX_DESCRIPTION_CHARS = 500
MAX_BRANCH_INDEX = 100_000
ALLOWED_ORIGINS = ("host_direct", "agent")

Origin = Literal["host_direct", "agent"]


class JobEnvelope(BaseModel):
    """What one ``a3s.tool`` message carries. Plain JSON; unknown fields are rejected."""

    model_config = ConfigDict(extra="forbid")

    snapshot: dict[str, Any]
    tool: str = Field(min_length=1, max_length=128)
    args: dict[str, Any] = Field(default_factory=dict)
    run_id: str = Field(min_length=1, max_length=200)
    branch_index: int = Field(ge=0, le=MAX_BRANCH_INDEX)
    description: str = Field(default="", max_length=MAX_DESCRIPTION_CHARS)
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=300)
    origin: Origin = "host_direct"

    def query_digest(self) -> str:
        """Digest of *what* is asked (tool, args, origin): a step result is only recovered for the
        same query (F-3), so a reused idempotency key with other arguments never matches."""
        body = json.dumps(
            [self.tool, self.args, self.origin], sort_keys=True, separators=(",", ":"), default=str
        )
        return hashlib.sha256(body.encode()).hexdigest()[:32]


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
