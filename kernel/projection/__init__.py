"""Tool-result projection and evidence (SPEC R-1..R-6, B-3; REFERENCE §6).

``ToolResultTransformPolicyV1`` is the per-session policy, ``Projector`` applies it to each result
(bounded output, evidence, binding, artifact for the lossless original), and
``compact_change_metadata`` keeps big before/after contents out of events.
"""

from kernel.projection.change import compact_change_metadata
from kernel.projection.evidence import EVIDENCE_METADATA_KEY, EVIDENCE_SCHEMA, TOKEN_ESTIMATOR
from kernel.projection.policy import (
    BINDING_METADATA_KEY,
    BINDING_SCHEMA,
    POLICY_SCHEMA,
    TRANSFORM_ALGORITHM,
    ToolResultTransformPolicyV1,
    validate_binding,
)
from kernel.projection.projector import Projector
from kernel.projection.transform import LossMode, output_limit

__all__ = [
    "BINDING_METADATA_KEY",
    "BINDING_SCHEMA",
    "EVIDENCE_METADATA_KEY",
    "EVIDENCE_SCHEMA",
    "POLICY_SCHEMA",
    "TOKEN_ESTIMATOR",
    "TRANSFORM_ALGORITHM",
    "LossMode",
    "Projector",
    "ToolResultTransformPolicyV1",
    "compact_change_metadata",
    "output_limit",
    "validate_binding",
]
