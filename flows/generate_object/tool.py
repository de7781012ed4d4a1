"""``generate_object`` as a session tool (SPEC S-2, G-1..G-6; REFERENCE 4.14).

The model is the session's (``session_state["agent_model"]``, set from ``Agent(model=)`` /
``A3S_MODEL`` / the snapshot); its endpoint and key come from the environment of the process that
runs the call — a worker uses its own. A session without a model, or a malformed name, fails with
``invalid_argument`` before any request, like every argument rule (``params.py``).

Admission is bounded: at most ``GENERATION_MAX_CONCURRENCY`` generations run at once per event
loop (a process's sessions share it); the call's ``timeout_ms`` starts once admitted and covers the
whole repair transaction. The output is the JSON text ``{"object", "repair_rounds", "mode_used",
"usage": {prompt_tokens, completion_tokens, total_tokens, cache_read_tokens, cache_write_tokens},
"raw_text"?}``; metadata repeats it with ``generation_admission``. Model usage is charged to the
session budget (``services["model_budget"]``).
"""

from __future__ import annotations

import asyncio
import json
import weakref
from typing import Any

from flows.agent.conversation import MODEL_STATE_KEY
from flows.generate_object.generate import generate
from flows.generate_object.params import Params
from flows.providers import Usage, provider_for
from kernel.capabilities import ToolCapabilities
from kernel.context import ToolContext
from kernel.errors import InvalidArgument
from kernel.result import ToolResult
from kernel.spec import ToolSpec

GENERATION_MAX_CONCURRENCY = 4
BUDGET_SERVICE = "model_budget"
DESCRIPTION = (
    "Generate one JSON value that matches a JSON Schema (draft 2020-12, local $ref allowed), using the "
    "session's model. The value is validated; on validation errors the model repairs it up to "
    "max_repair_attempts times. Output: {object, repair_rounds, mode_used, usage}."
)
_admission: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
    weakref.WeakKeyDictionary()
)


def _slots() -> asyncio.Semaphore:
    loop = asyncio.get_running_loop()
    gate = _admission.get(loop)
    if gate is None:
        gate = _admission[loop] = asyncio.Semaphore(GENERATION_MAX_CONCURRENCY)
    return gate


def usage_json(u: Usage) -> dict[str, int]:
    """REFERENCE 4.14's usage names."""
    return {
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.total_tokens,
        "cache_read_tokens": u.cached_tokens,
        "cache_write_tokens": u.cache_write_tokens,
    }


async def run(ctx: ToolContext, params: Params) -> ToolResult:
    model = ctx.session_state.get(MODEL_STATE_KEY)
    if not isinstance(model, str) or not model:
        raise InvalidArgument(
            "generate_object needs a model: pass --model, set A3S_MODEL, or Agent(model=...)"
        )
    provider = provider_for(model)  # a bad name is invalid_argument, before any request
    loop = asyncio.get_running_loop()
    queued = loop.time()
    async with _slots():
        admitted = loop.time()
        deadline = min(admitted + params.timeout_ms / 1000, ctx.deadline)
        outcome = await generate(
            provider,
            params,
            deadline=deadline,
            started=admitted,
            emit=ctx.emit_delta,
            budget=ctx.services.get(BUDGET_SERVICE),
            now_ms=ctx.clock.now_ms,
        )
    usage = usage_json(outcome.usage)
    body: dict[str, Any] = {
        "object": outcome.object,
        "repair_rounds": outcome.repair_rounds,
        "mode_used": outcome.mode_used,
        "usage": usage,
    }
    if params.include_raw_text:
        body["raw_text"] = outcome.raw_text
    metadata = {
        "schema_name": params.schema_name,
        "requested_mode": params.mode,
        "mode_used": outcome.mode_used,
        "repair_rounds": outcome.repair_rounds,
        "usage": usage,
        "raw_text_included": params.include_raw_text,
        "model": provider.name,
        "generation_admission": {
            "mode": "bounded",
            "max_concurrency": GENERATION_MAX_CONCURRENCY,
            "queue_wait_ms": int((admitted - queued) * 1000),
            "active_timeout_ms": params.timeout_ms,
        },
    }
    return ToolResult.success("generate_object", json.dumps(body, ensure_ascii=False), metadata)


def _capabilities(_params: Params) -> ToolCapabilities:
    # No side effect on the workspace, but a model's answer is not repeatable: never batched in parallel.
    return ToolCapabilities(
        read_only=True,
        idempotent=False,
        cancel_safe=True,
        max_parallelism=GENERATION_MAX_CONCURRENCY,
        output_kind="structured",
    )


def generate_object_tool() -> ToolSpec:
    return ToolSpec(
        name="generate_object",
        delegates=True,
        description=DESCRIPTION,
        params=Params,
        run=run,
        capabilities=_capabilities,
        trust="external",
    )
