"""One model request of an agent run, with bounded, visible retries (SPEC A-3).

The SDK clients never retry on their own (``max_retries=0``): this is the one place a model request
is repeated, so every retry is an event (``model_retry{step, attempt, delay_ms, error_kind}``) and
the bound is ours. Only typed, retryable failures are retried — ``rate_limited`` (waiting what
``Retry-After`` asked, else exponential backoff) and ``transport`` — never after text was already
streamed to the client (a retry would show it twice), and never past the run's deadline: a wait
that would cross it ends the run with the typed failure instead. A stream that ends before any
content (``EmptyStream``: a server that cannot stream this request) is asked again without
streaming — a ``model_retry`` with ``fallback: "blocking"``.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from typing import Any

from flows.providers import Completion, ModelRequest, Provider, StreamItem, TextDelta, ToolCallDelta
from flows.providers.errors import EmptyStream
from kernel.errors import RateLimited, Transport

MODEL_MAX_RETRIES = 2
BACKOFF_BASE_MS = 500
BACKOFF_MAX_MS = 8_000

Emit = Callable[[str, dict[str, Any]], None]


def backoff_ms(attempt: int) -> int:
    return min(BACKOFF_BASE_MS * 2**attempt, BACKOFF_MAX_MS)


async def model_turn(
    provider: Provider,
    request: ModelRequest,
    step: int,
    emit: Emit,
    *,
    max_retries: int = MODEL_MAX_RETRIES,
    on_item: Callable[[StreamItem], None] | None = None,
) -> Completion:
    """The model's answer to ``request``; raises the typed error when retries cannot help.
    ``on_item`` sees every streamed item (generate_object's partial objects)."""
    loop = asyncio.get_running_loop()
    show_text = request.stream  # text deltas are events when the caller streams (a fallback keeps them)
    attempt = 0
    while True:
        emit("model_request", {"step": step, "attempt": attempt})
        streamed = False
        try:
            completion: Completion | None = None
            async for item in provider.stream(request):
                if on_item is not None:
                    on_item(item)
                if isinstance(item, TextDelta):
                    if show_text and item.text:
                        streamed = True
                        emit("text_delta", {"step": step, "text": item.text})
                elif isinstance(item, ToolCallDelta):
                    streamed = streamed or (request.stream and on_item is not None)
                elif isinstance(item, Completion):
                    completion = item
            if completion is None:
                raise Transport("model stream ended without a final message", op="model")
            return completion
        except EmptyStream as err:
            if not request.stream or attempt >= max_retries:
                raise
            # The server would not stream this request: ask again without streaming.
            attempt += 1
            emit(
                "model_retry",
                {
                    "step": step,
                    "attempt": attempt,
                    "delay_ms": 0,
                    "error_kind": err.to_kind(),
                    "fallback": "blocking",
                },
            )
            request = dataclasses.replace(request, stream=False)
        except (RateLimited, Transport) as err:
            if attempt >= max_retries or streamed:
                raise
            wait = err.data.get("retry_after_ms") if isinstance(err, RateLimited) else None
            delay_ms = int(wait) if wait is not None else backoff_ms(attempt)
            if request.deadline is not None and loop.time() + delay_ms / 1000 >= request.deadline:
                raise
            attempt += 1
            emit(
                "model_retry",
                {"step": step, "attempt": attempt, "delay_ms": delay_ms, "error_kind": err.to_kind()},
            )
            await asyncio.sleep(delay_ms / 1000)
