"""Fleet-wide bulkheads on Redis (SPEC W-4, F-4): a semaphore of expiring leases.

One sorted set per bulkhead (``{prefix}:bh:{name}``): member = lease id, score = expiry (ms).
Admission is one Lua script: drop expired leases, count the rest, add ours only if the count is
below the limit, so no interleaving of workers can over-admit. A worker that dies simply stops
renewing; its lease expires and the permit returns. Waiting (``acquire``/``acquire_blocking``) is
``kernel.state.BulkheadBase``: polling with jittered backoff up to ``POLL_MAX_S``.
"""

from __future__ import annotations

from dataclasses import replace

import redis

from kernel.clock import Clock, IdFactory, RandomIds
from kernel.state import BULKHEAD_LEASE_MS, BulkheadBase, Lease, check_bulkhead_args
from workers.state.breaker import NOW_LUA
from workers.state.redis_client import redis_errors

# KEYS: zset. ARGV: now, limit, lease_ms, lease id. Returns {admitted 0/1, expiry or retry-after}.
ACQUIRE_LUA = (
    NOW_LUA
    + """
local z = KEYS[1]
redis.call('ZREMRANGEBYSCORE', z, '-inf', now)
local lease_ms = tonumber(ARGV[3])
if redis.call('ZCARD', z) >= tonumber(ARGV[2]) then
  local first = redis.call('ZRANGE', z, 0, 0, 'WITHSCORES')
  return {0, math.max(tonumber(first[2]) - now, 1)}
end
redis.call('ZADD', z, now + lease_ms, ARGV[4])
if redis.call('PTTL', z) < lease_ms then redis.call('PEXPIRE', z, lease_ms) end
return {1, now + lease_ms}
"""
)

# KEYS: zset. ARGV: now, lease_ms, lease id. Returns the new expiry, or 0 when the lease is gone.
RENEW_LUA = (
    NOW_LUA
    + """
local z = KEYS[1]
local exp = redis.call('ZSCORE', z, ARGV[3])
if not exp or tonumber(exp) <= now then
  redis.call('ZREM', z, ARGV[3])
  return 0
end
local lease_ms = tonumber(ARGV[2])
redis.call('ZADD', z, 'XX', now + lease_ms, ARGV[3])
if redis.call('PTTL', z) < lease_ms then redis.call('PEXPIRE', z, lease_ms) end
return now + lease_ms
"""
)

# KEYS: zset. ARGV: now. Live holders.
HOLDERS_LUA = (
    NOW_LUA
    + """
return redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')
"""
)


class RedisBulkheads(BulkheadBase):
    def __init__(
        self,
        client: redis.Redis,
        *,
        prefix: str = "a3s",
        clock: Clock | None = None,
        new_id: IdFactory | None = None,
    ) -> None:
        self._client = client
        self._prefix = prefix
        self._clock = clock
        self._new_id = new_id or RandomIds()
        self._acquire = client.register_script(ACQUIRE_LUA)
        self._renew = client.register_script(RENEW_LUA)
        self._holders = client.register_script(HOLDERS_LUA)

    def _key(self, name: str) -> str:
        return f"{self._prefix}:bh:{name}"

    def _now(self) -> int:
        return self._clock.now_ms() if self._clock is not None else -1

    def try_acquire(self, name: str, limit: int, *, lease_ms: int = BULKHEAD_LEASE_MS) -> Lease | None:
        check_bulkhead_args(name, limit, lease_ms)
        lease_id = self._new_id("lease")
        with redis_errors("bulkhead.acquire"):
            admitted, value = self._acquire(
                keys=[self._key(name)], args=[self._now(), limit, lease_ms, lease_id]
            )
        if not int(admitted):
            return None
        return Lease(name, lease_id, limit, int(value))

    def renew(self, lease: Lease, *, lease_ms: int = BULKHEAD_LEASE_MS) -> Lease | None:
        with redis_errors("bulkhead.renew"):
            expiry = int(
                self._renew(keys=[self._key(lease.name)], args=[self._now(), lease_ms, lease.lease_id])
            )
        return replace(lease, expires_at_ms=expiry) if expiry else None

    def release(self, lease: Lease) -> bool:
        with redis_errors("bulkhead.release"):
            return bool(self._client.zrem(self._key(lease.name), lease.lease_id))

    def holders(self, name: str) -> int:
        with redis_errors("bulkhead.holders"):
            return int(self._holders(keys=[self._key(name)], args=[self._now()]))
