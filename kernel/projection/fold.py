"""Step 2 of the transform: fold runs of identical consecutive lines (SPEC R-3; REFERENCE §6.2).

A run of ``>= threshold`` identical lines (each with its ``\\n``) becomes the line once plus
``[a3s repeated-line fold: K additional exact copies omitted]\\n`` (K = count - 1). Lines are
``split_inclusive('\\n')`` pieces: a last line without a newline never joins a run. The fold is
applied only when the whole result is shorter than the input; otherwise ``None``.

Implementations with one contract: ``fold_reference`` is the literal per-line algorithm (the
test oracle, and used for small inputs). For large inputs ``_scan.repeated_runs``
(``kernel/projection/_scan.c``: memchr and memcmp, GIL released) finds the runs; where that
extension was not built, ``_find_runs`` does, with vectorised numpy passes (newline index,
equal-length neighbours, sampled 8-byte words), and then checks every candidate run byte-exactly,
so a filter false positive can never fold unequal lines.
"""

from __future__ import annotations

from itertools import groupby
from typing import TYPE_CHECKING

from kernel.projection import native

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

# Below this size the per-line loop is cheaper than importing and driving numpy.
VECTOR_FOLD_MIN_BYTES = 64 * 1024
_WORD_BYTES = 8
_NEWLINE_CHUNK_BYTES = 256 * 1024


def fold_marker(omitted: int) -> bytes:
    return b"[a3s repeated-line fold: %d additional exact copies omitted]\n" % omitted


class Folded:
    """A folded text kept as segments of the original: its length is known without joining it,
    so a result that will be cut anyway never materialises a second 10 MiB copy."""

    def __init__(self, parts: list[bytes | memoryview]) -> None:
        self.parts = parts
        self.length = sum(len(p) for p in parts)

    def __len__(self) -> int:
        return self.length

    def to_bytes(self) -> bytes:
        return b"".join(self.parts)

    def raw_prefix(self, n: int) -> bytes:
        """The first ``n`` bytes (fewer if shorter), ignoring character boundaries."""
        out: list[bytes | memoryview] = []
        need = n
        for part in self.parts:
            if need <= 0:
                break
            out.append(part[:need])
            need -= len(part)
        return b"".join(out)

    def raw_suffix(self, n: int) -> bytes:
        """The last ``n`` bytes (fewer if shorter), ignoring character boundaries."""
        if n <= 0:
            return b""
        out: list[bytes | memoryview] = []
        need = n
        for part in reversed(self.parts):
            if need <= 0:
                break
            out.append(part[max(0, len(part) - need) :])
            need -= len(part)
        return b"".join(reversed(out))


def fold_repeated_lines(data: bytes, threshold: int) -> bytes | None:
    """The folded text, or ``None`` when no run folds or folding would not shorten ``data``."""
    folded = fold_segments(data, threshold)
    return None if folded is None else folded.to_bytes()


def fold_segments(data: bytes, threshold: int) -> Folded | None:
    """Like ``fold_repeated_lines`` but lazy: the folded text as segments of ``data``."""
    if len(data) < VECTOR_FOLD_MIN_BYTES:
        small = fold_reference(data, threshold)
        return None if small is None else Folded([small])
    scan = native.scan
    runs = scan.repeated_runs(data, threshold) if scan is not None else _find_runs(data, threshold)
    return _assemble(data, runs)


def fold_reference(data: bytes, threshold: int) -> bytes | None:
    """The literal algorithm: walk ``split_inclusive`` lines, fold each run of ``>= threshold``."""
    pieces = data.split(b"\n")
    lines = [p + b"\n" for p in pieces[:-1]]
    if pieces[-1]:
        lines.append(pieces[-1])
    out: list[bytes] = []
    folded = False
    for line, group in groupby(lines):
        count = sum(1 for _ in group)
        if count >= threshold:
            out.append(line)
            out.append(fold_marker(count - 1))
            folded = True
        else:
            out.extend([line] * count)
    if not folded:
        return None
    result = b"".join(out)
    return result if len(result) < len(data) else None


def _assemble(data: bytes, runs: list[tuple[int, int, int]]) -> Folded | None:
    """Splice ``(start, line_len, count)`` runs (sorted, disjoint) into ``data``."""
    if not runs:
        return None
    view = memoryview(data)
    out: list[bytes | memoryview] = []
    cursor = 0
    for start, length, count in runs:
        out.append(view[cursor : start + length])
        out.append(fold_marker(count - 1))
        cursor = start + length * count
    out.append(view[cursor:])
    folded = Folded(out)
    return folded if folded.length < len(data) else None


def _find_runs(data: bytes, threshold: int) -> list[tuple[int, int, int]]:
    """Maximal runs of ``>= threshold`` identical newline-terminated lines, exactly."""
    import numpy as np

    ends = _newlines(data)
    if ends.size < threshold:
        return []
    starts = np.empty_like(ends)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    lengths = ends - starts + 1
    # Pair i compares line i with line i+1; equal lines have equal lengths.
    pairs = np.flatnonzero(lengths[:-1] == lengths[1:])
    if pairs.size < threshold - 1:
        return []
    pairs = pairs[_words_agree(data, starts[pairs], lengths[pairs])]
    if pairs.size < threshold - 1:
        return []
    # Split the surviving pair indices into stretches of consecutive pairs (= candidate runs).
    breaks = np.flatnonzero(np.diff(pairs) != 1)
    first = np.concatenate(([0], breaks + 1))
    last = np.concatenate((breaks, [pairs.size - 1]))
    long_enough = (last - first + 1) >= threshold - 1
    runs: list[tuple[int, int, int]] = []
    view = memoryview(data)
    heads = pairs[first[long_enough]]
    # Plain ints for the per-run loop (indexing numpy arrays one scalar at a time is slow).
    for a, b, start, length in zip(
        heads.tolist(),
        pairs[last[long_enough]].tolist(),
        starts[heads].tolist(),
        lengths[heads].tolist(),
        strict=True,
    ):
        count = b - a + 2
        # Period-`length` check: the run equals itself shifted by one line.
        if view[start : start + length * (count - 1)] == view[start + length : start + length * count]:
            runs.append((start, length, count))
        else:
            runs.extend(_exact_subruns(view, start, length, count, threshold))
    return runs


def _newlines(data: bytes) -> npt.NDArray[np.intp]:
    """Offsets of every ``\\n``, found in cache-sized chunks through one reused scratch buffer
    (a whole-input boolean array would cost a fresh 10 MiB allocation and its page faults)."""
    import numpy as np

    buf = np.frombuffer(data, dtype=np.uint8)
    scratch = np.empty(min(len(buf), _NEWLINE_CHUNK_BYTES), dtype=np.bool_)
    found = []
    for at in range(0, len(buf), _NEWLINE_CHUNK_BYTES):
        chunk = buf[at : at + _NEWLINE_CHUNK_BYTES]
        hits = scratch[: chunk.size]
        np.equal(chunk, 0x0A, out=hits)
        found.append(np.flatnonzero(hits) + at)
    return np.concatenate(found) if found else np.empty(0, dtype=np.intp)


def _exact_subruns(
    view: memoryview, start: int, length: int, count: int, threshold: int
) -> list[tuple[int, int, int]]:
    """Byte-exact split of a candidate run whose sampled words agreed but whose bytes did not."""
    found: list[tuple[int, int, int]] = []
    run_start, run_count = start, 1
    for k in range(1, count):
        here = start + k * length
        if view[here - length : here] == view[here : here + length]:
            run_count += 1
            continue
        if run_count >= threshold:
            found.append((run_start, length, run_count))
        run_start, run_count = here, 1
    if run_count >= threshold:
        found.append((run_start, length, run_count))
    return found


def _words_agree(
    data: bytes, starts: npt.NDArray[np.intp], lengths: npt.NDArray[np.intp]
) -> npt.NDArray[np.intp]:
    """Indices of pairs (line i, line i+1 of equal length L) whose sampled 8-byte words agree.

    A necessary condition for equality, so an equal pair is never dropped; false positives are
    removed by the exact checks in ``_find_runs``. Filters run in sequence on the survivors, middle
    word first (where ids and counters usually differ), so later gathers touch few pairs.
    """
    import numpy as np

    everything = np.arange(starts.size)
    if len(data) < _WORD_BYTES:
        return everything
    # words[p] = the 8 bytes at p..p+7, little-endian: an unaligned, zero-copy strided view.
    words = np.ndarray((len(data) - _WORD_BYTES + 1,), dtype="<u8", buffer=data, strides=(1,))
    long_lines = lengths >= _WORD_BYTES
    keep = everything[long_lines]
    for which in ("middle", "last", "first"):
        s0, span = starts[keep], lengths[keep]
        if which == "middle":
            offset = (span - _WORD_BYTES) // 2
        elif which == "last":
            offset = span - _WORD_BYTES
        else:
            offset = np.zeros_like(span)
        keep = keep[words[s0 + offset] == words[s0 + span + offset]]
    short = everything[~long_lines]
    if short.size:
        # The word ending at each line's newline, masked to the line's own (high) bytes.
        span = lengths[short]
        e0 = starts[short] + span - 1
        windowed = e0 >= _WORD_BYTES - 1
        unwindowed = short[~windowed]  # within the first 8 bytes of data: left to the exact check
        short, span, e0 = short[windowed], span[windowed], e0[windowed]
        mask = ~((np.uint64(1) << ((_WORD_BYTES - span) * 8).astype(np.uint64)) - np.uint64(1))
        agree = (words[e0 - 7] & mask) == (words[e0 + span - 7] & mask)
        keep = np.sort(np.concatenate((keep, short[agree], unwindowed)))
    return keep
