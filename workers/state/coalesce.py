"""Single flight across workers on Redis (SPEC W-4): the ``FlightBackend`` behind
``kernel.state.Coalescer`` (whose docstring gives the roles and the takeover rules).

Keys, under ``{prefix}:sf:{namespace}``:

- ``lock:{digest}``: hash ``token, until``: who leads the flight for this request key and until when
  its lease runs (the leader renews it every third of the lease). ``digest`` = SHA-256 of the
  request key, so long queries make short keys.
- ``inflight``: sorted set of leader tokens scored by lease expiry: the ``max_in_flight`` cap.
- ``result:{token}``: the leader's published ``FlightResult`` as JSON, kept ``FLIGHT_RESULT_TTL_MS``
  for followers already waiting; written and the lock dropped in one script, so a follower never
  sees "no lock" before the result exists.
- ``stats``: hash of the four role counters.

Followers poll ``result``/``lock`` with backoff (``POLL_MAX_S`` bounds the added latency) rather
than pub/sub: a poll also notices a leader whose lease lapsed, which a missed message would not.
Values cross processes as JSON; a value that is not JSON-serialisable is published as
"abandoned", so followers compute their own instead of receiving something lossy. A typed
``ToolError`` crosses as its ``error_kind`` and is rebuilt with ``error_from_kind``.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import redis

from kernel.clock import Clock
from kernel.errors import error_from_kind
from kernel.state import FLIGHT_RESULT_TTL_MS, ROLE_COUNTERS, FlightResult, Role
from workers.state.breaker import NOW_LUA
from workers.state.redis_client import redis_errors

# KEYS: lock, inflight. ARGV: now, token, lease_ms, max_in_flight. Returns {decision, token}.
BEGIN_LUA = (
    NOW_LUA
    + """
local lock, inflight = KEYS[1], KEYS[2]
local lease = tonumber(ARGV[3])
local tok = redis.call('HGET', lock, 'token')
if tok then
  if tonumber(redis.call('HGET', lock, 'until')) > now then return {'follow', tok} end
  redis.call('DEL', lock)
  redis.call('ZREM', inflight, tok)
end
redis.call('ZREMRANGEBYSCORE', inflight, '-inf', now)
if redis.call('ZCARD', inflight) >= tonumber(ARGV[4]) then return {'bypass', ''} end
redis.call('HSET', lock, 'token', ARGV[2], 'until', now + lease)
redis.call('PEXPIRE', lock, 2 * lease)
redis.call('ZADD', inflight, now + lease, ARGV[2])
redis.call('PEXPIRE', inflight, 2 * lease)
return {'lead', ARGV[2]}
"""
)

# KEYS: lock, inflight. ARGV: now, token, lease_ms. Returns 1 when renewed.
HEARTBEAT_LUA = (
    NOW_LUA
    + """
local lock, inflight = KEYS[1], KEYS[2]
local lease = tonumber(ARGV[3])
if redis.call('HGET', lock, 'token') ~= ARGV[2] then return 0 end
if tonumber(redis.call('HGET', lock, 'until')) <= now then return 0 end
redis.call('HSET', lock, 'until', now + lease)
redis.call('PEXPIRE', lock, 2 * lease)
redis.call('ZADD', inflight, 'XX', now + lease, ARGV[2])
if redis.call('PTTL', inflight) < 2 * lease then redis.call('PEXPIRE', inflight, 2 * lease) end
return 1
"""
)

# KEYS: lock, inflight, result. ARGV: token, payload, result_ttl_ms.
FINISH_LUA = """
redis.call('SET', KEYS[3], ARGV[2], 'PX', ARGV[3])
if redis.call('HGET', KEYS[1], 'token') == ARGV[1] then redis.call('DEL', KEYS[1]) end
redis.call('ZREM', KEYS[2], ARGV[1])
return 1
"""

# KEYS: lock, result. ARGV: now, token. Returns {'done', payload} | {'running', ''} | {'lost', ''}.
POLL_LUA = (
    NOW_LUA
    + """
local r = redis.call('GET', KEYS[2])
if r then return {'done', r} end
if redis.call('HGET', KEYS[1], 'token') == ARGV[2]
   and tonumber(redis.call('HGET', KEYS[1], 'until')) > now then
  return {'running', ''}
end
return {'lost', ''}
"""
)

IN_FLIGHT_LUA = (
    NOW_LUA
    + """
return redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')
"""
)


def encode_result(result: FlightResult) -> str:
    if result.status == "ok":
        try:
            return json.dumps({"status": "ok", "value": result.value}, separators=(",", ":"))
        except (TypeError, ValueError):
            return json.dumps({"status": "abandoned"})
    if result.status == "error" and result.error is not None:
        return json.dumps(
            {"status": "error", "error_kind": result.error.to_kind(), "message": result.error.message},
            default=str,
        )
    return json.dumps({"status": "abandoned"})


def decode_result(payload: str) -> FlightResult:
    data: dict[str, Any] = json.loads(payload)
    if data.get("status") == "ok":
        return FlightResult("ok", value=data.get("value"))
    if data.get("status") == "error":
        return FlightResult("error", error=error_from_kind(data.get("error_kind"), str(data.get("message"))))
    return FlightResult("abandoned")


class RedisFlightBackend:
    def __init__(
        self,
        client: redis.Redis,
        *,
        namespace: str = "search",
        prefix: str = "a3s",
        clock: Clock | None = None,
    ) -> None:
        self._client = client
        self._base = f"{prefix}:sf:{namespace}"
        self._clock = clock
        self._begin = client.register_script(BEGIN_LUA)
        self._heartbeat = client.register_script(HEARTBEAT_LUA)
        self._finish = client.register_script(FINISH_LUA)
        self._poll = client.register_script(POLL_LUA)
        self._in_flight = client.register_script(IN_FLIGHT_LUA)

    def _now(self) -> int:
        return self._clock.now_ms() if self._clock is not None else -1

    def _lock(self, key: str) -> str:
        return f"{self._base}:lock:{hashlib.sha256(key.encode()).hexdigest()}"

    def _result(self, token: str) -> str:
        return f"{self._base}:result:{token}"

    def begin(self, key: str, token: str, lease_ms: int, max_in_flight: int) -> tuple[str, str]:
        with redis_errors("coalesce.begin"):
            decision, leader = self._begin(
                keys=[self._lock(key), f"{self._base}:inflight"],
                args=[self._now(), token, lease_ms, max_in_flight],
            )
        return str(decision), str(leader)

    def heartbeat(self, key: str, token: str, lease_ms: int) -> bool:
        with redis_errors("coalesce.heartbeat"):
            return bool(
                self._heartbeat(
                    keys=[self._lock(key), f"{self._base}:inflight"], args=[self._now(), token, lease_ms]
                )
            )

    def finish(self, key: str, token: str, result: FlightResult) -> None:
        with redis_errors("coalesce.finish"):
            self._finish(
                keys=[self._lock(key), f"{self._base}:inflight", self._result(token)],
                args=[token, encode_result(result), FLIGHT_RESULT_TTL_MS],
            )

    def poll(self, key: str, token: str) -> FlightResult | None:
        with redis_errors("coalesce.poll"):
            state, payload = self._poll(
                keys=[self._lock(key), self._result(token)], args=[self._now(), token]
            )
        if state == "done":
            return decode_result(payload)
        if state == "running":
            return None
        return FlightResult("abandoned")

    def count(self, role: Role) -> None:
        with redis_errors("coalesce.count"):
            self._client.hincrby(f"{self._base}:stats", ROLE_COUNTERS[role], 1)

    def counters(self) -> dict[str, int]:
        with redis_errors("coalesce.counters"):
            raw = self._client.hgetall(f"{self._base}:stats")
        return {str(k): int(v) for k, v in raw.items()}

    def in_flight(self) -> int:
        with redis_errors("coalesce.in_flight"):
            return int(self._in_flight(keys=[f"{self._base}:inflight"], args=[self._now()]))
