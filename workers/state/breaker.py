"""Fleet-wide circuit breakers on Redis (SPEC W-3, F-4): the transitions of
``kernel.state.MemoryCircuitBreakers``, each one a single Lua script, so concurrent workers never
race a read-modify-write.

Keys (``{prefix}:cb:{scope kind}:{scope id}:{engine}``): a hash ``state, gen, fails, empties,
open_until`` and a sorted set ``…:probes`` of half-open probe tokens scored by lease expiry. Both
expire after ``BREAKER_KEY_TTL_MS`` without writes. Failure kinds are classified in Python
(``kernel.state.classify_failure``) so the tables live in one place.

When Redis is unreachable, ``acquire`` fails closed for engines named in ``fail_closed`` (paid or
rate-limited APIs: raise ``Transport(op="redis")``) and lets the others through with a degraded
permit whose outcome is a no-op. ``record`` on an unreachable Redis loses the outcome and returns
False: breaker bookkeeping must not fail a search that already succeeded.
"""

from __future__ import annotations

from collections.abc import Iterable

import redis

from kernel.clock import Clock, IdFactory, RandomIds
from kernel.errors import Transport
from kernel.state import (
    BREAKER_KEY_TTL_MS,
    BreakerConfig,
    BreakerScope,
    BreakerState,
    Outcome,
    Permit,
    Rejected,
    normalize_engine,
)
from workers.state.redis_client import redis_errors

# Shared prologue: ``now`` comes from ARGV[1] (an injected clock) or, when negative, the server's
# TIME, so every worker agrees on one clock.
NOW_LUA = """
local now = tonumber(ARGV[1])
if now < 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
"""

# KEYS: hash, probes. ARGV: now, token, probe_limit, probe_lease_ms, key_ttl_ms.
# Returns {admitted 0/1, state, retry_after_ms, generation}.
ACQUIRE_LUA = (
    NOW_LUA
    + """
local h, probes = KEYS[1], KEYS[2]
local st = redis.call('HGET', h, 'state') or 'closed'
local gen = tonumber(redis.call('HGET', h, 'gen') or '0')
if st == 'open' then
  local until_ms = tonumber(redis.call('HGET', h, 'open_until') or '0')
  if now < until_ms then return {0, 'open', until_ms - now, gen} end
  st, gen = 'half_open', gen + 1
  redis.call('HSET', h, 'state', st, 'gen', gen)
  redis.call('DEL', probes)
  redis.call('PEXPIRE', h, ARGV[5])
end
if st == 'half_open' then
  redis.call('ZREMRANGEBYSCORE', probes, '-inf', now)
  if redis.call('ZCARD', probes) < tonumber(ARGV[3]) then
    redis.call('ZADD', probes, now + tonumber(ARGV[4]), ARGV[2])
    redis.call('PEXPIRE', probes, ARGV[5])
    return {1, 'half_open', 0, gen}
  end
  local first = redis.call('ZRANGE', probes, 0, 0, 'WITHSCORES')
  return {0, 'half_open', math.max(tonumber(first[2]) - now, 1), gen}
end
return {1, 'closed', 0, gen}
"""
)

# KEYS: hash, probes. ARGV: now, gen, probe 0/1, token, status, failure class, retry_after_ms,
# failure_threshold, empty_threshold, transient_ms, terminal_ms, max_open_ms, key_ttl_ms.
# Returns {applied 0/1, state, generation}.
RECORD_LUA = (
    NOW_LUA
    + """
local h, probes = KEYS[1], KEYS[2]
local st = redis.call('HGET', h, 'state') or 'closed'
local gen = tonumber(redis.call('HGET', h, 'gen') or '0')
if tonumber(ARGV[2]) ~= gen then return {0, st, gen} end
local status, cls = ARGV[5], ARGV[6]
local function trip(base)
  local d = math.max(base, tonumber(ARGV[7]))
  d = math.min(d, tonumber(ARGV[12]))
  gen = gen + 1
  st = 'open'
  redis.call('HSET', h, 'state', 'open', 'gen', gen, 'open_until', now + d, 'fails', 0, 'empties', 0)
  redis.call('DEL', probes)
end
local function done()
  redis.call('PEXPIRE', h, ARGV[13])
  return {1, st, gen}
end
local transient, terminal = tonumber(ARGV[10]), tonumber(ARGV[11])
if ARGV[3] == '1' then
  if st ~= 'half_open' or not redis.call('ZSCORE', probes, ARGV[4]) then return {0, st, gen} end
  if status == 'success' then
    gen = gen + 1
    st = 'closed'
    redis.call('HSET', h, 'state', 'closed', 'gen', gen, 'fails', 0, 'empties', 0)
    redis.call('DEL', probes)
  elseif cls == 'terminal' then trip(terminal)
  else trip(transient) end
  return done()
end
if st ~= 'closed' then return {0, st, gen} end
if status == 'success' then
  redis.call('HSET', h, 'fails', 0, 'empties', 0)
elseif status == 'empty' then
  local e = redis.call('HINCRBY', h, 'empties', 1)
  redis.call('HSET', h, 'fails', 0)
  if e >= tonumber(ARGV[9]) then trip(transient) end
elseif status == 'failure' then
  if cls == 'request' then return {0, st, gen}
  elseif cls == 'terminal' then trip(terminal)
  elseif cls == 'rate_limited' then trip(transient)
  else
    local f = redis.call('HINCRBY', h, 'fails', 1)
    redis.call('HSET', h, 'empties', 0)
    if f >= tonumber(ARGV[8]) then trip(transient) end
  end
else
  return {0, st, gen}
end
return done()
"""
)

# KEYS: hash, probes. ARGV: now. Returns {state, gen, fails, empties, open_until, live probes}.
STATE_LUA = (
    NOW_LUA
    + """
local v = redis.call('HMGET', KEYS[1], 'state', 'gen', 'fails', 'empties', 'open_until')
local live = redis.call('ZCOUNT', KEYS[2], '(' .. now, '+inf')
return {v[1] or 'closed', v[2] or '0', v[3] or '0', v[4] or '0', v[5] or '0', live, now}
"""
)


class RedisCircuitBreakers:
    """``kernel.state.CircuitBreakers`` for one scope, shared by every worker on the same Redis."""

    def __init__(
        self,
        client: redis.Redis,
        scope: BreakerScope,
        config: BreakerConfig | None = None,
        *,
        prefix: str = "a3s",
        fail_closed: Iterable[str] = (),
        clock: Clock | None = None,
        new_id: IdFactory | None = None,
    ) -> None:
        self.scope = scope
        self.config = config or BreakerConfig()
        self.fail_closed = frozenset(normalize_engine(e) for e in fail_closed)
        self._client = client
        self._prefix = prefix
        self._clock = clock
        self._new_id = new_id or RandomIds()
        self._acquire = client.register_script(ACQUIRE_LUA)
        self._record = client.register_script(RECORD_LUA)
        self._state = client.register_script(STATE_LUA)

    def _keys(self, engine: str) -> list[str]:
        base = f"{self._prefix}:cb:{self.scope.kind}:{self.scope.id}:{engine}"
        return [base, f"{base}:probes"]

    def _now(self) -> int:
        return self._clock.now_ms() if self._clock is not None else -1

    def acquire(self, engine: str) -> Permit | Rejected:
        engine = normalize_engine(engine)
        token = self._new_id("probe")
        args = [self._now(), token, self.config.probe_limit, self.config.probe_lease_ms, BREAKER_KEY_TTL_MS]
        try:
            with redis_errors("breaker.acquire"):
                admitted, state, retry_after, gen = self._acquire(keys=self._keys(engine), args=args)
        except Transport:
            if engine in self.fail_closed:
                raise
            return Permit(engine, -1)
        if not int(admitted):
            return Rejected(int(retry_after), state)
        probe = state == "half_open"
        return Permit(engine, int(gen), probe=probe, token=token if probe else "")

    def record(self, permit: Permit, outcome: Outcome) -> bool:
        if permit.degraded:
            return False
        cfg = self.config
        args = [
            self._now(),
            permit.generation,
            1 if permit.probe else 0,
            permit.token,
            outcome.status,
            outcome.failure_class or "",
            outcome.retry_after_ms or 0,
            cfg.failure_threshold,
            cfg.empty_threshold,
            cfg.transient_open_ms,
            cfg.terminal_open_ms,
            cfg.max_open_ms,
            BREAKER_KEY_TTL_MS,
        ]
        try:
            with redis_errors("breaker.record"):
                applied, _state, _gen = self._record(keys=self._keys(permit.engine), args=args)
        except Transport:
            return False
        return bool(int(applied))

    def state(self, engine: str) -> BreakerState:
        engine = normalize_engine(engine)
        with redis_errors("breaker.state"):
            st, gen, fails, empties, until, live, now = self._state(
                keys=self._keys(engine), args=[self._now()]
            )
        gen, fails, empties, until, now = int(gen), int(fails), int(empties), int(until), int(now)
        if st == "open" and now >= until:
            return BreakerState("half_open", gen, fails, empties, 0, 0)
        retry = until - now if st == "open" else 0
        return BreakerState(st, gen, fails, empties, retry, int(live) if st == "half_open" else 0)
