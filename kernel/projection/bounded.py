"""A producer's declaration that it already bounded its output (SPEC R-6; issue 15 item 9).

Some tools cut their output where it is produced (``bash`` keeps 64 KiB head + 36 KiB tail of a
stream of any size): the text the kernel projects is then already a lossy view, and evidence
computed from it alone would claim ``original_bytes`` = the view's size and ``loss_mode: none``.
A producer that bounded its output says so by putting a ``BoundedOutput`` under
``metadata["a3s_bounded_output"]`` (``declare``); the projector consumes the key and builds the
evidence from it, keeping the R-6 schema and the reference's key names:

- ``original_bytes`` / ``content_digest`` / ``repeat_key``: the real size and the SHA-256 of the
  full original, computed by the producer while it streamed (the projector never saw it);
- ``loss_mode``: the producer's (``head_tail``, ``bounded_preview`` or ``deterministic_transform``),
  or ``composite`` when the projection cut the text further;
- ``content_ref``: the artifact holding the full original when the producer retained it;
  otherwise what *is* retained, named by its own digest — the projector's artifact of the text it
  received when the projection was lossy, else ``inline:sha256:<digest of the projected text>``.
  A ``content_ref`` whose digest differs from ``content_digest`` therefore means "the original
  was not retained; this is the most complete view that was".

A malformed declaration is a producer bug: ``parse`` raises ``KernelFault``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from kernel.errors import KernelFault

BOUNDED_OUTPUT_KEY = "a3s_bounded_output"
PRODUCER_LOSS_MODES = ("bounded_preview", "head_tail", "deterministic_transform")
_DIGEST_RE = re.compile(r"sha256:[0-9a-f]{64}")


@dataclass(frozen=True, slots=True)
class BoundedOutput:
    """What a producer that bounded its own output declares about the real original."""

    original_bytes: int
    content_digest: str  # "sha256:<hex>" of the full original
    loss_mode: str
    content_ref: str | None = None  # an artifact URI holding the full original, when retained

    def to_json(self) -> dict[str, Any]:
        return {
            "original_bytes": self.original_bytes,
            "content_digest": self.content_digest,
            "loss_mode": self.loss_mode,
            "content_ref": self.content_ref,
        }


def declare(metadata: dict[str, Any], bounded: BoundedOutput) -> None:
    """Mark ``metadata`` as describing an output the producer already bounded."""
    metadata[BOUNDED_OUTPUT_KEY] = parse(bounded.to_json()).to_json()


def take(metadata: dict[str, Any]) -> BoundedOutput | None:
    """Remove and return the declaration in ``metadata`` (None when there is none)."""
    if BOUNDED_OUTPUT_KEY not in metadata:
        return None
    return parse(metadata.pop(BOUNDED_OUTPUT_KEY))


def parse(value: Any) -> BoundedOutput:
    if not isinstance(value, dict):
        raise KernelFault(f"{BOUNDED_OUTPUT_KEY} must be an object")
    size, digest, mode, ref = (
        value.get(k) for k in ("original_bytes", "content_digest", "loss_mode", "content_ref")
    )
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise KernelFault(f"{BOUNDED_OUTPUT_KEY}.original_bytes must be a non-negative integer")
    if not isinstance(digest, str) or not _DIGEST_RE.fullmatch(digest):
        raise KernelFault(f"{BOUNDED_OUTPUT_KEY}.content_digest must be sha256:<64 hex digits>")
    if mode not in PRODUCER_LOSS_MODES:
        raise KernelFault(f"{BOUNDED_OUTPUT_KEY}.loss_mode must be one of {', '.join(PRODUCER_LOSS_MODES)}")
    if ref is not None and (not isinstance(ref, str) or not ref.startswith("a3s://")):
        raise KernelFault(f"{BOUNDED_OUTPUT_KEY}.content_ref must be an a3s:// artifact URI or null")
    return BoundedOutput(size, digest, mode, ref)
