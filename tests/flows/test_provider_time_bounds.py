"""Every model request is bounded in time, with or without the run's ``timeout_ms`` (SPEC A-3).

``flows/providers/time_bounds.py``: an idle bound (no byte for ``A3S_MODEL_IDLE_TIMEOUT_S``) and a
ceiling on the whole request (``A3S_MODEL_REQUEST_TIMEOUT_S``). Before, a server trickling a byte
within each read timeout held a run without ``timeout_ms`` — ``send``'s default — forever: the SDK's
600 s read timeout restarts with every byte. Against a real loopback server that trickles one byte
every 0.1 s (or sends headers and then nothing), each request now ends ``timeout{op: "model"}``
within its bound, is not retried, and the connection is closed.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flows.providers import provider_for
from kernel.errors import InvalidArgument
from orchestrator import Agent
from tests.flows.fixtures.hostile_model_server import HostileModelServer, ask

WIRES = pytest.mark.parametrize("wire", ["openai", "anthropic"])
STREAM = pytest.mark.parametrize("stream", [False, True], ids=["blocking", "streamed"])
CEILING_S = 1.5
IDLE_S = 1.0
SLACK_S = 3.0  # set-up and shutdown of one turn on a loaded machine (CI: 2 cores, whole suite)
HANG_S = 30.0  # before the bound, the turn never ended: the test fails here instead of hanging


@pytest.fixture(autouse=True)
def _sdks_imported() -> None:
    """The SDKs are imported before a turn is timed (the first import takes seconds)."""
    import flows.providers.anthropic_messages
    import flows.providers.openai_chat  # noqa: F401


def _turn(mode: str, wire: str, stream: bool, env: dict[str, str]) -> dict[str, Any]:
    async def bounded() -> dict[str, Any]:
        return await asyncio.wait_for(ask(mode, wire, stream, None, env), HANG_S)

    try:
        return asyncio.run(bounded())
    except TimeoutError:
        pytest.fail(f"{mode} {wire}: the model request was still running after {HANG_S} s")


def _timed_out(result: dict[str, Any]) -> bool:
    error = result.get("error")
    return isinstance(error, dict) and error.get("type") == "timeout" and error.get("op") == "model"


@WIRES
@STREAM
def test_a3_a_trickling_server_ends_the_request_at_its_ceiling(wire: str, stream: bool) -> None:
    env = {"A3S_MODEL_REQUEST_TIMEOUT_S": str(CEILING_S), "A3S_MODEL_IDLE_TIMEOUT_S": "20"}
    result = _turn("trickle", wire, stream, env)
    assert _timed_out(result), result
    assert result["seconds"] < CEILING_S + SLACK_S, result
    assert result["requests"] == 1 and result["retries"] == 0, result  # a timeout is not retried
    assert result["hung_up"] == 1, result  # the connection was closed, not left to the server


@WIRES
@STREAM
def test_a3_a_silent_server_ends_the_request_at_the_idle_bound(wire: str, stream: bool) -> None:
    env = {"A3S_MODEL_IDLE_TIMEOUT_S": str(IDLE_S), "A3S_MODEL_REQUEST_TIMEOUT_S": "60"}
    result = _turn("silent", wire, stream, env)
    assert _timed_out(result), result
    assert f"no byte for {IDLE_S:g} s" in result["message"], result
    assert result["seconds"] < IDLE_S + SLACK_S, result
    assert result["requests"] == 1 and result["hung_up"] == 1, result


@pytest.mark.parametrize("value", ["abc", "0", "-1", "nan", "inf"])
def test_a3_k8_a_bad_bound_is_invalid_argument_before_any_request(value: str) -> None:
    env = {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "A3S_MODEL_IDLE_TIMEOUT_S": value}
    with pytest.raises(InvalidArgument) as caught:
        provider_for("openai:bad-bound", env)
    assert "A3S_MODEL_IDLE_TIMEOUT_S" in caught.value.message


@pytest.fixture()
def trickling(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[HostileModelServer]:
    """The trickling server on its own loop thread, for a whole session run."""
    loop = asyncio.new_event_loop()
    srv = HostileModelServer("trickle", request.param)
    loop.run_until_complete(srv.__aenter__())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    for k, v in srv.env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("A3S_MODEL_REQUEST_TIMEOUT_S", str(CEILING_S))
    yield srv
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.run_until_complete(srv.__aexit__(None, None, None))
    loop.close()


@pytest.mark.parametrize("trickling", ["openai", "anthropic"], indirect=True)
def test_a2_a3_a_run_without_timeout_ms_against_a_trickling_server_ends(
    trickling: HostileModelServer, workspace: Path
) -> None:
    """``send`` with no ``timeout_ms``: the run ends ``timeout{op: "model"}`` at the ceiling, the
    session takes the next request, and no connection is left open."""
    started = time.monotonic()
    with Agent(model=f"{trickling.wire}:m") as agent:
        session = agent.session(workspace)
        result = session.send("hi")
        elapsed = time.monotonic() - started
        assert result.error is not None and result.error["type"] == "timeout", result.error
        assert result.error.get("op") == "model", result.error
        assert elapsed < CEILING_S + 2 * SLACK_S, elapsed
        again = session.send("again")  # the session is not stuck behind the first run
        assert again.error is not None and again.error["type"] == "timeout", again.error
    deadline = time.monotonic() + 2
    while trickling.hung_up < trickling.requests and time.monotonic() < deadline:
        time.sleep(0.05)
    assert trickling.requests == 2 and trickling.hung_up == 2, (trickling.requests, trickling.hung_up)
