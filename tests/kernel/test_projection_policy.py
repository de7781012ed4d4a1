"""Policy validation, presets, digest and binding vectors (SPEC R-1, R-2, R-4; REFERENCE §6.1)."""

from __future__ import annotations

import pytest

from kernel.artifacts import MemoryArtifactStore
from kernel.errors import InvalidArgument, KernelFault
from kernel.projection import Projector, ToolResultTransformPolicyV1, validate_binding

P = ToolResultTransformPolicyV1
CE_POLICY_DIGEST = "sha256:645f65e5d39e3f7aa77fade21ae2daa1e8ccbbc7a0775c94a7f2c38ec5f5b32d"
CE_BINDING_DIGEST = "sha256:906e9931692fa7860b7acb5fc0bb5c329f19aeb04976c913750893ad99cd5a27"


def test_r2_conservative_preset_values() -> None:
    assert P.conservative().to_json() == {
        "schema": "a3s.code.tool-result-transform-policy.v1",
        "max_output_bytes": 102400,
        "head_bytes": 102400,
        "tail_bytes": 0,
        "fold_repeated_lines": False,
        "repeated_line_threshold": 3,
        "structured_sample_items": 0,
    }
    assert P() == P.conservative()
    assert P.conservative().is_compatibility_profile


def test_r2_context_efficient_preset_values() -> None:
    assert P.context_efficient().to_json() == {
        "schema": "a3s.code.tool-result-transform-policy.v1",
        "max_output_bytes": 102400,
        "head_bytes": 65536,
        "tail_bytes": 32768,
        "fold_repeated_lines": True,
        "repeated_line_threshold": 3,
        "structured_sample_items": 32,
    }
    assert not P.context_efficient().is_compatibility_profile


def test_r1_presets_validate() -> None:
    P.conservative().validate_policy()
    P.context_efficient().validate_policy()


def test_r1_policy_digest_and_binding_vectors() -> None:
    policy = P.context_efficient()
    assert policy.digest() == CE_POLICY_DIGEST
    binding = policy.binding()
    assert binding == {
        "schema": "a3s.code.tool-result-transform-binding.v1",
        "transform_algorithm": "a3s.code.tool-result-transform.v1",
        "policy_digest": CE_POLICY_DIGEST,
        "binding_digest": CE_BINDING_DIGEST,
    }
    assert validate_binding(binding) == binding
    assert P.conservative().digest() != CE_POLICY_DIGEST


def test_r1_digest_changes_with_any_field() -> None:
    base = P.context_efficient()
    variants = [
        base.replace(**{"structured_sample_items": 33}),
        base.replace(**{"repeated_line_threshold": 4}),
        base.replace(**{"fold_repeated_lines": False}),
        base.replace(**{"tail_bytes": 32767}),
    ]
    assert len({v.digest() for v in variants} | {base.digest()}) == 5


@pytest.mark.parametrize(
    ("update", "message"),
    [
        ({"schema_": "a3s.code.tool-result-transform-policy.v2"}, "schema"),
        ({"max_output_bytes": 1023, "head_bytes": 1023}, "max_output_bytes"),
        ({"max_output_bytes": 102401, "head_bytes": 102401}, "max_output_bytes"),
        ({"head_bytes": 0, "max_output_bytes": 102400, "tail_bytes": 1024}, "head_bytes must be positive"),
        ({"tail_bytes": -1}, "tail_bytes"),
        # head + tail + 512 > max and not the compatibility profile
        ({"head_bytes": 65536, "tail_bytes": 36353}, "reserve 512"),
        ({"head_bytes": 102000, "tail_bytes": 0}, "reserve 512"),
        ({"repeated_line_threshold": 1}, "repeated_line_threshold"),
        ({"repeated_line_threshold": 10001}, "repeated_line_threshold"),
        ({"structured_sample_items": 1025}, "structured_sample_items"),
        ({"structured_sample_items": -1}, "structured_sample_items"),
    ],
)
def test_r4_validate_rejects_each_rule(update: dict[str, object], message: str) -> None:
    policy = P.context_efficient().replace(**update)
    with pytest.raises(InvalidArgument, match=message):
        policy.validate_policy()
    with pytest.raises(InvalidArgument):
        policy.digest()


@pytest.mark.parametrize(
    "update",
    [
        {"max_output_bytes": 1024, "head_bytes": 1024, "tail_bytes": 0},  # compatibility profile at the floor
        {"max_output_bytes": 1024, "head_bytes": 256, "tail_bytes": 256},  # exactly the 512 reserve
        {"head_bytes": 101888, "tail_bytes": 0},  # tail 0 but head < max: reserve applies and holds
        {"repeated_line_threshold": 2},
        {"repeated_line_threshold": 10000},
        {"structured_sample_items": 1024},
        {"structured_sample_items": 0},
    ],
)
def test_r4_validate_accepts_boundaries(update: dict[str, object]) -> None:
    P.context_efficient().replace(**update).validate_policy()


def test_r1_json_round_trip_and_unknown_fields_denied() -> None:
    policy = P.context_efficient()
    assert P.from_json(policy.to_json()) == policy
    with pytest.raises(InvalidArgument, match="surprise: Extra inputs"):
        P.from_json({**policy.to_json(), "surprise": 1})
    with pytest.raises(InvalidArgument):
        P.from_json({**{k: v for k, v in policy.to_json().items() if k != "schema"}, "schema_": "x"})
    with pytest.raises(InvalidArgument, match="max_output_bytes"):
        P.from_json({**policy.to_json(), "max_output_bytes": "102400"})  # no string coercion
    with pytest.raises(InvalidArgument, match="fold_repeated_lines"):
        P.from_json({**policy.to_json(), "fold_repeated_lines": 1})
    with pytest.raises(InvalidArgument, match="reserve"):
        P.from_json({**policy.to_json(), "tail_bytes": 40000})  # parsed, then validated
    with pytest.raises(InvalidArgument):
        P.from_json([1, 2])


def test_r1_policy_is_frozen() -> None:
    import dataclasses

    with pytest.raises(dataclasses.FrozenInstanceError):
        P.conservative().head_bytes = 5  # type: ignore[misc]


@pytest.mark.parametrize(
    "field, value",
    [("max_output_bytes", "102400"), ("head_bytes", True), ("fold_repeated_lines", 1), ("schema", None)],
)
def test_r1_constructor_types_are_strict(field: str, value: object) -> None:
    """serde's wire types, in Python too: no string coercion, a bool is no size, 1 is no bool."""
    with pytest.raises(InvalidArgument, match=field):
        P(**{field: value})  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match=field):
        P.context_efficient().replace(**{field: value})


def test_r1_schema_alias_and_copies() -> None:
    assert P(schema_="x").schema_ == "x" == P(schema="x").to_json()["schema"]
    copy = P.context_efficient().replace(tail_bytes=1024)
    assert copy.tail_bytes == 1024 and copy.head_bytes == P.context_efficient().head_bytes
    assert P.context_efficient() == P.context_efficient().replace()
    assert hash(P.context_efficient()) == hash(P.context_efficient().replace())


def test_r1_validate_binding_rejects_tampering() -> None:
    binding = P.context_efficient().binding()
    with pytest.raises(InvalidArgument, match="does not bind"):
        validate_binding({**binding, "policy_digest": "sha256:" + "0" * 64})
    with pytest.raises(InvalidArgument, match="canonical"):
        validate_binding({**binding, "binding_digest": "sha256:" + "A" * 64})
    with pytest.raises(InvalidArgument, match="exactly the fields"):
        validate_binding({**binding, "extra": "x"})
    with pytest.raises(InvalidArgument, match="algorithm"):
        validate_binding({**binding, "transform_algorithm": "v2"})


def test_r1_projector_rejects_result_with_drifted_binding() -> None:
    projector = Projector(P.context_efficient(), MemoryArtifactStore())
    other = P.conservative().binding()
    with pytest.raises(KernelFault, match="drifted before result release"):
        projector.project("bash", "x", {"a3s_tool_result_transform_binding": other})
    with pytest.raises(KernelFault, match="invalid"):
        projector.project("bash", "x", {"a3s_tool_result_transform_binding": {"schema": "junk"}})
    # The same binding passes.
    _, meta = projector.project(
        "bash", "x", {"a3s_tool_result_transform_binding": P.context_efficient().binding()}
    )
    assert meta["a3s_tool_result_transform_binding"]["binding_digest"] == CE_BINDING_DIGEST


def test_r1_projector_refuses_invalid_policy() -> None:
    with pytest.raises(InvalidArgument):
        Projector(P.context_efficient().replace(**{"tail_bytes": 50000}), MemoryArtifactStore())
