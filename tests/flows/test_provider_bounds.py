"""A hostile model server cannot make this process hold its answer without bound (SPEC A-3, K-8).

Each case runs one model turn (``flows.agent.model_turn``: the loop's path, retries included) in a
fresh process under a 1.2 GB address-space cap against ``tests/flows/fixtures/
hostile_model_server.py`` on loopback. Before the bound (``flows/providers/http_bounds.py``) a
1.1 MiB gzip answer was read as 256 MiB of text (peak RSS 828-849 MiB), an endless stream grew the
process until the cap or the deadline, and a never-ending SSE line likewise. Now each is
``provider_error{reason: "too_large"}``, asked once (no retry brings a smaller answer).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.flows.fixtures.hostile_model_server import ask

REPO_ROOT = Path(__file__).resolve().parents[2]
FIXTURE = REPO_ROOT / "tests" / "flows" / "fixtures" / "hostile_model_server.py"
AS_CAP = "--as=1200000000"
MAX_PEAK_RSS_MIB = 400
WIRES = ["openai", "anthropic"]


def _probe(mode: str, wire: str) -> dict[str, Any]:
    """The fixture's one turn in a capped process; no deadline, so only the bound can end it."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    try:
        done = subprocess.run(
            ["prlimit", AS_CAP, sys.executable, str(FIXTURE), mode, wire],
            env=env,
            capture_output=True,
            text=True,
            timeout=150,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"a {mode} answer over {wire} held the model turn until the test's timeout")
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _assert_too_large(result: dict[str, Any]) -> None:
    assert result.get("error", {}).get("type") == "provider_error", result
    assert result["error"]["reason"] == "too_large", result
    assert result["requests"] == 1 and result["retries"] == 0, result
    assert result["peak_rss_mib"] < MAX_PEAK_RSS_MIB, result


@pytest.mark.parametrize("wire", WIRES)
def test_a3_k8_a_gzip_bomb_answer_is_refused_too_large_not_inflated(wire: str) -> None:
    """A blocking answer of 1.1 MiB gzip that inflates to 256 MiB: decoded here, stopped at 64 MiB."""
    result = _probe("bomb", wire)
    _assert_too_large(result)
    assert "larger than 67108864 bytes" in result["message"]


@pytest.mark.parametrize("wire", WIRES)
def test_a3_k8_an_endless_stream_ends_too_large_even_without_a_deadline(wire: str) -> None:
    """64 KiB text deltas that never stop, and no ``timeout_ms`` (``send``'s default)."""
    _assert_too_large(_probe("endless", wire))


@pytest.mark.parametrize("wire", WIRES)
def test_a3_k8_an_event_stream_line_that_never_ends_is_refused_at_8_mib(wire: str) -> None:
    result = _probe("line", wire)
    _assert_too_large(result)
    assert "event-stream line larger than 8388608 bytes" in result["message"]


@pytest.mark.parametrize("wire", WIRES)
@pytest.mark.parametrize("stream", [True, False])
def test_a3_gzip_encoded_answers_are_still_read(wire: str, stream: bool) -> None:
    """The bound decodes bodies itself; an honest gzip answer, streamed or not, reads as before."""
    result = asyncio.run(ask("gzip", wire, stream, 30.0))
    assert result["text"] == "hello" and result["requests"] == 1, result
