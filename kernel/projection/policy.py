"""The tool-result transform policy and its binding (SPEC R-1, R-2, R-4; REFERENCE §6.1).

A policy is a frozen value pinned per session. Its identity is a domain-separated SHA-256 over
compact JSON in declared field order, so the same policy has the same digest in every process
and language; the binding digest ties that policy digest to the transform algorithm version.

Invariants:
- ``validate_policy`` enforces every rule of §6.1; ``from_json`` validates and denies unknown fields.
- Field types are strict, as serde's wire format is: ``"1024"`` is no size and ``1`` no bool. A plain
  frozen dataclass, not a pydantic model: the CLI's one-call path builds a policy, and pydantic is
  ~110 ms of start-up (issue 13 item 7).
- A non-compatibility policy keeps ``head + tail + 512 <= max``: the 512 bytes pay for the
  transform marker and the artifact line, which is what makes the output cap hold (R-4).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from kernel.errors import InvalidArgument

POLICY_SCHEMA = "a3s.code.tool-result-transform-policy.v1"
TRANSFORM_ALGORITHM = "a3s.code.tool-result-transform.v1"
BINDING_SCHEMA = "a3s.code.tool-result-transform-binding.v1"
BINDING_METADATA_KEY = "a3s_tool_result_transform_binding"
POLICY_DIGEST_DOMAIN = "a3s.code.tool-result-transform-policy-digest.v1"

MAX_OUTPUT_BYTES = 100 * 1024
MIN_OUTPUT_BYTES = 1024
MARKER_RESERVE_BYTES = 512
MIN_REPEATED_LINE_THRESHOLD = 2
MAX_REPEATED_LINE_THRESHOLD = 10_000
MAX_STRUCTURED_SAMPLE_ITEMS = 1024

# The wire fields in declared order (the order the digest depends on) and their exact types.
_FIELD_TYPES: dict[str, type] = {
    "schema": str,
    "max_output_bytes": int,
    "head_bytes": int,
    "tail_bytes": int,
    "fold_repeated_lines": bool,
    "repeated_line_threshold": int,
    "structured_sample_items": int,
}
_FIELD_ORDER = tuple(_FIELD_TYPES)


def compact_json(value: Any) -> bytes:
    """serde_json-compatible compact encoding for ASCII identity documents."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def domain_digest(domain: str, value: Any) -> str:
    """``sha256:<hex>`` of ``domain || 0x00 || compact_json(value)``."""
    h = hashlib.sha256(domain.encode("utf-8"))
    h.update(b"\x00")
    h.update(compact_json(value))
    return "sha256:" + h.hexdigest()


@dataclass(frozen=True, init=False)
class ToolResultTransformPolicyV1:
    """``a3s.code.tool-result-transform-policy.v1``; construct freely, check with ``validate_policy``.

    Keyword-only; the schema field is ``schema`` on the wire and as an argument, ``schema_`` as an
    attribute (``schema_=`` is accepted too). A value of the wrong type is ``InvalidArgument``."""

    schema_: str
    max_output_bytes: int
    head_bytes: int
    tail_bytes: int
    fold_repeated_lines: bool
    repeated_line_threshold: int
    structured_sample_items: int

    def __init__(
        self,
        *,
        schema: str = POLICY_SCHEMA,
        max_output_bytes: int = MAX_OUTPUT_BYTES,
        head_bytes: int = MAX_OUTPUT_BYTES,
        tail_bytes: int = 0,
        fold_repeated_lines: bool = False,
        repeated_line_threshold: int = 3,
        structured_sample_items: int = 0,
        schema_: str | None = None,
    ) -> None:
        values = {
            "schema": schema if schema_ is None else schema_,
            "max_output_bytes": max_output_bytes,
            "head_bytes": head_bytes,
            "tail_bytes": tail_bytes,
            "fold_repeated_lines": fold_repeated_lines,
            "repeated_line_threshold": repeated_line_threshold,
            "structured_sample_items": structured_sample_items,
        }
        for name, value in values.items():
            if type(value) is not _FIELD_TYPES[name]:  # exact: a bool is no size, a str subclass no schema
                raise InvalidArgument(
                    f"invalid tool result transform policy: {name}: expected "
                    f"{_FIELD_TYPES[name].__name__}, got {type(value).__name__}"
                )
        for name, value in values.items():
            object.__setattr__(self, "schema_" if name == "schema" else name, value)

    def replace(self, **changes: Any) -> ToolResultTransformPolicyV1:
        """A copy with ``changes`` (wire names), type-checked like the constructor."""
        return type(self)(**{**self.to_json(), **changes})

    @classmethod
    def conservative(cls) -> ToolResultTransformPolicyV1:
        """The default (R-2): the first 100 KiB, no folding, no sampling."""
        return cls()

    @classmethod
    def context_efficient(cls) -> ToolResultTransformPolicyV1:
        """64 KiB head + 32 KiB tail, fold runs of >= 3 identical lines, sample 32 array items (R-2)."""
        return cls(
            max_output_bytes=MAX_OUTPUT_BYTES,
            head_bytes=64 * 1024,
            tail_bytes=32 * 1024,
            fold_repeated_lines=True,
            repeated_line_threshold=3,
            structured_sample_items=32,
        )

    @property
    def is_compatibility_profile(self) -> bool:
        """tail 0 and head == max: the legacy "first N bytes" shape, exempt from the marker reserve."""
        return self.tail_bytes == 0 and self.head_bytes + self.tail_bytes == self.max_output_bytes

    def validate_policy(self) -> None:
        """Every rule of REFERENCE §6.1; raises ``InvalidArgument`` naming the broken rule."""
        if self.schema_ != POLICY_SCHEMA:
            raise InvalidArgument(f"unsupported tool result transform policy schema {self.schema_!r}")
        if not MIN_OUTPUT_BYTES <= self.max_output_bytes <= MAX_OUTPUT_BYTES:
            raise InvalidArgument(
                f"tool result max_output_bytes must be between {MIN_OUTPUT_BYTES} and {MAX_OUTPUT_BYTES}"
            )
        if self.head_bytes <= 0:
            raise InvalidArgument("tool result head_bytes must be positive")
        if self.tail_bytes < 0:
            raise InvalidArgument("tool result tail_bytes must not be negative")
        retained = self.head_bytes + self.tail_bytes
        if not self.is_compatibility_profile and retained + MARKER_RESERVE_BYTES > self.max_output_bytes:
            raise InvalidArgument(
                f"tool result head_bytes + tail_bytes must reserve {MARKER_RESERVE_BYTES} bytes "
                "for transformation evidence"
            )
        if not MIN_REPEATED_LINE_THRESHOLD <= self.repeated_line_threshold <= MAX_REPEATED_LINE_THRESHOLD:
            raise InvalidArgument(
                f"tool result repeated_line_threshold must be between {MIN_REPEATED_LINE_THRESHOLD} "
                f"and {MAX_REPEATED_LINE_THRESHOLD}"
            )
        if not 0 <= self.structured_sample_items <= MAX_STRUCTURED_SAMPLE_ITEMS:
            raise InvalidArgument(
                f"tool result structured_sample_items must be between 0 and {MAX_STRUCTURED_SAMPLE_ITEMS}"
            )

    def to_json(self) -> dict[str, Any]:
        """The wire form, fields in declared order (the order the digest depends on)."""
        return {name: getattr(self, "schema_" if name == "schema" else name) for name in _FIELD_ORDER}

    @classmethod
    def from_json(cls, data: Any) -> ToolResultTransformPolicyV1:
        """Parse and validate a wire policy; unknown fields and wrong types are ``invalid_argument``."""
        if not isinstance(data, dict):
            raise InvalidArgument("tool result transform policy must be a JSON object")
        unknown = sorted(str(key) for key in data if key not in _FIELD_TYPES)
        if unknown:
            raise InvalidArgument(
                f"invalid tool result transform policy: {unknown[0]}: Extra inputs are not permitted"
            )
        policy = cls(**data)
        policy.validate_policy()
        return policy

    def digest(self) -> str:
        """``policy_digest``: stable, domain-separated identity of this exact (valid) policy."""
        self.validate_policy()
        return domain_digest(POLICY_DIGEST_DOMAIN, self.to_json())

    def binding(self) -> dict[str, str]:
        """The ``a3s.code.tool-result-transform-binding.v1`` document stored in result metadata."""
        policy_digest = self.digest()
        unsigned = {
            "schema": BINDING_SCHEMA,
            "transform_algorithm": TRANSFORM_ALGORITHM,
            "policy_digest": policy_digest,
        }
        return {**unsigned, "binding_digest": domain_digest(BINDING_SCHEMA, unsigned)}


def validate_binding(binding: Any) -> dict[str, str]:
    """Check a binding document read back from metadata (closed fields, canonical digests)."""
    fields = ("schema", "transform_algorithm", "policy_digest", "binding_digest")
    if not isinstance(binding, dict) or set(binding) != set(fields):
        raise InvalidArgument(
            "tool result transform binding must have exactly the fields " + ", ".join(fields)
        )
    if not all(isinstance(binding[f], str) for f in fields):
        raise InvalidArgument("tool result transform binding fields must be strings")
    if binding["schema"] != BINDING_SCHEMA:
        raise InvalidArgument(f"unsupported tool result transform binding schema {binding['schema']!r}")
    if binding["transform_algorithm"] != TRANSFORM_ALGORITHM:
        raise InvalidArgument(
            f"unsupported tool result transform algorithm {binding['transform_algorithm']!r}"
        )
    for f in ("policy_digest", "binding_digest"):
        if not _is_canonical_sha256(binding[f]):
            raise InvalidArgument(f"tool result transform {f} must be canonical lowercase SHA-256")
    unsigned = {f: binding[f] for f in fields[:3]}
    if binding["binding_digest"] != domain_digest(BINDING_SCHEMA, unsigned):
        raise InvalidArgument(
            "tool result transform binding_digest does not bind the exact algorithm and policy"
        )
    return {f: binding[f] for f in fields}


def _is_canonical_sha256(value: str) -> bool:
    hex_part = value.removeprefix("sha256:")
    return (
        value.startswith("sha256:") and len(hex_part) == 64 and all(c in "0123456789abcdef" for c in hex_part)
    )
