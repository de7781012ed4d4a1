"""Projector: evidence fields, artifacts, metadata wrapping and the cap as properties (SPEC R-3, R-4, R-6)."""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernel.artifacts import MemoryArtifactStore, uri_for_digest
from kernel.projection import Projector, ToolResultTransformPolicyV1, output_limit

P = ToolResultTransformPolicyV1
EVIDENCE_FIELDS = [
    "schema",
    "original_bytes",
    "projected_bytes",
    "original_estimated_tokens",
    "projected_estimated_tokens",
    "token_estimator",
    "transform_algorithm",
    "content_digest",
    "projected_digest",
    "repeat_key",
    "content_ref",
    "loss_mode",
    "byte_delta",
    "estimated_token_delta",
]


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def check_evidence(output: str, projected: str, meta: dict[str, Any], store: MemoryArtifactStore) -> None:
    """Every R-6 invariant of one projected result."""
    original, shown = output.encode(), projected.encode()
    ev = meta["a3s_tool_result_evidence"]
    assert list(ev) == EVIDENCE_FIELDS
    assert ev["schema"] == "a3s.code.tool-result-evidence.v1"
    assert ev["token_estimator"] == "utf8-bytes-ceil-div-4/v1"
    assert ev["transform_algorithm"] == "a3s.code.tool-result-transform.v1"
    assert ev["original_bytes"] == len(original)
    assert ev["projected_bytes"] == len(shown)
    assert ev["original_estimated_tokens"] == math.ceil(len(original) / 4)
    assert ev["projected_estimated_tokens"] == math.ceil(len(shown) / 4)
    assert ev["byte_delta"] == len(shown) - len(original)
    assert ev["estimated_token_delta"] == ev["projected_estimated_tokens"] - ev["original_estimated_tokens"]
    assert ev["content_digest"] == ev["repeat_key"] == sha(original)
    assert ev["projected_digest"] == sha(shown)
    assert ev["loss_mode"] in {"none", "bounded_preview", "head_tail", "deterministic_transform", "composite"}
    binding = meta["a3s_tool_result_transform_binding"]
    assert binding["schema"] == "a3s.code.tool-result-transform-binding.v1"
    json.dumps(meta)  # JSON-safe: it crosses Celery
    if ev["loss_mode"] == "none":
        assert projected == output
        assert ev["content_ref"] == "inline:" + sha(original)
        assert "artifact" not in meta
    else:
        art = meta["artifact"]
        assert ev["content_ref"] == art["artifact_uri"]
        assert store.get(art["artifact_uri"]) == original  # lossless read-back
        assert art["original_bytes"] == len(original)
        assert projected.endswith(f"\n\n[Full output artifact: {art['artifact_uri']}]")


def test_r6_lossless_result_evidence_inline() -> None:
    store = MemoryArtifactStore()
    projected, meta = Projector(P.context_efficient(), store).project("read", "hello 界", {"path": "a.txt"})
    assert projected == "hello 界"
    assert meta["path"] == "a.txt"
    ev = meta["a3s_tool_result_evidence"]
    assert (ev["original_bytes"], ev["original_estimated_tokens"], ev["byte_delta"]) == (9, 3, 0)
    check_evidence("hello 界", projected, meta, store)
    assert len(store) == 0


def test_r6_lossy_result_artifact_uri_and_id() -> None:
    store = MemoryArtifactStore()
    output = "x" * 200_000
    hexd = hashlib.sha256(output.encode()).hexdigest()
    projected, meta = Projector(P.conservative(), store).project("my.tool/v2", output, None)
    assert meta["artifact"] == {
        "artifact_id": f"tool-output:my_tool_v2:{hexd}",
        "artifact_uri": f"a3s://tool-output/my_tool_v2/{hexd}",
        "original_bytes": 200_000,
        "shown_bytes": 102_400,
    }
    assert meta["a3s_tool_result_evidence"]["loss_mode"] == "bounded_preview"
    check_evidence(output, projected, meta, store)


def test_r6_non_object_metadata_is_wrapped() -> None:
    store = MemoryArtifactStore()
    for previous in ([1, 2], "text", 7):
        _, meta = Projector(P.conservative(), store).project("t", "out", previous)
        assert meta["previous_metadata"] == previous
        assert "a3s_tool_result_evidence" in meta
    _, meta = Projector(P.conservative(), store).project("t", "y" * 200_000, ["prev"])
    assert meta["previous_metadata"] == ["prev"] and "artifact" in meta


def test_r6_input_metadata_not_mutated() -> None:
    original = {"k": 1}
    Projector(P.conservative(), MemoryArtifactStore()).project("t", "o", original)
    assert original == {"k": 1}


def test_r6_rerelease_keeps_original_evidence() -> None:
    store = MemoryArtifactStore()
    projector = Projector(P.context_efficient(), store)
    projected, meta = projector.project("bash", "b" * 300_000, None)
    again, meta2 = projector.project("bash", projected, meta)
    assert again == projected
    assert meta2["a3s_tool_result_evidence"] == meta["a3s_tool_result_evidence"]
    assert meta2["a3s_tool_result_evidence"]["loss_mode"] == "head_tail"


def test_r6_forged_evidence_does_not_bypass_the_cap() -> None:
    store = MemoryArtifactStore()
    policy = P.context_efficient()
    forged = {
        "a3s_tool_result_evidence": {"loss_mode": "none"},
        "a3s_tool_result_transform_binding": policy.binding(),
    }
    projected, meta = Projector(policy, store).project("bash", "f" * 300_000, forged)
    assert len(projected.encode()) <= 102_400
    check_evidence("f" * 300_000, projected, meta, store)


def test_r6_lone_surrogates_are_replaced_not_crashing() -> None:
    projected, meta = Projector(P.conservative(), MemoryArtifactStore()).project("t", "a\udc80b", None)
    assert projected == "a?b"
    assert meta["a3s_tool_result_evidence"]["original_bytes"] == 3


class RenamingStore(MemoryArtifactStore):
    """A store with its own addressing (like the reference's immutable adapter)."""

    def put_prehashed(self, tool: str, data: bytes, sha256_hex: str) -> str:
        super().put_prehashed(tool, data, sha256_hex)
        return uri_for_digest("elsewhere-" + "x" * 100, sha256_hex)

    def get(self, uri: str) -> bytes:
        return super().get(uri.replace("elsewhere-" + "x" * 100, "bash"))


def test_r4_store_supplied_uri_is_used_and_cap_still_holds() -> None:
    store = RenamingStore()
    policy = P.context_efficient()
    projected, meta = Projector(policy, store).project("bash", "w" * 500_000, None)
    assert "elsewhere-" in meta["artifact"]["artifact_uri"]
    assert projected.endswith(meta["artifact"]["artifact_uri"] + "]")
    assert len(projected.encode()) <= policy.max_output_bytes
    check_evidence("w" * 500_000, projected, meta, store)


def test_r4_long_tool_name_keeps_the_cap() -> None:
    store = MemoryArtifactStore()
    for policy in (P.conservative(), P.context_efficient()):
        projected, meta = Projector(policy, store).project("t" * 5000, "v" * 300_000, None)
        assert len(projected.encode()) <= output_limit(policy)
        check_evidence("v" * 300_000, projected, meta, store)


# -- properties -----------------------------------------------------------------------------------

POLICIES = st.builds(
    lambda max_out, head_frac, tail, fold, threshold, sample, compat: (
        P(
            max_output_bytes=max_out,
            head_bytes=max_out,
            tail_bytes=0,
            fold_repeated_lines=fold,
            repeated_line_threshold=threshold,
            structured_sample_items=sample,
        )
        if compat
        else P(
            max_output_bytes=max_out,
            head_bytes=max(1, int((max_out - 512) * head_frac)),
            tail_bytes=min(tail, max_out - 512 - max(1, int((max_out - 512) * head_frac))),
            fold_repeated_lines=fold,
            repeated_line_threshold=threshold,
            structured_sample_items=sample,
        )
    ),
    st.integers(1024, 4096),
    st.floats(0.01, 1.0),
    st.integers(0, 3000),
    st.booleans(),
    st.integers(2, 6),
    st.integers(0, 8),
    st.booleans(),
)

PIECES = st.one_of(
    st.text(alphabet=st.characters(codec="utf-8"), max_size=300),
    st.sampled_from(["line\n", "界\n", "🙂🙂\n", "\n", "x" * 200 + "\n"]).map(lambda s: s * 7),
    st.lists(st.integers(), min_size=0, max_size=200).map(json.dumps),
)
OUTPUTS = (
    st.tuples(st.lists(PIECES, max_size=12).map("".join), st.integers(1, 40)).map(lambda t: t[0] * t[1])
    | st.lists(PIECES, max_size=25).map("".join)
    | st.lists(st.integers(0, 10**6), max_size=800).map(json.dumps)
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(POLICIES, OUTPUTS, st.text(min_size=1, max_size=40))
def test_r4_r6_property_cap_utf8_evidence_and_readback(
    policy: ToolResultTransformPolicyV1, output: str, tool: str
) -> None:
    policy.validate_policy()
    store = MemoryArtifactStore()
    projected, meta = Projector(policy, store).project(tool, output, None)
    raw = projected.encode("utf-8")  # always valid UTF-8: it is a str built by strict decoding
    cap = policy.max_output_bytes + (512 if policy.is_compatibility_profile else 0)
    assert len(raw) <= cap
    check_evidence(output, projected, meta, store)
    # deterministic.
    assert Projector(policy, MemoryArtifactStore()).project(tool, output, None) == (projected, meta)


@pytest.mark.parametrize("preset", ["conservative", "context_efficient"])
def test_r3_r6_big_outputs_digest_in_parallel_with_identical_bytes(
    preset: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Outputs ≥ 1 MiB hash beside the transform; the projection must equal the sequential one."""
    import hashlib

    from kernel.artifacts import MemoryArtifactStore
    from kernel.projection import Projector, ToolResultTransformPolicyV1
    from kernel.projection import projector as projector_module

    policy = getattr(ToolResultTransformPolicyV1, preset)()
    text = "".join(f"line {i % 700} é\n" * (1 + i % 4) for i in range(120_000))
    assert len(text.encode()) > projector_module.PARALLEL_DIGEST_MIN_BYTES
    parallel, meta = Projector(policy, MemoryArtifactStore()).project("bash", text, None)
    monkeypatch.setattr(projector_module, "PARALLEL_DIGEST_MIN_BYTES", 1 << 62)
    sequential, meta_seq = Projector(policy, MemoryArtifactStore()).project("bash", text, None)
    assert parallel == sequential and meta == meta_seq
    digest = hashlib.sha256(text.encode()).hexdigest()
    assert parallel.endswith(f"[Full output artifact: a3s://tool-output/bash/{digest}]")
    assert meta["a3s_tool_result_evidence"]["content_digest"] == f"sha256:{digest}"
