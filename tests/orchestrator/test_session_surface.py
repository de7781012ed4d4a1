"""The session surface and snapshots (SPEC S-1..S-3, R-5, X-1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernel import SessionOptions, ToolResultTransformPolicyV1
from kernel.errors import InvalidArgument, NotFound
from kernel.workspace import LocalWorkspace
from orchestrator import Agent


def test_s1_tool_names_and_definitions_are_sorted_and_hide_hidden_tools(
    agent: Agent, workspace: Path
) -> None:
    s = agent.session(workspace)
    s.register_tool(
        "zz_hidden", lambda a: "x", description="alias", parameters={"type": "object"}, visible=False
    )
    names = s.tool_names()
    assert names == sorted(names) and "zz_hidden" in names and {"read", "ls", "batch"} <= set(names)
    defs = s.tool_definitions()
    assert [d["name"] for d in defs] == sorted(d["name"] for d in defs)
    assert "zz_hidden" not in {d["name"] for d in defs}
    assert s.tool("zz_hidden", {}).output == "x"  # hidden stays callable (S-3)
    read_def = next(d for d in defs if d["name"] == "read")
    assert read_def["parameters"]["additionalProperties"] is False
    assert read_def["parameters"]["$schema"] == "https://json-schema.org/draft/2020-12/schema"


def test_s3_read_only_workspace_hides_mutating_tools(agent: Agent, workspace: Path) -> None:
    ro = agent.session(LocalWorkspace(workspace, writable=False))
    names = set(ro.tool_names())
    assert {"read", "ls"} <= names
    assert not names & {"write", "edit", "patch", "bash", "download"}
    rw = set(agent.session(workspace).tool_names())
    assert names < rw


def test_r5_snapshot_pins_policy_and_resume_inherits_or_rejects(agent: Agent, workspace: Path) -> None:
    ce = ToolResultTransformPolicyV1.context_efficient()
    s = agent.session(workspace, SessionOptions(tool_result_transform_policy=ce))
    s.tool("ls", {})
    snap = s.snapshot()
    assert snap["config"]["tool_result_transform_policy"] == ce.to_json()
    assert snap["budget_used"]["tool_calls"] == 1
    resumed = agent.resume(snap)
    assert resumed.id == s.id
    assert resumed.kernel.projector.policy.digest() == ce.digest()
    same = agent.resume(
        snap, SessionOptions(tool_result_transform_policy=ToolResultTransformPolicyV1.context_efficient())
    )
    assert same.id == s.id
    with pytest.raises(InvalidArgument):
        agent.resume(
            snap, SessionOptions(tool_result_transform_policy=ToolResultTransformPolicyV1.conservative())
        )
    drifted = dict(
        snap, transform_binding={**snap["transform_binding"], "policy_digest": "sha256:" + "0" * 64}
    )
    with pytest.raises(InvalidArgument):
        agent.resume(drifted)


def test_r5_snapshot_is_json_and_rebuilds_in_a_fresh_agent(workspace: Path) -> None:
    import json

    with Agent() as a1:
        s = a1.session(workspace)
        s.tool("read", {"file_path": "README.md"})
        text = json.dumps(s.snapshot())
    with Agent() as a2:
        again = a2.resume(json.loads(text))
        assert again.read_file("README.md").startswith("     1\t# demo")


def test_x1_direct_helpers_return_types(agent: Agent, workspace: Path) -> None:
    s = agent.session(workspace)
    text = s.read_file("notes.txt", offset=2, limit=1)
    assert isinstance(text, str) and text.startswith("     3\tline 3")
    listing = s.ls()
    assert listing.exit_code == 0 and "README.md" in listing.output
    with pytest.raises(NotFound):
        s.read_file("missing.txt")


def test_r6_lossy_output_is_readable_back_as_artifact(agent: Agent, workspace: Path) -> None:
    big = "".join(f"row {i} " + "x" * 100 + "\n" for i in range(3000))
    s = agent.session(workspace)
    s.register_tool("big", lambda a: big, description="x", parameters={"type": "object"})
    res = s.tool("big", {})
    ev = res.metadata["a3s_tool_result_evidence"]
    assert ev["schema"] == "a3s.code.tool-result-evidence.v1"
    assert ev["loss_mode"] == "bounded_preview" and ev["original_bytes"] == len(big)
    assert len(res.output.encode()) < len(big)
    assert s.read_artifact(ev["content_ref"]).decode() == big
    small = s.tool("ls", {})
    assert small.metadata["a3s_tool_result_evidence"]["content_ref"].startswith("inline:sha256:")
