"""When bash capture cut the output, evidence says so (SPEC R-6, B-2; issue 15 item 9).

``original_bytes`` is every byte the command printed, ``content_digest`` the SHA-256 of both
streams merged line by line in arrival order, ``loss_mode`` is lossy; the original is an artifact when it is
at most 1 MiB, else ``content_ref`` names the retained capture by its own digest.
"""

from __future__ import annotations

import hashlib

from kernel.artifacts import MemoryArtifactStore
from kernel.projection import EVIDENCE_METADATA_KEY, Projector, ToolResultTransformPolicyV1
from kernel.projection.bounded import BOUNDED_OUTPUT_KEY
from kernel.testing import make_context
from kernel.workspace import LocalWorkspace
from orchestrator.agent import Agent
from tools.bash import TOOL
from tools.bash.capture import OUTPUT_MAX_BYTES, RETAIN_FULL_MAX_BYTES


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


async def _projected(tmp_path, command: str, store: MemoryArtifactStore | None = None):
    store = store if store is not None else MemoryArtifactStore()
    ctx = make_context(LocalWorkspace(tmp_path), tool_name="bash", artifacts=store)
    result = await TOOL.run(ctx, TOOL.validate({"command": command}))
    projected, meta = Projector(ToolResultTransformPolicyV1.conservative(), store).project(
        "bash", result.output, result.metadata
    )
    return result, projected, meta, store


async def test_r6_b2_output_over_the_retention_cap_reports_its_real_size_and_digest(tmp_path):
    total = 3_000_000
    result, projected, meta, store = await _projected(tmp_path, f"yes | head -c {total}")
    evidence = meta[EVIDENCE_METADATA_KEY]
    assert result.metadata["output"]["truncated"] is True and BOUNDED_OUTPUT_KEY not in meta
    assert evidence["original_bytes"] == total > RETAIN_FULL_MAX_BYTES
    assert evidence["content_digest"] == evidence["repeat_key"] == _sha(b"y\n" * (total // 2))
    assert evidence["loss_mode"] == "head_tail"
    assert evidence["byte_delta"] == evidence["projected_bytes"] - total < 0
    # Not retained: the reference names the capture (its own digest), never the original's.
    assert evidence["content_ref"] == "inline:" + _sha(projected.encode())
    assert result.metadata["output"]["full_output_uri"] is None and len(store) == 0
    assert len(projected.encode()) <= OUTPUT_MAX_BYTES


async def test_r6_b2_truncated_output_within_the_cap_is_kept_whole_as_an_artifact(tmp_path):
    command = "for i in $(seq 1 30000); do echo out$i; echo err$i >&2; done"
    result, projected, meta, store = await _projected(tmp_path, command)
    evidence = meta[EVIDENCE_METADATA_KEY]
    uri = evidence["content_ref"]
    assert uri.startswith("a3s://tool-output/bash/") and uri == result.metadata["output"]["full_output_uri"]
    full = store.get(uri)
    assert _sha(full) == evidence["content_digest"] and len(full) == evidence["original_bytes"]
    assert len(full) == result.metadata["output"]["total_bytes"] and evidence["loss_mode"] == "head_tail"
    lines = full.decode().split("\n")
    assert {f"out{i}" for i in range(1, 30001)} | {f"err{i}" for i in range(1, 30001)} <= set(lines)
    assert (
        projected.endswith(f"[Full output artifact: {uri}]") and len(projected.encode()) <= OUTPUT_MAX_BYTES
    )


async def test_r6_b2_untruncated_output_has_lossless_evidence(tmp_path):
    result, projected, meta, store = await _projected(tmp_path, "echo hi; echo there >&2")
    evidence = meta[EVIDENCE_METADATA_KEY]
    assert evidence["loss_mode"] == "none" and evidence["original_bytes"] == len(projected.encode())
    assert "full_output_uri" not in result.metadata["output"] and len(store) == 0


def test_r6_b2_session_call_evidence_through_the_kernel(tmp_path):
    with Agent() as agent:
        session = agent.session(tmp_path)
        result = session.tool("bash", {"command": "seq 1 100000"})
        evidence = result.metadata[EVIDENCE_METADATA_KEY]
        expected = "".join(f"{i}\n" for i in range(1, 100001)).encode()
        assert evidence["original_bytes"] == len(expected) and evidence["content_digest"] == _sha(expected)
        assert evidence["loss_mode"] == "head_tail"
        assert session.read_artifact(evidence["content_ref"]) == expected
