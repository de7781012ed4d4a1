"""A scan stopped by its timeout or a cancel leaves no stray error behind (SPEC K-6, K-8, Q-2, Q-5).

Found by the attack review: grep and bm25 scans (and an ``ls`` page) run in the default executor behind
``asyncio.shield``; when the kernel's timeout (or the caller's cancel) ended the call, the scan
then noticed its stop flag and raised ``Cancelled`` into a future nobody awaited, and asyncio
logged "Future exception was never retrieved" with a traceback after every such call. The call's
own result was right (typed ``timeout``/``cancelled``); the log was not.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import random
import shutil
import time
from pathlib import Path

import pytest

from kernel import PermissionPolicy, SessionOptions
from kernel.testing import make_context
from kernel.workspace import LocalWorkspace
from orchestrator import Agent
from tools import ls

# A pattern ripgrep has no literal for and whose lazy DFA thrashes: seconds per 17 MB file.
SLOW_RG_PATTERN = r"(?:[a-j]\w{0,9}\s\w{1,10}\s){5,6}\d{4}"
STOP_AFTER_MS = 300  # both scans below take well over a second


def _words(rnd: random.Random, alphabet: str, n: int) -> list[str]:
    return ["".join(rnd.choice(alphabet) for _ in range(rnd.randint(3, 12))) for _ in range(n)]


@pytest.fixture(scope="module")
def slow_grep_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("slow-grep")
    rnd = random.Random(0)
    words = _words(rnd, "abcdefghij0123456789", 3000)
    body = "".join(" ".join(rnd.choice(words) for _ in range(12)) + "\n" for _ in range(20000)) * 10
    (root / "big0.txt").write_text(body)  # ~17 MB
    for i in range(1, 4):
        os.link(root / "big0.txt", root / f"big{i}.txt")
    return root


@pytest.fixture(scope="module")
def slow_bm25_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """~16 MiB over 150 files, each under bm25's 512 KiB per-file limit: a second or more to rank."""
    root = tmp_path_factory.mktemp("slow-bm25")
    rnd = random.Random(1)
    words = _words(rnd, "abcdefghij", 5000)
    for i in range(150):
        lines = [" ".join(rnd.choice(words) for _ in range(10)) + " alpha\n" for _ in range(300)]
        (root / f"f{i:03d}.txt").write_text("".join(lines) * 5)
    return root


def _stray_errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    gc.collect()  # an unretrieved future is logged when it is collected
    return [r.getMessage() for r in caplog.records if "never retrieved" in r.getMessage()]


def _search(agent: Agent, root: Path, args: dict[str, object], stop: str, caplog: pytest.LogCaptureFixture):  # type: ignore[no-untyped-def]
    import tools.search.bm25  # noqa: F401  numpy's first import is not what the deadline measures

    options = {"tool_timeouts_ms": {"search": STOP_AFTER_MS}} if stop == "timeout" else {}
    s = agent.session(
        str(root), options=SessionOptions(permission_policy=PermissionPolicy(allow=["search"]), **options)
    )
    s.model_tool_call("search", {"mode": "glob", "query": "*.none"})  # session start-up off the clock
    caplog.set_level(logging.ERROR, logger="asyncio")
    if stop == "timeout":
        return s.model_tool_call("search", args).error_kind
    fut = s.tool_async("search", args)
    time.sleep(STOP_AFTER_MS / 1000)
    assert s.active_tools(), "the scan ended before it could be cancelled"
    fut.cancel()  # type: ignore[attr-defined]
    deadline = time.monotonic() + 10
    while s.active_tools() and time.monotonic() < deadline:
        time.sleep(0.02)
    ends = [e for e in s.events() if e.type == "tool_end"]
    return ends[-1].data["error_kind"]


@pytest.mark.skipif(shutil.which("rg") is None, reason="rg is not installed")
@pytest.mark.parametrize("stop", ["timeout", "cancel"])
def test_k8_q2_stopped_grep_leaves_no_unretrieved_future(
    slow_grep_tree: Path, stop: str, caplog: pytest.LogCaptureFixture
) -> None:
    with Agent() as agent:
        kind = _search(
            agent,
            slow_grep_tree,
            {"mode": "grep", "query": SLOW_RG_PATTERN, "output_mode": "count"},
            stop,
            caplog,
        )
        time.sleep(0.5)  # the scan notices its stop flag and ends
    assert kind is not None and kind["type"] == ("timeout" if stop == "timeout" else "cancelled")
    assert _stray_errors(caplog) == []


@pytest.mark.parametrize("stop", ["timeout", "cancel"])
def test_k8_q5_stopped_bm25_leaves_no_unretrieved_future(
    slow_bm25_tree: Path, stop: str, caplog: pytest.LogCaptureFixture
) -> None:
    with Agent() as agent:
        kind = _search(agent, slow_bm25_tree, {"mode": "bm25", "query": "alpha"}, stop, caplog)
        time.sleep(0.5)
    assert kind is not None and kind["type"] == ("timeout" if stop == "timeout" else "cancelled")
    assert _stray_errors(caplog) == []


class _EndlessDirectory(LocalWorkspace):
    """A listing that never ends on its own: only its ``check`` (deadline, cancel) stops it."""

    def list_page(self, path, after, limit, check=lambda: None):  # type: ignore[no-untyped-def]
        while True:
            check()
            time.sleep(0.002)


async def test_k6_cancelled_ls_page_leaves_no_unretrieved_future(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="asyncio")
    ctx = make_context(_EndlessDirectory(tmp_path))
    task = asyncio.ensure_future(ls.TOOL.run(ctx, ls.TOOL.validate({"path": "."})))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0.1)  # the page's thread notices its stop flag and raises Cancelled
    assert _stray_errors(caplog) == []
