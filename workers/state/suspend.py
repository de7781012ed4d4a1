"""Suspended agent runs and their children's fan-in, on Redis (SPEC A-4, X-3, F-3; issue 9 item 3).

An agent run that is a fleet job and calls ``task`` does not wait for its children: its job stores
the run's *suspension* and ends, freeing its worker slot. Its children are jobs of their own; each
reports its result here, and the report that completes the fan-in says so (``trigger``) — that job
publishes the parent's *continuation* job, which resumes the run with every child's result. So one
worker with ``--concurrency 1`` finishes a run whose children fan out.

One hash per suspension, ``{prefix}:susp:{sid}``:

- ``state`` — the JSON the continuation needs (the parent's snapshot digest, its pending calls, …),
  written once, before any child is published (``SETNX`` semantics: a redelivered parent job finds
  the suspension it already stored and publishes the same children again instead of re-running);
- per *group* ``j`` (one per pending ``task`` call of the turn): ``g{j}:total``, ``g{j}:need``,
  ``g{j}:partial``, the counters ``g{j}:ok`` / ``g{j}:failed`` and ``g{j}:settled`` (``done``,
  ``failed``, ``enough`` or ``timed_out``); ``groups_left`` counts the groups not yet settled;
- ``r:{j}:{i}`` — child ``i``'s result, stored once (``HSETNX``): a child redelivered after its worker
  died reports the same result again, and it is counted once. A report that arrives after its group
  settled is not stored: the continuation sees exactly the results that decided the group;
- ``cont_sent`` — set by whoever published the continuation. Until it is set every report (and the
  group deadline) answers ``trigger`` once the fan-in is complete, so a job killed between the report
  and the publish leaves the trigger to its redelivery; duplicate continuation messages are absorbed
  by the continuation's step claim (F-3: one segment runs once).

A group settles when all its children reported; without ``partial`` at the first failure; with it
as soon as ``need`` children succeeded, or when so many failed that ``need`` can no longer be met;
or when its deadline job runs first (``timed_out``). Every write refreshes the hash's TTL.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import redis

from kernel.errors import InvalidArgument, Transport
from workers.state.redis_client import redis_errors

KEY_PREFIX = "a3s:fleet"
SUSPEND_TTL_MS = 7 * 24 * 3600_000  # a suspended run and its children's results wait this long at most
MAX_STATE_BYTES = 4 * 1024 * 1024

# KEYS: hash. ARGV: state JSON, ttl, then per group: total, need, partial (0/1).
CREATE_LUA = """
local h = KEYS[1]
if redis.call('HSETNX', h, 'state', ARGV[1]) == 0 then return 0 end
local groups = (#ARGV - 2) / 3
for j = 0, groups - 1 do
  local base = 3 + j * 3
  redis.call('HSET', h, 'g' .. j .. ':total', ARGV[base], 'g' .. j .. ':need', ARGV[base + 1],
             'g' .. j .. ':partial', ARGV[base + 2], 'g' .. j .. ':ok', 0, 'g' .. j .. ':failed', 0)
end
redis.call('HSET', h, 'groups_left', groups)
redis.call('PEXPIRE', h, ARGV[2])
return 1
"""

# Settle group j if it is decided; returns 1 when this call settled it.
_SETTLE = """
local function settle(h, j, reason)
  if redis.call('HEXISTS', h, 'g' .. j .. ':settled') == 1 then return 0 end
  redis.call('HSET', h, 'g' .. j .. ':settled', reason)
  redis.call('HINCRBY', h, 'groups_left', -1)
  return 1
end
local function decided(h, j)
  local total = tonumber(redis.call('HGET', h, 'g' .. j .. ':total'))
  local need = tonumber(redis.call('HGET', h, 'g' .. j .. ':need'))
  local partial = redis.call('HGET', h, 'g' .. j .. ':partial') == '1'
  local ok = tonumber(redis.call('HGET', h, 'g' .. j .. ':ok'))
  local failed = tonumber(redis.call('HGET', h, 'g' .. j .. ':failed'))
  if ok + failed >= total then return 'done' end
  if not partial and failed > 0 then return 'failed' end
  if partial and ok >= need then return 'enough' end
  if partial and failed > total - need then return 'failed' end
  return nil
end
local function trigger(h)
  if tonumber(redis.call('HGET', h, 'groups_left')) <= 0 and redis.call('HEXISTS', h, 'cont_sent') == 0 then
    return 1
  end
  return 0
end
"""

# KEYS: hash. ARGV: group, index, result JSON, success (0/1), ttl.
# Returns {stored (1 new, 0 duplicate, -1 late: the group had settled), settled_now, trigger}; {-2} = gone.
REPORT_LUA = (
    _SETTLE
    + """
local h = KEYS[1]
if redis.call('EXISTS', h) == 0 then return {-2, 0, 0} end
local j = ARGV[1]
local stored = 0
local settled_now = 0
if redis.call('HEXISTS', h, 'g' .. j .. ':settled') == 1 then
  if redis.call('HEXISTS', h, 'r:' .. j .. ':' .. ARGV[2]) == 0 then stored = -1 end
elseif redis.call('HSETNX', h, 'r:' .. j .. ':' .. ARGV[2], ARGV[3]) == 1 then
  stored = 1
  if ARGV[4] == '1' then redis.call('HINCRBY', h, 'g' .. j .. ':ok', 1)
  else redis.call('HINCRBY', h, 'g' .. j .. ':failed', 1) end
  local reason = decided(h, j)
  if reason then settled_now = settle(h, j, reason) end
end
redis.call('PEXPIRE', h, ARGV[5])
return {stored, settled_now, trigger(h)}
"""
)

# KEYS: hash. ARGV: group, ttl. Returns {settled_now, trigger}; {-2, 0} = gone.
DEADLINE_LUA = (
    _SETTLE
    + """
local h = KEYS[1]
if redis.call('EXISTS', h) == 0 then return {-2, 0} end
local now = settle(h, ARGV[1], 'timed_out')
redis.call('PEXPIRE', h, ARGV[2])
return {now, trigger(h)}
"""
)


@dataclass(frozen=True)
class Group:
    """One pending ``task`` call's fan-in rule."""

    total: int
    need: int
    partial: bool


@dataclass(frozen=True)
class Report:
    stored: int  # 1 new, 0 duplicate, -1 late (group already settled)
    settled_now: bool
    trigger: bool


@dataclass(frozen=True)
class Suspension:
    sid: str
    state: dict[str, Any]
    settled: dict[int, str]
    results: dict[tuple[int, int], dict[str, Any]]
    groups_left: int
    cont_sent: bool


class SuspendStore:
    def __init__(self, client: redis.Redis, prefix: str = KEY_PREFIX) -> None:
        self.client = client
        self.prefix = prefix

    def key(self, sid: str) -> str:
        return f"{self.prefix}:susp:{sid}"

    def create(self, sid: str, state: dict[str, Any], groups: list[Group]) -> bool:
        """Store a suspension once; False when it already exists (a redelivered parent job)."""
        body = json.dumps(state, separators=(",", ":"), ensure_ascii=False)
        if len(body) > MAX_STATE_BYTES:
            raise InvalidArgument(f"suspension state is {len(body)} bytes; at most {MAX_STATE_BYTES}")
        args: list[Any] = [body, SUSPEND_TTL_MS]
        for g in groups:
            args += [g.total, g.need, 1 if g.partial else 0]
        with redis_errors("fleet.suspend"):
            return bool(self.client.eval(CREATE_LUA, 1, self.key(sid), *args))

    def report(self, sid: str, group: int, index: int, result: dict[str, Any], success: bool) -> Report:
        body = json.dumps(result, separators=(",", ":"), ensure_ascii=False, default=str)
        with redis_errors("fleet.suspend"):
            stored, settled, trigger = self.client.eval(
                REPORT_LUA, 1, self.key(sid), group, index, body, 1 if success else 0, SUSPEND_TTL_MS
            )
        if stored == -2:
            raise Transport(f"fleet: suspended run {sid} is no longer in redis (expired or lost)", op="redis")
        return Report(int(stored), bool(settled), bool(trigger))

    def expire_group(self, sid: str, group: int) -> tuple[bool, bool]:
        """The group's deadline passed: settle it ``timed_out`` (→ settled now, trigger)."""
        with redis_errors("fleet.suspend"):
            now, trigger = self.client.eval(DEADLINE_LUA, 1, self.key(sid), group, SUSPEND_TTL_MS)
        if now == -2:
            return False, False
        return bool(now), bool(trigger)

    def mark_sent(self, sid: str) -> None:
        with redis_errors("fleet.suspend"):
            self.client.hset(self.key(sid), "cont_sent", 1)

    def load(self, sid: str) -> Suspension | None:
        with redis_errors("fleet.suspend"):
            raw = self.client.hgetall(self.key(sid))
        if not raw or "state" not in raw:
            return None
        settled: dict[int, str] = {}
        results: dict[tuple[int, int], dict[str, Any]] = {}
        for field, value in raw.items():
            if field.startswith("g") and field.endswith(":settled"):
                settled[int(field[1:].split(":", 1)[0])] = value
            elif field.startswith("r:"):
                _, j, i = field.split(":")
                results[(int(j), int(i))] = json.loads(value)
        return Suspension(
            sid=sid,
            state=json.loads(raw["state"]),
            settled=settled,
            results=results,
            groups_left=int(raw.get("groups_left") or 0),
            cont_sent="cont_sent" in raw,
        )

    def delete(self, sid: str) -> None:
        with redis_errors("fleet.suspend"):
            self.client.delete(self.key(sid))
