"""Step 2 of the transform: fold runs of identical consecutive lines (SPEC R-3; REFERENCE §6.2).

A run of ``>= threshold`` identical lines (each with its ``\\n``) becomes the line once plus
``[a3s repeated-line fold: K additional exact copies omitted]\\n`` (K = count - 1). Lines are
``split_inclusive('\\n')`` pieces: a last line without a newline never joins a run. The fold is
applied only when the whole result is shorter than the input; otherwise ``None``.

Two implementations with one contract: ``fold_reference`` is the literal per-line algorithm (the
test oracle, and used for small inputs); ``fold_repeated_lines`` finds runs for large inputs with
vectorised numpy passes (newline index, equal-length neighbours, sampled 8-byte words) and then
checks every candidate run byte-exactly, so a filter false positive can never fold unequal lines.
"""

from __future__ import annotations

from itertools import groupby
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

# Below this size the per-line loop is cheaper than importing and driving numpy.
VECTOR_FOLD_MIN_BYTES = 64 * 1024
_WORD_BYTES = 8


def fold_marker(omitted: int) -> bytes:
    return b"[a3s repeated-line fold: %d additional exact copies omitted]\n" % omitted


def fold_repeated_lines(data: bytes, threshold: int) -> bytes | None:
    """The folded text, or ``None`` when no run folds or folding would not shorten ``data``."""
    if len(data) < VECTOR_FOLD_MIN_BYTES:
        return fold_reference(data, threshold)
    return _assemble(data, _find_runs(data, threshold))


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


def _assemble(data: bytes, runs: list[tuple[int, int, int]]) -> bytes | None:
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
    result = b"".join(out)
    return result if len(result) < len(data) else None


def _find_runs(data: bytes, threshold: int) -> list[tuple[int, int, int]]:
    """Maximal runs of ``>= threshold`` identical newline-terminated lines, exactly."""
    import numpy as np

    n = len(data)
    buf = np.frombuffer(data, dtype=np.uint8)
    ends = np.flatnonzero(buf == 0x0A)
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
    for a, b in zip(pairs[first[long_enough]].tolist(), pairs[last[long_enough]].tolist(), strict=True):
        length = int(lengths[a])
        start = int(starts[a])
        count = b - a + 2
        # Period-`length` check: the run equals itself shifted by one line.
        if view[start : start + length * (count - 1)] == view[start + length : start + length * count]:
            runs.append((start, length, count))
        else:
            runs.extend(_exact_subruns(view, start, length, count, threshold))
    return runs


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
) -> npt.NDArray[np.bool_]:
    """Necessary condition for line i == line i+1 (same length L): sampled 8-byte words agree.

    Never rejects an equal pair; false positives are removed by the exact checks above.
    """
    import numpy as np

    keep = np.ones(starts.size, dtype=np.bool_)
    if len(data) < _WORD_BYTES:
        return keep
    # words[p] = the 8 bytes at p..p+7, little-endian: an unaligned, zero-copy strided view.
    words = np.ndarray((len(data) - _WORD_BYTES + 1,), dtype="<u8", buffer=data, strides=(1,))
    long_lines = lengths >= _WORD_BYTES
    s0 = starts[long_lines]
    span = lengths[long_lines]
    s1 = s0 + span
    agree = np.ones(s0.size, dtype=np.bool_)
    for offset in (np.zeros_like(span), (span - _WORD_BYTES) // 2, span - _WORD_BYTES):
        agree &= words[s0 + offset] == words[s1 + offset]
    keep[long_lines] = agree
    # Short lines: the word ending at each line's newline, masked to the line's own bytes.
    short = ~long_lines
    e0 = starts[short] + lengths[short] - 1
    span = lengths[short]
    windowed = e0 >= _WORD_BYTES - 1
    e0, span = e0[windowed], span[windowed]
    shift = ((_WORD_BYTES - span) * 8).astype(np.uint64)
    mask = ~((np.uint64(1) << shift) - np.uint64(1))
    short_keep = np.ones(int(short.sum()), dtype=np.bool_)
    short_keep[windowed] = (words[e0 - 7] & mask) == (words[e0 + span - 7] & mask)
    keep[short] = short_keep
    return keep
