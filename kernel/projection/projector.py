"""``Projector``: one session's policy + artifact store applied to each tool result (SPEC R-1..R-6).

``project(tool, output, metadata)`` returns the model-facing output and metadata extended with
evidence, the transform binding and, when lossy, ``artifact{artifact_id, artifact_uri,
original_bytes, shown_bytes}``. The raw original of a lossy result is written to the store
before the result is released, so ``content_ref`` can always be read back byte-identical.

A result that already carries a binding different from the session's is a kernel fault (the
policy drifted before release). A producer that bounded its output itself (``bash``) declares it
under ``a3s_bounded_output``; the key is consumed and the evidence describes the real original
(``kernel.projection.bounded``). A result that already carries evidence for exactly this output
under this binding (re-released, e.g. a nested result) keeps that evidence: it describes the
real, earlier projection. The output is projected regardless, so the cap always holds.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from kernel.artifacts import ArtifactStore, PrehashedArtifactStore, artifact_id, uri_for_digest
from kernel.projection import bounded
from kernel.projection.evidence import (
    ARTIFACT_METADATA_KEY,
    EVIDENCE_METADATA_KEY,
    as_object,
    build_evidence,
    check_binding,
)
from kernel.projection.policy import BINDING_METADATA_KEY, ToolResultTransformPolicyV1
from kernel.projection.transform import LossMode, Transformed, artifact_line, transform


class Projector:
    def __init__(self, policy: ToolResultTransformPolicyV1, artifacts: ArtifactStore) -> None:
        policy.validate_policy()
        self.policy = policy
        self.artifacts = artifacts
        self.binding = policy.binding()

    def project(self, tool_name: str, output: str, metadata: Any) -> tuple[str, dict[str, Any]]:
        check_binding(metadata, self.binding)
        data, output = _utf8(output)
        meta = as_object(metadata)
        declared = bounded.take(meta)
        if declared is not None and declared.content_ref is not None:
            return self._project_retained(tool_name, data, meta, declared, declared.content_ref)
        hex_digest, result = _digest_and_transform(data, self.policy, tool_name)
        expected_uri = uri_for_digest(tool_name, hex_digest)
        uri: str | None = None
        if result.lossy:
            uri = self._store(tool_name, data, hex_digest)
            if uri != expected_uri:
                # A store with its own addressing: project again so the line (and cap) use its URI.
                result = transform(data, self.policy, artifact_line(uri))
            meta[ARTIFACT_METADATA_KEY] = {
                "artifact_id": artifact_id(tool_name, hex_digest),
                "artifact_uri": uri,
                "original_bytes": len(data),
                "shown_bytes": result.shown_bytes,
            }
        projected = result.content.decode("utf-8")
        if declared is not None:
            meta[EVIDENCE_METADATA_KEY] = _declared_evidence(declared, result, hex_digest, uri)
        elif not (result.lossy is False and _carries_evidence_for(meta, result, hex_digest)):
            meta[EVIDENCE_METADATA_KEY] = build_evidence(
                original_bytes=len(data),
                original_sha256_hex=hex_digest,
                projected=result.content,
                loss_mode=result.loss_mode.value,
                artifact_uri=uri,
            )
        meta[BINDING_METADATA_KEY] = dict(self.binding)
        return projected, meta

    def _project_retained(
        self, tool_name: str, data: bytes, meta: dict[str, Any], declared: bounded.BoundedOutput, ref: str
    ) -> tuple[str, dict[str, Any]]:
        """The producer kept the full original as ``ref``: a cut points there, nothing more is stored.

        The producer's own ``[Full output artifact: ref]`` line, when its text ends with one, is
        lifted off before the cut and becomes the projection's artifact line, so it is never cut
        away nor shown twice.
        """
        line = artifact_line(ref)
        body = data[: -len(line)] if data.endswith(line) else data
        result = transform(body, self.policy, line)
        if not result.lossy:
            result = Transformed(data, LossMode.NONE, len(data))
        else:
            meta[ARTIFACT_METADATA_KEY] = {
                "artifact_id": artifact_id(tool_name, declared.content_digest.removeprefix("sha256:")),
                "artifact_uri": ref,
                "original_bytes": declared.original_bytes,
                "shown_bytes": result.shown_bytes,
            }
        meta[EVIDENCE_METADATA_KEY] = _declared_evidence(declared, result, "", None)
        meta[BINDING_METADATA_KEY] = dict(self.binding)
        return result.content.decode("utf-8"), meta

    def _store(self, tool_name: str, data: bytes, hex_digest: str) -> str:
        if isinstance(self.artifacts, PrehashedArtifactStore):
            return self.artifacts.put_prehashed(tool_name, data, hex_digest)
        return self.artifacts.put(tool_name, data)


PARALLEL_DIGEST_MIN_BYTES = 1024 * 1024
_PLACEHOLDER_DIGEST = "0" * 64


def _digest_and_transform(
    data: bytes, policy: ToolResultTransformPolicyV1, tool_name: str
) -> tuple[str, Transformed]:
    """SHA-256 of the original and its projection; for big outputs the two run side by side.

    The calling thread hashes (hashlib drops the GIL on big buffers) while a kept worker thread runs
    the transform, which holds the GIL for whole C calls (msgspec validating a 10 MiB JSON array).
    The transform is claimed by whichever thread gets to it first: on an idle second core the worker
    takes it as soon as the hash drops the GIL; on a busy machine the caller runs it itself right
    after the hash instead of waiting for a worker to be scheduled (``_Claimable``). The transform
    needs the artifact line (which holds the digest) only to size its cut: it runs with a
    same-length placeholder, and the real line is put in afterwards — same length, so the cap
    arithmetic is unchanged.
    """
    if len(data) < PARALLEL_DIGEST_MIN_BYTES:
        hex_digest = hashlib.sha256(data).hexdigest()
        return hex_digest, transform(data, policy, artifact_line(uri_for_digest(tool_name, hex_digest)))
    placeholder = artifact_line(uri_for_digest(tool_name, _PLACEHOLDER_DIGEST))
    job = _Claimable(lambda: transform(data, policy, placeholder))
    _worker_pool().submit(job.run_if_unclaimed)
    hex_digest = hashlib.sha256(data).hexdigest()
    result = job.run_or_wait()
    if result.lossy:
        real = artifact_line(uri_for_digest(tool_name, hex_digest))
        if result.content.endswith(placeholder):
            result = replace(result, content=result.content[: -len(placeholder)] + real)
        else:  # not expected: the line is always last; recompute rather than guess
            result = transform(data, policy, real)
    return hex_digest, result


class _Claimable:
    """A job that runs exactly once, on the first thread that claims it; the other waits for it."""

    def __init__(self, fn: Callable[[], Transformed]) -> None:
        self._fn = fn
        self._lock = threading.Lock()
        self._claimed = False
        self._done = threading.Event()
        self._result: Transformed | None = None
        self._error: BaseException | None = None

    def _claim(self) -> bool:
        with self._lock:
            claimed, self._claimed = self._claimed, True
            return not claimed

    def run_if_unclaimed(self) -> None:
        """The worker's side: run it unless the caller already did."""
        if not self._claim():
            return
        try:
            self._result = self._fn()
        except BaseException as exc:  # handed to the caller, raised there
            self._error = exc
        finally:
            self._done.set()

    def run_or_wait(self) -> Transformed:
        """The caller's side: run it now, or wait for the worker that is running it."""
        if self._claim():
            return self._fn()
        self._done.wait()
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result


_POOL_LOCK = threading.Lock()
_POOL: concurrent.futures.ThreadPoolExecutor | None = None


def _worker_pool() -> concurrent.futures.ThreadPoolExecutor:
    """Threads kept for the transforms of big outputs (starting a thread per result cost up to a few
    ms on a loaded machine)."""
    global _POOL
    if _POOL is None:
        with _POOL_LOCK:
            if _POOL is None:
                _POOL = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="a3s-project")
    return _POOL


def _utf8(output: str) -> tuple[bytes, str]:
    """UTF-8 bytes of ``output``; lone surrogates (no UTF-8 form) become "?" first."""
    try:
        return output.encode("utf-8"), output
    except UnicodeEncodeError:
        data = output.encode("utf-8", "replace")
        return data, data.decode("utf-8")


def _declared_evidence(
    declared: bounded.BoundedOutput, result: Transformed, received_hex: str, uri: str | None
) -> dict[str, Any]:
    """Evidence for an output its producer had already bounded (see ``kernel.projection.bounded``)."""
    loss = declared.loss_mode if not result.lossy else LossMode.COMPOSITE.value
    if declared.content_ref is not None:
        ref = declared.content_ref  # the full original, retained by the producer
    elif uri is not None:
        ref = uri  # not retained: the most complete view kept is the text we received
    else:
        ref = f"inline:sha256:{received_hex}"  # lossless here: the projected text is what we received
    return build_evidence(
        original_bytes=declared.original_bytes,
        original_sha256_hex=declared.content_digest.removeprefix("sha256:"),
        projected=result.content,
        loss_mode=loss,
        artifact_uri=uri,
        content_ref=ref,
    )


def _carries_evidence_for(meta: dict[str, Any], result: Transformed, hex_digest: str) -> bool:
    """Existing evidence whose projection is exactly this (unchanged) output."""
    evidence = meta.get(EVIDENCE_METADATA_KEY)
    return (
        isinstance(evidence, dict)
        and BINDING_METADATA_KEY in meta
        and evidence.get("projected_digest") == "sha256:" + hex_digest
    )
