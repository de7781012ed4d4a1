"""The deterministic transform ``a3s.code.tool-result-transform.v1`` over UTF-8 bytes (SPEC R-3, R-4).

Order (REFERENCE §6.2): sample an oversized JSON array → fold repeated lines → if the text still
does not fit, keep a UTF-8-safe head and tail around one marker → when anything was lost, append
the ``[Full output artifact: …]`` line. The function is pure: same bytes + same policy + same
artifact line ⇒ the same output bytes.

The cap (R-4): the projected bytes, artifact line included, never exceed ``max_output_bytes``;
the compatibility profile (tail 0, head == max) may exceed it by at most ``COMPAT_OVERSHOOT_BYTES``
because its head alone already fills the cap. The reference appends the artifact line after its
fit test, so a transformed text just under the cap could overflow; here a lossy text "fits" only
with its artifact line, otherwise it is cut like any other (``composite``). With the tool segment
of artifact URIs bounded (``kernel.artifacts.MAX_TOOL_SEGMENT_CHARS``) marker + artifact line stay
well inside the 512-byte reserve; the head is shortened only if some caller-supplied artifact line
is longer still.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from kernel.errors import KernelFault
from kernel.projection.fold import Folded, fold_segments
from kernel.projection.policy import MARKER_RESERVE_BYTES, TRANSFORM_ALGORITHM, ToolResultTransformPolicyV1

COMPAT_OVERSHOOT_BYTES = MARKER_RESERVE_BYTES


class LossMode(StrEnum):
    NONE = "none"
    BOUNDED_PREVIEW = "bounded_preview"
    HEAD_TAIL = "head_tail"
    DETERMINISTIC_TRANSFORM = "deterministic_transform"
    COMPOSITE = "composite"


@dataclass(frozen=True, slots=True)
class Transformed:
    """The projected bytes of one output and how they relate to the original."""

    content: bytes  # model-facing bytes, artifact line included when lossy
    loss_mode: LossMode
    shown_bytes: int  # original bytes shown verbatim: head+tail, or 0 once transformed

    @property
    def lossy(self) -> bool:
        return self.loss_mode is not LossMode.NONE


def artifact_line(uri: str) -> bytes:
    return b"\n\n[Full output artifact: " + uri.encode("utf-8") + b"]"


def output_limit(policy: ToolResultTransformPolicyV1) -> int:
    """The hard ceiling on projected bytes for this policy (R-4)."""
    return policy.max_output_bytes + (COMPAT_OVERSHOOT_BYTES if policy.is_compatibility_profile else 0)


def transform(data: bytes, policy: ToolResultTransformPolicyV1, suffix: bytes) -> Transformed:
    """Project ``data`` (valid UTF-8); ``suffix`` is the artifact line appended when lossy."""
    content: bytes | Folded = data
    transformed = False
    if policy.structured_sample_items > 0 and len(data) > policy.max_output_bytes:
        # Imported here: msgspec loads only for the first output big enough to sample.
        from kernel.projection.sample import sample_json_array

        sampled = sample_json_array(data, policy.structured_sample_items)
        if sampled is not None:
            content, transformed = sampled, True
    if policy.fold_repeated_lines:
        folded = fold_segments(
            content if isinstance(content, bytes) else content.to_bytes(), policy.repeated_line_threshold
        )
        if folded is not None:
            content, transformed = folded, True

    limit = output_limit(policy)
    if len(content) <= policy.max_output_bytes:
        small = content if isinstance(content, bytes) else content.to_bytes()
        if not transformed:
            return Transformed(small, LossMode.NONE, len(data))
        if len(small) + len(suffix) <= limit:
            return Transformed(small + suffix, LossMode.DETERMINISTIC_TRANSFORM, 0)

    if transformed:
        mode = LossMode.COMPOSITE
    elif policy.tail_bytes == 0:
        mode = LossMode.BOUNDED_PREVIEW
    else:
        mode = LossMode.HEAD_TAIL
    projected, shown = _cut(content, policy, transformed, suffix, limit)
    return Transformed(projected, mode, 0 if transformed else shown)


def _cut(
    content: bytes | Folded, policy: ToolResultTransformPolicyV1, transformed: bool, suffix: bytes, limit: int
) -> tuple[bytes, int]:
    total = len(content)
    head_budget, tail_budget = policy.head_bytes, policy.tail_bytes
    # Converges in one or two rounds: shrinking the head can only add digits to the marker.
    for _ in range(8):
        head = _head(content, head_budget)
        tail = _tail(content, tail_budget)
        if policy.tail_bytes == 0 and not transformed:
            marker = (
                b"\n\n[tool output truncated: showing the first %d of %d bytes. "
                b"Full output is retained as an immutable artifact.]" % (len(head), total)
            )
        else:
            omitted = total - len(head) - len(tail)
            marker = (
                b"\n\n[tool output bounded by %s: omitted %d bytes between retained head/tail regions]\n\n"
                % (
                    TRANSFORM_ALGORITHM.encode(),
                    omitted,
                )
            )
        projected = b"".join((head, marker, tail, suffix))
        excess = len(projected) - limit
        if excess <= 0:
            return projected, len(head) + len(tail)
        take = min(excess, head_budget)
        head_budget -= take
        tail_budget = max(0, tail_budget - (excess - take))
    raise KernelFault(f"tool result projection cannot fit its markers within {limit} bytes")


def _head(content: bytes | Folded, max_bytes: int) -> bytes:
    if isinstance(content, bytes):
        return utf8_prefix(content, max_bytes)
    # One byte past the cut decides whether the cut splits a character.
    return utf8_prefix(content.raw_prefix(max_bytes + 1), max_bytes)


def _tail(content: bytes | Folded, max_bytes: int) -> bytes:
    if isinstance(content, bytes):
        return utf8_suffix(content, max_bytes)
    # The raw cut may start inside a character: skip continuation bytes to the next boundary.
    data = content.raw_suffix(max_bytes)
    start = 0
    while start < len(data) and data[start] & 0xC0 == 0x80:
        start += 1
    return data[start:]


def utf8_prefix(data: bytes, max_bytes: int) -> bytes:
    """The longest prefix of at most ``max_bytes`` that ends on a character boundary."""
    if max_bytes >= len(data):
        return data
    end = max(max_bytes, 0)
    while end > 0 and data[end] & 0xC0 == 0x80:
        end -= 1
    return data[:end]


def utf8_suffix(data: bytes, max_bytes: int) -> bytes:
    """The longest suffix of at most ``max_bytes`` that starts on a character boundary."""
    if max_bytes <= 0:
        return b""
    if max_bytes >= len(data):
        return data
    start = len(data) - max_bytes
    while start < len(data) and data[start] & 0xC0 == 0x80:
        start += 1
    return data[start:]
