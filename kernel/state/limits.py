"""Limits of the shared run state, units in the names."""

from __future__ import annotations

BREAKER_FAILURE_THRESHOLD = 3
BREAKER_EMPTY_THRESHOLD = 3
BREAKER_TRANSIENT_OPEN_MS = 60_000
BREAKER_TERMINAL_OPEN_MS = 15 * 60_000
BREAKER_MAX_OPEN_MS = 24 * 3600_000
BREAKER_PROBE_LIMIT = 1
BREAKER_PROBE_LEASE_MS = 60_000  # a probe holder that dies frees the probe slot after this
BREAKER_KEY_TTL_MS = 48 * 3600_000  # idle breaker state is forgotten (back end housekeeping)

BULKHEAD_LEASE_MS = 60_000
POLL_MIN_S = 0.002  # first wait between polls (bulkhead admission, flight results)
POLL_MAX_S = 0.025  # backoff cap: bounds the extra latency a poll adds

FLIGHT_MAX_IN_FLIGHT = 1024  # distinct flights; beyond it callers bypass (REFERENCE 4.10)
FLIGHT_LEASE_MS = 10_000  # leader lease, renewed every third of it while the leader runs
FLIGHT_RESULT_TTL_MS = 30_000
FLIGHT_MAX_TAKEOVERS = 3  # abandoned flights a caller follows before running alone

STEP_LEASE_MS = 300_000
STEP_TTL_MS = 7 * 24 * 3600_000
MAX_STEP_RESULT_BYTES = 512 * 1024  # bigger results are stored elsewhere and referenced
