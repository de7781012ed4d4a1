"""Evidence ``a3s.code.tool-result-evidence.v1`` and metadata assembly (SPEC R-6; REFERENCE §6.3).

Every released result's metadata carries ``a3s_tool_result_evidence`` and the transform binding.
Token figures are harness observations (``utf8-bytes-ceil-div-4/v1``), not billing. Invariants:
``byte_delta == projected_bytes - original_bytes``; ``repeat_key == content_digest``;
``content_ref`` is the artifact URI when the projection lost anything, else
``inline:sha256:<hex>`` of the original — unless the producer bounded the output itself
(``kernel.projection.bounded``). Non-object metadata is kept under ``previous_metadata``.
"""

from __future__ import annotations

import hashlib
from typing import Any

from kernel.errors import InvalidArgument, KernelFault
from kernel.projection.policy import BINDING_METADATA_KEY, TRANSFORM_ALGORITHM, validate_binding

EVIDENCE_SCHEMA = "a3s.code.tool-result-evidence.v1"
EVIDENCE_METADATA_KEY = "a3s_tool_result_evidence"
TOKEN_ESTIMATOR = "utf8-bytes-ceil-div-4/v1"
ARTIFACT_METADATA_KEY = "artifact"
PREVIOUS_METADATA_KEY = "previous_metadata"
LOSS_MODES = ("none", "bounded_preview", "head_tail", "deterministic_transform", "composite")


def estimated_tokens(byte_count: int) -> int:
    """``ceil(bytes / 4)``: the ``utf8-bytes-ceil-div-4/v1`` estimator."""
    return (byte_count + 3) // 4


def build_evidence(
    *,
    original_bytes: int,
    original_sha256_hex: str,
    projected: bytes,
    loss_mode: str,
    artifact_uri: str | None,
    content_ref: str | None = None,
) -> dict[str, Any]:
    """The evidence document, fields in the reference's order.

    ``content_ref`` overrides the default reference (the artifact URI, else the inline digest of
    the original): for an original the producer did not retain (``kernel.projection.bounded``).
    """
    if loss_mode not in LOSS_MODES:
        raise KernelFault(f"unknown loss mode {loss_mode!r}")
    digest = "sha256:" + original_sha256_hex
    original_tokens = estimated_tokens(original_bytes)
    projected_tokens = estimated_tokens(len(projected))
    return {
        "schema": EVIDENCE_SCHEMA,
        "original_bytes": original_bytes,
        "projected_bytes": len(projected),
        "original_estimated_tokens": original_tokens,
        "projected_estimated_tokens": projected_tokens,
        "token_estimator": TOKEN_ESTIMATOR,
        "transform_algorithm": TRANSFORM_ALGORITHM,
        "content_digest": digest,
        "projected_digest": "sha256:" + hashlib.sha256(projected).hexdigest(),
        "repeat_key": digest,
        "content_ref": content_ref
        if content_ref is not None
        else (artifact_uri if artifact_uri is not None else "inline:" + digest),
        "loss_mode": loss_mode,
        "byte_delta": len(projected) - original_bytes,
        "estimated_token_delta": projected_tokens - original_tokens,
    }


def as_object(metadata: Any) -> dict[str, Any]:
    """A fresh dict to extend: a copy of an object, ``{}`` for None, else ``{previous_metadata: …}``."""
    if metadata is None:
        return {}
    if isinstance(metadata, dict):
        return dict(metadata)
    return {PREVIOUS_METADATA_KEY: metadata}


def check_binding(metadata: Any, binding: dict[str, str]) -> None:
    """A result that already carries a binding must carry exactly the session's current one."""
    if not isinstance(metadata, dict) or BINDING_METADATA_KEY not in metadata:
        return
    try:
        retained = validate_binding(metadata[BINDING_METADATA_KEY])
    except InvalidArgument as exc:
        raise KernelFault(f"tool result transform binding is invalid: {exc.message}") from exc
    if retained != binding:
        raise KernelFault("tool result transform binding drifted before result release")
