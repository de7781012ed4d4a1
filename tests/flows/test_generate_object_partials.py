"""Partial-object deltas of a large streamed answer stay cheap (SPEC G-5).

Past ``MAX_PARTIAL_BYTES`` a delta only says ``object_partial_omitted`` with the size; the size used
to be found by joining and encoding the whole answer so far, every 100 ms: with a 32 MiB answer
still trickling in, each of those held the event loop for tens of milliseconds (the model server
decides how long: up to the generation's deadline). The size is now kept as the answer grows.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from flows.generate_object.generate import PARTIAL_INTERVAL_S, _Partials
from flows.providers import TextDelta

MIB = 1024 * 1024


async def _trickle_cpu_s(rounds: int) -> tuple[float, list[dict[str, Any]]]:
    deltas: list[dict[str, Any]] = []
    partials = _Partials(deltas.append, asyncio.get_running_loop())
    for _ in range(32):
        partials(TextDelta("x" * MIB))
    cpu = 0.0
    for _ in range(rounds):  # one byte per throttle interval, as a trickling server sends
        await asyncio.sleep(PARTIAL_INTERVAL_S)
        started = time.process_time()
        partials(TextDelta("y"))
        cpu += time.process_time() - started
    return cpu, deltas


def test_g5_a_large_answer_trickling_in_costs_no_rejoin_per_partial_delta() -> None:
    cpu, deltas = asyncio.run(_trickle_cpu_s(20))
    omitted = [d for d in deltas if d.get("object_partial_omitted")]
    assert len(omitted) >= 15, deltas[-1:]
    assert omitted[-1]["partial_bytes"] >= 32 * MIB + 15
    assert cpu < 0.2, f"{cpu:.2f} s of CPU for 20 one-byte deltas"


def test_g5_a_deeply_nested_prefix_gives_no_preview_instead_of_recursion_error() -> None:
    from flows.generate_object.partial import partial_json

    assert partial_json("[" * 100_000) is None
    assert partial_json('{"a": ' + "[" * 500 + "]" * 500 + "}") is None
    assert partial_json('{"a": [[1]], "b": "x') == {"a": [[1]], "b": "x"}
