"""How long one model request may take, with or without a run deadline (SPEC A-3).

A run without ``timeout_ms`` (``send``'s default) had no bound on a request but the SDK's read
timeout, which restarts with every byte: a server trickling one byte every few minutes held the
run, its job and its worker slot forever. Every request now has two bounds:

- **idle** (``A3S_MODEL_IDLE_TIMEOUT_S``, default 600 s): the longest wait for the next byte —
  the httpx read timeout, the official openai and anthropic SDKs' own default. A blocking answer
  sends nothing until it is complete, so this is also the time it may take to its first byte.
- **ceiling** (``A3S_MODEL_REQUEST_TIMEOUT_S``, default 3,600 s): the whole request, connect to
  last byte. The anthropic SDK expects its longest answer (128k tokens) to take an hour.

The run's own deadline, when earlier, still wins. Either bound ends the request
``timeout{op: "model", duration_ms}``, which the loop does not retry.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass

import httpx2

from config.settings import Settings
from flows.providers.errors import timeout_error
from kernel.errors import InvalidArgument, Timeout

# The defaults are the settings' (config/settings.py), read here from the calling process's env.
DEFAULT_IDLE_TIMEOUT_S: float = Settings.model_fields["model_idle_timeout_s"].default
DEFAULT_REQUEST_TIMEOUT_S: float = Settings.model_fields["model_request_timeout_s"].default
CONNECT_TIMEOUT_S = 5.0  # the SDKs' own connect timeout
IDLE_VAR = "A3S_MODEL_IDLE_TIMEOUT_S"
REQUEST_VAR = "A3S_MODEL_REQUEST_TIMEOUT_S"


@dataclass(frozen=True)
class ModelTimeouts:
    idle_s: float = DEFAULT_IDLE_TIMEOUT_S
    request_s: float = DEFAULT_REQUEST_TIMEOUT_S

    def deadline(self, run_deadline: float | None, started: float) -> float:
        """The request's deadline (``time.monotonic()``): the ceiling, or the run's when earlier."""
        ceiling = started + self.request_s
        return ceiling if run_deadline is None else min(run_deadline, ceiling)

    def http_timeout(self, left_s: float) -> httpx2.Timeout:
        """The SDK's per-request timeout: each wait at most ``idle_s``, and never past the deadline
        (``left_s`` away)."""
        each = min(self.idle_s, left_s)
        return httpx2.Timeout(each, connect=min(CONNECT_TIMEOUT_S, each))

    def error(self, started: float, deadline: float) -> Timeout:
        """The typed timeout for an SDK/httpx timeout: the idle bound's, unless the deadline passed."""
        idle = time.monotonic() < deadline - 0.05
        return timeout_error(started, f"no byte for {self.idle_s:g} s" if idle else "")


def _seconds(env: Mapping[str, str], var: str, default: float) -> float:
    raw = (env.get(var) or "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise InvalidArgument(f"{var}: expected a positive number of seconds, got {raw[:40]!r}")
    return value


def model_timeouts(env: Mapping[str, str]) -> ModelTimeouts:
    """The bounds from ``env`` (the calling process's environment, as the endpoint and key are)."""
    return ModelTimeouts(
        _seconds(env, IDLE_VAR, DEFAULT_IDLE_TIMEOUT_S),
        _seconds(env, REQUEST_VAR, DEFAULT_REQUEST_TIMEOUT_S),
    )
