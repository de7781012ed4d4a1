"""A producer that bounded its own output declares it; evidence tells the truth (SPEC R-6; issue 15 item 9)."""

from __future__ import annotations

import hashlib

import pytest

from kernel.artifacts import MemoryArtifactStore
from kernel.errors import KernelFault
from kernel.projection import EVIDENCE_METADATA_KEY, Projector, ToolResultTransformPolicyV1
from kernel.projection.bounded import BOUNDED_OUTPUT_KEY, BoundedOutput, declare

P = ToolResultTransformPolicyV1
REAL = b"x" * 5_000_000
REAL_DIGEST = "sha256:" + hashlib.sha256(REAL).hexdigest()


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _declared(**kw) -> dict:
    meta: dict = {"tool": "meta"}
    declare(
        meta, BoundedOutput(len(REAL), REAL_DIGEST, kw.pop("loss_mode", "head_tail"), kw.pop("ref", None))
    )
    return meta


def test_r6_declared_original_size_digest_and_loss_mode_replace_the_views():
    view = "head…[cut]…tail"
    projected, meta = Projector(P.conservative(), MemoryArtifactStore()).project("bash", view, _declared())
    evidence = meta[EVIDENCE_METADATA_KEY]
    assert projected == view and BOUNDED_OUTPUT_KEY not in meta and meta["tool"] == "meta"
    assert evidence["original_bytes"] == len(REAL) and evidence["loss_mode"] == "head_tail"
    assert evidence["content_digest"] == evidence["repeat_key"] == REAL_DIGEST
    assert evidence["projected_bytes"] == len(view.encode()) and evidence["projected_digest"] == _sha(
        view.encode()
    )
    assert evidence["byte_delta"] == len(view.encode()) - len(REAL)
    assert evidence["original_estimated_tokens"] == (len(REAL) + 3) // 4
    # Not retained: content_ref names what is, by its own digest (not the original's).
    assert evidence["content_ref"] == "inline:" + _sha(view.encode()) != "inline:" + REAL_DIGEST
    assert "artifact" not in meta


def test_r6_cut_of_a_retained_original_points_at_it_once():
    store = MemoryArtifactStore()
    uri = store.put("bash", REAL)
    view = "line\n" * 40_000 + f"\n\n[Full output artifact: {uri}]"
    projected, meta = Projector(P.context_efficient(), store).project("bash", view, _declared(ref=uri))
    evidence = meta[EVIDENCE_METADATA_KEY]
    assert evidence["loss_mode"] == "composite" and evidence["content_ref"] == uri
    assert projected.count(uri) == 1 and projected.endswith(f"[Full output artifact: {uri}]")
    assert meta["artifact"]["artifact_uri"] == uri and meta["artifact"]["original_bytes"] == len(REAL)
    assert len(store) == 1  # nothing else stored: the original is already there


def test_r6_declared_retained_original_is_the_content_ref():
    store = MemoryArtifactStore()
    uri = store.put("bash", b"the full original")
    _, meta = Projector(P.conservative(), store).project("bash", "view", _declared(ref=uri))
    assert meta[EVIDENCE_METADATA_KEY]["content_ref"] == uri
    assert store.get(uri) == b"the full original"


def test_r6_declared_and_cut_again_by_the_projection_is_composite():
    store = MemoryArtifactStore()
    view = "line\n" * 40_000  # 200 KB: over the context-efficient head+tail
    projected, meta = Projector(P.context_efficient(), store).project("bash", view, _declared())
    evidence = meta[EVIDENCE_METADATA_KEY]
    assert evidence["loss_mode"] == "composite" and evidence["original_bytes"] == len(REAL)
    assert evidence["content_ref"] == meta["artifact"]["artifact_uri"]
    assert store.get(evidence["content_ref"]) == view.encode()  # the most complete view kept
    assert len(projected.encode()) <= P.context_efficient().max_output_bytes


def test_r6_undeclared_results_keep_their_evidence_unchanged():
    _, meta = Projector(P.conservative(), MemoryArtifactStore()).project("bash", "small", {})
    evidence = meta[EVIDENCE_METADATA_KEY]
    assert evidence["loss_mode"] == "none" and evidence["original_bytes"] == 5
    assert evidence["content_ref"] == "inline:" + _sha(b"small")


@pytest.mark.parametrize(
    "bad",
    [
        "not an object",
        {"original_bytes": -1, "content_digest": REAL_DIGEST, "loss_mode": "head_tail"},
        {"original_bytes": True, "content_digest": REAL_DIGEST, "loss_mode": "head_tail"},
        {"original_bytes": 10, "content_digest": "sha256:zz", "loss_mode": "head_tail"},
        {"original_bytes": 10, "content_digest": REAL_DIGEST, "loss_mode": "none"},
        {
            "original_bytes": 10,
            "content_digest": REAL_DIGEST,
            "loss_mode": "head_tail",
            "content_ref": "/etc/x",
        },
    ],
)
def test_r6_malformed_declaration_is_a_kernel_fault(bad):
    with pytest.raises(KernelFault):
        Projector(P.conservative(), MemoryArtifactStore()).project("t", "out", {BOUNDED_OUTPUT_KEY: bad})
