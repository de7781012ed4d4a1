"""The tiered cascade of one search (SPEC W-1, W-3, W-4, W-5; REFERENCE 4.10).

- Tiers run in the configured order (default ``headless, http, api``) and only while the merged
  results miss the structural gate (``gate.py``); explicit ``engines`` run only their own tiers.
- Budgets: a tier gets ``remaining / tiers_left`` of the call's time; its engines run concurrently,
  each bounded by that budget minus 100 ms.
- Circuit breakers (shared state: in memory embedded, Redis in the fleet): an engine whose breaker
  is open is *skipped* (outcome ``circuit_open`` with the time left); each engine call records its
  outcome — success, empty (three in a row open the breaker), or a typed failure (rate limits and
  terminal kinds open it at once, other failures after three in a row; request-scoped failures
  never count). ``Retry-After`` sets the open time.
- The headless tier's ``BrowserPool`` is created with the cascade and launched only if a headless
  engine actually runs; ``aclose`` runs in ``finally`` (cancel and timeout included). A headless
  engine that fails transiently is retried once while the run's browser retry budget lasts
  (``retries.py``: shared with delegated children through the state store).
"""

from __future__ import annotations

import asyncio
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kernel.state import BreakerState, CircuitBreakers, Outcome, Rejected
from tools.net import SafeHttp
from tools.web_search.browser import BrowserPool
from tools.web_search.config import SearchConfig
from tools.web_search.engines import PROXY_AUTHENTICATION, Engine, EngineOutcome, query_engine
from tools.web_search.gate import Health, Requirements, evaluate, rank
from tools.web_search.results import Hit, Row, merge
from tools.web_search.retries import BrowserRetries

MAX_ERROR_BYTES = 512


@dataclass
class CascadeReport:
    rows: list[Row]
    health: Health
    requirements: Requirements
    outcomes: list[EngineOutcome] = field(default_factory=list)
    tiers: list[dict[str, Any]] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)
    browser_launches: int = 0
    browser_retries: dict[str, Any] = field(default_factory=dict)

    @property
    def failures(self) -> list[EngineOutcome]:
        return [o for o in self.outcomes if o.status == "failure"]

    def metrics(self) -> dict[str, Any]:
        ran = [o for o in self.outcomes if o.status != "skipped"]
        failures = [o for o in ran if o.status == "failure"]
        transient = [o for o in failures if o.transient]
        counts: dict[str, int] = {}
        for o in failures:
            counts[o.failure_kind or "failure"] = counts.get(o.failure_kind or "failure", 0) + 1
        latencies = sorted(o.duration_ms for o in ran)

        def pct(p: float) -> int | None:
            if not latencies:
                return None
            return latencies[min(len(latencies) - 1, round(p * (len(latencies) - 1)))]

        total = len(ran)
        return {
            "total_requests": total,
            "successes": total - len(failures),
            "failures": len(failures),
            "transient_failures": len(transient),
            "permanent_failures": len(failures) - len(transient),
            "success_rate": round((total - len(failures)) / total, 4) if total else 0.0,
            "transient_failure_rate": round(len(transient) / total, 4) if total else 0.0,
            "error_counts": counts,
            "latency_p50_ms": pct(0.50),
            "latency_p95_ms": pct(0.95),
            "latency_p99_ms": pct(0.99),
            "latency_mean_ms": round(statistics.fmean(latencies), 1) if latencies else None,
        }


def _breaker_outcome(o: EngineOutcome) -> Outcome:
    if o.status == "success":
        return Outcome.success()
    if o.status == "empty":
        return Outcome.empty()
    if o.failure_kind in ("unavailable", PROXY_AUTHENTICATION):
        # configuration, or the caller's proxy: not the engine's health, so it never counts
        return Outcome.failure("invalid_query")
    return Outcome.failure(o.failure_kind or "transport", o.retry_after_ms)


class Cascade:
    def __init__(
        self,
        *,
        config: SearchConfig,
        http: SafeHttp,
        breakers: CircuitBreakers,
        query: str,
        limit: int,
        tiers: list[tuple[str, list[Engine]]],
        retries: BrowserRetries,
        now_ms: Callable[[], int],
        monotonic: Callable[[], float],
        deadline: float,
    ) -> None:
        self.config = config
        self.http = http
        self.breakers = breakers
        self.query = query
        self.limit = limit
        self.tiers = tiers
        self.retries = retries
        self.now_ms = now_ms
        self.monotonic = monotonic
        self.deadline = deadline
        self.requirements = Requirements.for_limit(limit)
        self.browser = BrowserPool(http, config.chromium_path)

    async def run(self) -> CascadeReport:
        hits: list[Hit] = []
        report = CascadeReport([], evaluate([], self.query, self.requirements), self.requirements)
        try:
            for index, (tier, engines) in enumerate(self.tiers):
                remaining = self.deadline - self.monotonic()
                if remaining <= 0:
                    report.notices.append(f"no time left for the {tier} tier")
                    break
                budget = remaining / (len(self.tiers) - index)
                outcomes = await asyncio.gather(*(self._engine(e, budget) for e in engines))
                report.outcomes.extend(outcomes)
                for outcome in outcomes:
                    hits.extend(outcome.hits)
                report.rows = rank(merge(hits), self.query)
                report.health = evaluate(report.rows, self.query, self.requirements)
                decision = "stop" if report.health.met else "continue"
                report.tiers.append(
                    {
                        "tier": tier,
                        "combined_quality": round(report.health.mean_match, 4),
                        "decision": decision,
                    }
                )
                if report.health.met:
                    break
        finally:
            report.browser_launches = self.browser.launches
            report.browser_retries = self.retries.report()
            await self.browser.aclose()
        return report

    async def _engine(self, engine: Engine, budget: float) -> EngineOutcome:
        permit = self.breakers.acquire(engine.name)
        if isinstance(permit, Rejected):
            return EngineOutcome(
                engine,
                "skipped",
                failure_kind="circuit_open",
                message=f"{engine.name}: circuit {permit.state}; skipped",
                retry_after_ms=permit.retry_after_ms,
            )
        outcome = await self._query(engine, budget)
        if engine.tier == "headless" and outcome.transient:
            left = self.deadline - self.monotonic()
            if left > 1.0 and self.retries.take():  # a retry is spent only when there is time for it
                outcome = await self._query(engine, min(budget, left))
        self.breakers.record(permit, _breaker_outcome(outcome))
        return outcome

    async def _query(self, engine: Engine, budget: float) -> EngineOutcome:
        return await query_engine(
            engine,
            config=self.config,
            http=self.http,
            browser=self.browser,
            query=self.query,
            limit=self.limit,
            budget_s=budget,
            now_ms=self.now_ms(),
            monotonic=self.monotonic,
        )


def breaker_states(breakers: CircuitBreakers, engines: list[Engine]) -> dict[str, BreakerState]:
    return {e.name: breakers.state(e.name) for e in engines}


def error_text(message: str) -> str:
    data = message.encode("utf-8")
    return message if len(data) <= MAX_ERROR_BYTES else data[:MAX_ERROR_BYTES].decode("utf-8", "ignore")
