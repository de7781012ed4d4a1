"""What a search returns: text or JSON rows, the fail-closed envelope, the metadata (SPEC W-1, W-2, W-5).

- Success, JSON: the output is the results array — ``[{title, url, content, engines, score,
  published_date, full_text?}]`` — kept under ``MAX_JSON_BYTES`` (100 KiB − 4 KiB) by dropping
  trailing rows (``output_limited``). Success, text: a numbered list.
- Requirements missed: the call fails closed with ``error_kind`` ``retrieval_requirements_not_met``
  carrying the observed retrieval health and the thresholds. In JSON the output is the envelope
  ``{"status": "retrieval_requirements_not_met", "message", "retrieval_health",
  "retrieval_requirements", "results": [candidates]}``; in text, the message and the candidates.
  When nothing came back and every failing engine was rate limited the kind is
  ``rate_limited{retry_after_ms}``; when every one timed out, ``timeout{op, duration_ms}``.
- Metadata keys follow REFERENCE 4.10 (``status``, ``engine_selection_source``,
  ``selected_engines``, ``source_anchors``, ``engine_fallback``, ``notices``, ``search_fallback``,
  ``retrieval_health``, ``retrieval_requirements``, ``search_tiers``, ``engine_outcomes``,
  ``search_metrics``, ``engine_errors``, ``engine_failures``, ``available_result_count``,
  ``returned_result_count``, ``output_limited``); ``search_coalescing`` is added by the tool.
"""

from __future__ import annotations

import json
from typing import Any

from tools.net import anchor_of
from tools.web_search.cascade import CascadeReport, error_text
from tools.web_search.engines import PROXY_AUTHENTICATION
from tools.web_search.results import Row, cut_utf8

MAX_JSON_BYTES = 100 * 1024 - 4 * 1024
MAX_TEXT_SNIPPET_BYTES = 600


def status_of(report: CascadeReport) -> str:
    if not report.health.met:
        return "failed"
    return "partial" if report.failures else "complete"


def _bounded_json(rows: list[dict[str, Any]]) -> tuple[str, int]:
    """The JSON array of as many leading rows as fit ``MAX_JSON_BYTES``; and how many that is."""
    kept = list(rows)
    text = json.dumps(kept, ensure_ascii=False)
    while kept and len(text.encode("utf-8")) > MAX_JSON_BYTES:
        kept.pop()
        text = json.dumps(kept, ensure_ascii=False)
    return text, len(kept)


def _text_rows(rows: list[Row]) -> str:
    lines = []
    for i, row in enumerate(rows, 1):
        lines.append(f"{i}. {cut_utf8(row.title, 300)}")
        lines.append(f"   {row.url}")
        if row.content:
            lines.append(f"   {cut_utf8(row.content, MAX_TEXT_SNIPPET_BYTES)}")
    return "\n".join(lines)


def metadata(
    report: CascadeReport,
    *,
    selection_source: str,
    selected: list[str],
    returned: int,
    output_limited: bool,
) -> dict[str, Any]:
    failures = report.failures
    tiers_run = [t["tier"] for t in report.tiers]
    meta: dict[str, Any] = {
        "status": status_of(report),
        "engine_selection_source": selection_source,
        "selected_engines": selected,
        "source_anchors": [anchor_of(r.url) for r in report.rows[:returned]][:64],
        "notices": list(report.notices),
        "retrieval_health": report.health.to_json(),
        "retrieval_requirements": report.requirements.to_json(),
        "search_tiers": report.tiers,
        "engine_outcomes": [o.outcome_json() for o in report.outcomes],
        "search_metrics": report.metrics(),
        "engine_errors": [{"engine": o.engine.name, "message": error_text(o.message)} for o in failures],
        "engine_failures": [
            {
                "engine": o.engine.name[:96],
                "provider": o.engine.provider,
                "kind": o.failure_kind,
                "transient": o.transient,
                "retry_after_seconds": None if o.retry_after_ms is None else o.retry_after_ms / 1000,
            }
            for o in failures
        ],
        "available_result_count": len(report.rows),
        "returned_result_count": returned,
        "output_limited": output_limited,
        "browser_launched": report.browser_launches > 0,
        "browser_retries": report.browser_retries,
    }
    if len(tiers_run) > 1:
        meta["engine_fallback"] = "structurally_gated_tiers"
        meta["search_fallback"] = {
            "trigger": "retrieval_requirements",
            "mode": "tiered",
            "attempted": tiers_run,
            "engines": sorted({o.engine.name for o in report.outcomes}),
            "successful": sorted({o.engine.name for o in report.outcomes if o.status == "success"}),
            "failures": [o.engine.name for o in failures],
        }
    skipped = [o for o in report.outcomes if o.status == "skipped"]
    for o in skipped:
        meta["notices"].append(o.message)
    return meta


def success(
    report: CascadeReport, query: str, fmt: str, limit: int, full_texts: dict[str, str]
) -> tuple[str, int, bool]:
    """``(output, returned rows, output_limited)`` for a search that met its requirements."""
    rows = report.rows[:limit]
    for row in rows:
        if row.url in full_texts:
            row.full_text = full_texts[row.url]
    if fmt == "json":
        text, kept = _bounded_json([r.to_json() for r in rows])
        return text, kept, kept < len(rows)
    status = status_of(report)
    head = f"Search results for {json.dumps(query, ensure_ascii=False)} ({status}; {len(rows)} of {len(report.rows)} results)"
    text = head + "\n\n" + _text_rows(rows)
    data = text.encode("utf-8")
    if len(data) <= MAX_JSON_BYTES:
        return text, len(rows), False
    return data[:MAX_JSON_BYTES].decode("utf-8", "ignore"), len(rows), True


def failure_kind(report: CascadeReport, duration_ms: int) -> dict[str, Any]:
    """The typed ``error_kind`` of a search that missed its requirements."""
    failures = report.failures
    nothing = not report.rows
    if nothing and failures and all(o.failure_kind == "rate_limited" for o in failures):
        waits = [o.retry_after_ms for o in failures if o.retry_after_ms is not None]
        return {"type": "rate_limited", "retry_after_ms": min(waits) if waits else None}
    if nothing and failures and all(o.failure_kind == "timeout" for o in failures):
        return {"type": "timeout", "op": "web_search", "duration_ms": duration_ms}
    if nothing and failures and all(o.failure_kind == PROXY_AUTHENTICATION for o in failures):
        return {"type": "transport", "op": "web_search", "proxy": "authentication_failed"}
    return {
        "type": "retrieval_requirements_not_met",
        "retrieval_health": report.health.to_json(),
        "retrieval_requirements": report.requirements.to_json(),
        "candidate_count": len(report.rows),
    }


def failed(
    report: CascadeReport, query: str, fmt: str, limit: int, duration_ms: int
) -> tuple[str, dict[str, Any], int]:
    """``(output, error_kind, candidates shown)`` for a search that fails closed."""
    kind = failure_kind(report, duration_ms)
    h = report.health
    req = report.requirements
    if not report.rows:
        reason = "no engine returned results" + (
            " (engine errors: " + "; ".join(error_text(o.message) for o in report.failures)[:1500] + ")"
            if report.failures
            else ""
        )
    else:
        reason = (
            f"results missed the retrieval requirements: {h.usable_results}/{req.min_usable_results} usable, "
            f"{h.unique_hosts}/{req.min_unique_hosts} hosts, {h.aligned_results}/{req.min_aligned_results} aligned "
            f"(match >= {req.aligned_match}), mean match {h.mean_match:.2f}/{req.min_mean_match}"
        )
    message = f"web_search failed closed for {json.dumps(query, ensure_ascii=False)}: {reason}"
    candidates = report.rows[:limit]
    if fmt == "json":
        envelope = {
            "status": "retrieval_requirements_not_met",
            "message": message,
            "retrieval_health": h.to_json(),
            "retrieval_requirements": req.to_json(),
            "results": [r.to_json() for r in candidates],
        }
        text = json.dumps(envelope, ensure_ascii=False)
        while len(text.encode("utf-8")) > MAX_JSON_BYTES and envelope["results"]:
            envelope["results"].pop()
            text = json.dumps(envelope, ensure_ascii=False)
        return text, kind, len(envelope["results"])
    text = message
    if candidates:
        text += "\n\nCandidates (not verified as relevant):\n" + _text_rows(candidates)
    return cut_utf8(text, MAX_JSON_BYTES), kind, len(candidates)
