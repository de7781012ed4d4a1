"""Scan-capped backends report incomplete results (SPEC Q-3, S-3): the object-store workspace."""

from __future__ import annotations

import pytest

from kernel.objectstore import ObjectStoreWorkspace
from orchestrator import Agent

OBJECTS = {f"logs/{i:03d}.txt": f"entry {i}\nstatus=ok\n".encode() for i in range(50)}


@pytest.fixture()
def capped() -> ObjectStoreWorkspace:
    return ObjectStoreWorkspace("bucket", OBJECTS, max_scan_objects=20)


def test_s3_object_store_offers_only_read_and_search_tools(
    agent: Agent, capped: ObjectStoreWorkspace
) -> None:
    names = set(agent.session(capped).tool_names())
    assert {"read", "ls", "search", "batch"} <= names
    assert not names & {"write", "edit", "patch", "bash", "git", "download"}


@pytest.mark.parametrize("mode", ["summary", "content", "files_with_matches", "count"])
def test_q3_grep_on_a_capped_scan_sets_truncated_and_warns(
    agent: Agent, capped: ObjectStoreWorkspace, mode: str
) -> None:
    res = agent.session(capped).tool("search", {"mode": "grep", "query": "status=ok", "output_mode": mode})
    assert res.exit_code == 0, res.output
    assert res.metadata["search"]["truncated"] is True
    assert res.metadata["search"]["matching_files"] == 20  # what the capped scan could see
    if mode in ("summary", "content"):
        assert "Warning" in res.output


def test_q3_glob_on_a_capped_scan_sets_truncated_and_warns(
    agent: Agent, capped: ObjectStoreWorkspace
) -> None:
    res = agent.session(capped).tool("search", {"mode": "glob", "query": "logs/*.txt", "sort": "path"})
    assert res.metadata["search"]["truncated"] is True and len(res.metadata["paths"]) == 20
    assert "Warning: the backend capped its scan" in res.output


def test_q3_uncapped_scan_is_complete(agent: Agent) -> None:
    ws = ObjectStoreWorkspace("bucket", OBJECTS, max_scan_objects=1000)
    res = agent.session(ws).tool("search", {"mode": "grep", "query": "status=ok", "output_mode": "summary"})
    assert res.metadata["search"] == {"matching_lines": 50, "matching_files": 50, "truncated": False}
    assert "Warning" not in res.output


def test_q3_bm25_reports_the_capped_backend(agent: Agent, capped: ObjectStoreWorkspace) -> None:
    res = agent.session(capped).tool("search", {"mode": "bm25", "query": "status entry"})
    assert res.exit_code == 0, res.output
    assert res.metadata["candidate_search"]["backend_truncated"] is True


def test_s2_ls_lists_one_level_of_an_object_store(agent: Agent) -> None:
    ws = ObjectStoreWorkspace("bucket", {"a.txt": b"x", "logs/1.txt": b"y", "logs/deep/2.txt": b"z"})
    s = agent.session(ws)
    top = s.tool("ls", {})
    assert [(e["name"], e["kind"]) for e in top.metadata["entries"]] == [("a.txt", "file"), ("logs", "dir")]
    logs = s.tool("ls", {"path": "logs"})
    assert [e["name"] for e in logs.metadata["entries"]] == ["1.txt", "deep"]
    assert s.read_file("logs/deep/2.txt").endswith("z\n")
