"""The fleet's step store on Redis (SPEC F-3): idempotent step recovery with attempt fencing.

One hash per step, ``{prefix}:step:{run_id}:{query_digest}:{step_id}`` with fields ``status``
(running | completed | failed), ``attempt``, ``lease_until``, ``result`` (JSON), ``error_kind``
(JSON). The three ids are all in the key, so a lookup can only ever match its own run, query and
step. Each transition is one Lua script (see ``kernel.state`` for the rules): ``claim`` never hands
out an attempt while another worker's lease is live, ``complete``/``fail``/``renew`` only act for
the current attempt of a running step, and only ``complete`` can make a result visible. Keys expire
``STEP_TTL_MS`` after their last write. ``complete`` returns after Redis acknowledged the write, so a
worker that acks its job afterwards never acks a result that is not stored.
"""

from __future__ import annotations

import json
from typing import Any

import redis

from kernel.clock import Clock
from kernel.state import (
    STEP_LEASE_MS,
    STEP_TTL_MS,
    Busy,
    Claimed,
    Completed,
    StepKey,
    StepRecord,
    encode_step_result,
    stale_attempt,
)
from workers.state.breaker import NOW_LUA
from workers.state.redis_client import redis_errors

# KEYS: hash. ARGV: now, lease_ms, ttl_ms. Returns {outcome, attempt, value}.
CLAIM_LUA = (
    NOW_LUA
    + """
local h = KEYS[1]
local st = redis.call('HGET', h, 'status')
local attempt = tonumber(redis.call('HGET', h, 'attempt') or '0')
if st == 'completed' then return {'completed', attempt, redis.call('HGET', h, 'result') or 'null'} end
if st == 'running' then
  local lu = tonumber(redis.call('HGET', h, 'lease_until') or '0')
  if lu > now then return {'busy', attempt, tostring(lu - now)} end
end
attempt = attempt + 1
local lu = now + tonumber(ARGV[2])
redis.call('HSET', h, 'status', 'running', 'attempt', attempt, 'lease_until', lu)
redis.call('HDEL', h, 'result', 'error_kind')
redis.call('PEXPIRE', h, ARGV[3])
return {'claimed', attempt, tostring(lu)}
"""
)

# KEYS: hash. ARGV: now, attempt, action (complete|fail|renew), payload, lease_ms, ttl_ms.
# Returns {applied 0/1, status, current attempt}.
FENCED_LUA = (
    NOW_LUA
    + """
local h = KEYS[1]
local st = redis.call('HGET', h, 'status') or ''
local attempt = tonumber(redis.call('HGET', h, 'attempt') or '0')
if st ~= 'running' or attempt ~= tonumber(ARGV[2]) then return {0, st, attempt} end
local action = ARGV[3]
if action == 'complete' then
  redis.call('HSET', h, 'status', 'completed', 'result', ARGV[4])
  redis.call('HDEL', h, 'lease_until')
elseif action == 'fail' then
  redis.call('HSET', h, 'status', 'failed', 'error_kind', ARGV[4])
  redis.call('HDEL', h, 'lease_until')
else
  redis.call('HSET', h, 'lease_until', now + tonumber(ARGV[5]))
end
redis.call('PEXPIRE', h, ARGV[6])
return {1, action, attempt}
"""
)


class RedisStepStore:
    def __init__(
        self,
        client: redis.Redis,
        *,
        prefix: str = "a3s",
        clock: Clock | None = None,
        ttl_ms: int = STEP_TTL_MS,
    ) -> None:
        self._client = client
        self._prefix = prefix
        self._clock = clock
        self._ttl_ms = ttl_ms
        self._claim = client.register_script(CLAIM_LUA)
        self._fenced = client.register_script(FENCED_LUA)

    def _key(self, key: StepKey) -> str:
        return f"{self._prefix}:step:{key.run_id}:{key.query_digest}:{key.step_id}"

    def _now(self) -> int:
        return self._clock.now_ms() if self._clock is not None else -1

    def claim(self, key: StepKey, *, lease_ms: int = STEP_LEASE_MS) -> Claimed | Completed | Busy:
        with redis_errors("steps.claim"):
            outcome, attempt, value = self._claim(
                keys=[self._key(key)], args=[self._now(), lease_ms, self._ttl_ms]
            )
        if outcome == "completed":
            return Completed(int(attempt), json.loads(value))
        if outcome == "busy":
            return Busy(int(attempt), int(value))
        return Claimed(int(attempt), int(value))

    def _apply(self, key: StepKey, attempt: int, action: str, payload: str = "", lease_ms: int = 0) -> bool:
        with redis_errors(f"steps.{action}"):
            applied, status, current = self._fenced(
                keys=[self._key(key)], args=[self._now(), attempt, action, payload, lease_ms, self._ttl_ms]
            )
        if not int(applied):
            if action == "renew":
                return False
            raise stale_attempt(key, attempt, str(status), int(current))
        return True

    def complete(self, key: StepKey, attempt: int, result: Any) -> None:
        self._apply(key, attempt, "complete", encode_step_result(result))

    def fail(self, key: StepKey, attempt: int, error_kind: dict[str, Any] | None = None) -> None:
        self._apply(key, attempt, "fail", json.dumps(error_kind))

    def renew(self, key: StepKey, attempt: int, *, lease_ms: int = STEP_LEASE_MS) -> bool:
        return self._apply(key, attempt, "renew", lease_ms=lease_ms)

    def recover(self, key: StepKey) -> Completed | None:
        with redis_errors("steps.recover"):
            status, attempt, result = self._client.hmget(self._key(key), ["status", "attempt", "result"])
        if status != "completed":
            return None
        return Completed(int(attempt), json.loads(result or "null"))

    def get(self, key: StepKey) -> StepRecord | None:
        with redis_errors("steps.get"):
            row = self._client.hgetall(self._key(key))
        if not row:
            return None
        return StepRecord(
            row["status"],
            int(row.get("attempt", 0)),
            int(row.get("lease_until", 0)),
            json.loads(row["result"]) if "result" in row else None,
            json.loads(row["error_kind"]) if "error_kind" in row else None,
        )
