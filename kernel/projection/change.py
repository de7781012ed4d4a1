"""Compaction of large before/after change metadata from edit/write/patch (SPEC B-3; REFERENCE §6.5).

When ``before`` + ``after`` exceed ``MAX_INLINE_CHANGE_BYTES`` (64 KiB, UTF-8 bytes), each side
is replaced by an 8 KiB head/tail preview and stored whole as an artifact (if it fits the store's
byte limit); a unified diff (context 3, headers ``before``/``after``) is computed when the total
is at most 1 MiB and bounded to 32 KiB. ``change`` then records ``{compacted, before{bytes,
sha256, artifact}, after{…}, unified_diff, diff_omitted}``. Below the threshold the sides stay
inline and ``change.compacted`` is false. Events therefore never carry whole large files.

The diff is carried once. Our file tools already put a bounded diff of the same change in
``diff`` (with ``a/path``/``b/path`` headers, ``diff_truncated``/``diff_omitted``); when the change is
compacted that diff *moves* to ``change.unified_diff`` (the top-level ``diff`` key is dropped) instead
of a second copy being computed. Below the threshold nothing moves: ``diff`` stays where it was.

Idempotent: metadata that already says ``change.compacted = true`` is returned unchanged.
"""

from __future__ import annotations

import hashlib
from typing import Any

from kernel.artifacts import DEFAULT_MAX_ARTIFACT_BYTES, ArtifactStore, artifact_id
from kernel.projection.transform import utf8_prefix, utf8_suffix

MAX_INLINE_CHANGE_BYTES = 64 * 1024
CHANGE_SIDE_PREVIEW_BYTES = 8 * 1024
CHANGE_DIFF_PREVIEW_BYTES = 32 * 1024
MAX_DIFF_COMPUTE_BYTES = 1024 * 1024
DIFF_CONTEXT_LINES = 3


def compact_change_metadata(
    metadata: dict[str, Any], artifacts: ArtifactStore, tool_name: str
) -> dict[str, Any]:
    """A new metadata dict with ``change`` added (and large sides previewed); input is not mutated."""
    if not isinstance(metadata, dict):
        return metadata
    existing = metadata.get("change")
    if isinstance(existing, dict) and existing.get("compacted") is True:
        return metadata
    before = metadata.get("before")
    after = metadata.get("after")
    sides = {
        "before": before.encode("utf-8", "replace") if isinstance(before, str) else None,
        "after": after.encode("utf-8", "replace") if isinstance(after, str) else None,
    }
    if sides["before"] is None and sides["after"] is None:
        return metadata
    total = sum(len(b) for b in sides.values() if b is not None)
    compacted = total > MAX_INLINE_CHANGE_BYTES
    store_limit = getattr(artifacts, "max_bytes", DEFAULT_MAX_ARTIFACT_BYTES)
    out = dict(metadata)
    change: dict[str, Any] = {"compacted": compacted}
    for side, data in sides.items():
        if data is None:
            change[side] = None
            continue
        sha = hashlib.sha256(data).hexdigest()
        ref: dict[str, str] | None = None
        if compacted and (not isinstance(store_limit, int) or len(data) <= store_limit):
            side_tool = f"{tool_name}-{side}"
            ref = {"artifact_id": artifact_id(side_tool, sha), "artifact_uri": artifacts.put(side_tool, data)}
        change[side] = {"bytes": len(data), "sha256": sha, "artifact": ref}
        if compacted:
            out[side] = bounded_head_tail(data, CHANGE_SIDE_PREVIEW_BYTES).decode("utf-8")
    diff: str | None = None
    omitted = compacted and total > MAX_DIFF_COMPUTE_BYTES
    own = metadata.get("diff")
    if compacted and isinstance(own, str):
        # The tool's own diff of this change: move it (bounded again, in case a host tool sent it whole).
        out.pop("diff", None)
        omitted = bool(metadata.get("diff_omitted")) or (not own and omitted)
        if own:
            diff = bounded_head_tail(own.encode("utf-8", "replace"), CHANGE_DIFF_PREVIEW_BYTES).decode(
                "utf-8"
            )
    elif compacted and total <= MAX_DIFF_COMPUTE_BYTES:
        text = unified_diff(
            before if isinstance(before, str) else "", after if isinstance(after, str) else ""
        )
        diff = bounded_head_tail(text.encode("utf-8", "replace"), CHANGE_DIFF_PREVIEW_BYTES).decode("utf-8")
    change["unified_diff"] = diff
    change["diff_omitted"] = omitted
    out["change"] = change
    return out


def bounded_head_tail(data: bytes, max_bytes: int) -> bytes:
    """``head … [N bytes omitted from middle] … tail`` with UTF-8-safe halves of ``max_bytes``."""
    if len(data) <= max_bytes:
        return data
    head = utf8_prefix(data, max_bytes // 2)
    tail = utf8_suffix(data, max_bytes - max_bytes // 2)
    omitted = len(data) - len(head) - len(tail)
    return b"%s\n\n... [%d bytes omitted from middle] ...\n\n%s" % (head, omitted, tail)


def unified_diff(before: str, after: str) -> str:
    """Line diff with ``--- before`` / ``+++ after`` headers; marks a missing final newline."""
    import difflib  # only when a change is compacted: not on every import of the kernel

    lines = difflib.unified_diff(
        _lines(before), _lines(after), fromfile="before", tofile="after", n=DIFF_CONTEXT_LINES
    )
    out: list[str] = []
    for line in lines:
        if line.endswith("\n"):
            out.append(line)
        else:
            out.append(line + "\n\\ No newline at end of file\n")
    return "".join(out)


def _lines(text: str) -> list[str]:
    """Split on ``\\n`` only, keeping it (``str.splitlines`` would also split on ``\\r``, ``\\x0c``…)."""
    parts = text.split("\n")
    lines = [p + "\n" for p in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines
