"""Each transform step, its marker text, UTF-8 safety and determinism (SPEC R-3, R-4; REFERENCE §6.2)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel.projection import ToolResultTransformPolicyV1
from kernel.projection.fold import _assemble, _find_runs, fold_reference, fold_repeated_lines
from kernel.projection.sample import sample_json_array
from kernel.projection.transform import LossMode, artifact_line, transform, utf8_prefix, utf8_suffix

P = ToolResultTransformPolicyV1
SUFFIX = artifact_line("a3s://tool-output/t/" + "ab" * 32)
FOLD = "[a3s repeated-line fold: {} additional exact copies omitted]\n"


def small(**update: object) -> ToolResultTransformPolicyV1:
    base = P.context_efficient().replace(
        **{"max_output_bytes": 1024, "head_bytes": 256, "tail_bytes": 256, "structured_sample_items": 0}
    )
    policy = base.replace(**update)
    policy.validate_policy()
    return policy


# -- step 1: JSON array sampling ------------------------------------------------------------


def test_r3_sampling_replaces_oversized_array_with_exact_document() -> None:
    items = [{"id": i, "name": f"n{i}"} for i in range(20_000)]
    out = transform(json.dumps(items).encode(), P.context_efficient(), SUFFIX)
    assert out.loss_mode is LossMode.DETERMINISTIC_TRANSFORM
    assert out.shown_bytes == 0
    body = out.content[: -len(SUFFIX)]
    assert out.content.endswith(SUFFIX)
    doc = json.loads(body)
    assert doc["$a3s_sample"] == {
        "schema": "a3s.code.tool-result-transform.v1",
        "kind": "json_array",
        "original_items": 20000,
        "retained_items": 32,
        "omitted_items": 19968,
    }
    assert doc["items"] == items[:16] + items[-16:]
    assert body.startswith(
        b'{"$a3s_sample":{"schema":"a3s.code.tool-result-transform.v1","kind":"json_array",'
    )


def test_r3_sampling_odd_count_keeps_ceil_head_and_floor_tail() -> None:
    doc = sample_json_array(json.dumps(list(range(100))).encode(), 5)
    assert doc is not None
    assert json.loads(doc)["items"] == [0, 1, 2, 98, 99]


@pytest.mark.parametrize(
    "text",
    [
        b'{"items": [1, 2, 3]}',  # not an array
        b"[1, 2, 3] trailing",  # not a single document
        b"[1, 2, 3",  # invalid
        b"[1, NaN, 3, 4]",  # not JSON
        b"[1, Infinity, 3, 4]",
        b"[1, 2]",  # not more than N items
        b"hello",
    ],
)
def test_r3_sampling_leaves_non_arrays_alone(text: bytes) -> None:
    assert sample_json_array(text, 2) is None


def test_r3_sampling_only_when_output_exceeds_max() -> None:
    text = json.dumps(list(range(100))).encode()  # 390 bytes < 102400
    out = transform(text, P.context_efficient(), SUFFIX)
    assert out.loss_mode is LossMode.NONE
    assert out.content == text


def test_r3_sampling_nan_string_content_uses_strict_path() -> None:
    text = json.dumps(["NaN", "Infinity"] * 50).encode()
    doc = sample_json_array(text, 4)
    assert doc is not None
    assert json.loads(doc)["items"] == ["NaN", "Infinity", "NaN", "Infinity"]


def test_r3_sampling_keeps_unicode_and_nested_values() -> None:
    items = [{"k": "界🙂", "n": [1, 2.5, None, True]}] * 10
    doc = sample_json_array(json.dumps(items).encode(), 2)
    assert doc is not None
    assert json.loads(doc)["items"] == items[:2]
    assert "界🙂".encode() in doc  # compact, not ASCII-escaped


# -- step 2: folding ----------------------------------------------------------------------------


def test_r3_fold_marker_text_and_count() -> None:
    line = "same" * 32 + "\n"
    out = fold_repeated_lines((line * 4 + "next\n").encode(), 3)
    assert out == (line + FOLD.format(3) + "next\n").encode()


def test_r3_fold_keeps_lines_before_first_run_and_after() -> None:
    rep = "same" * 32 + "\n"
    text = "prefix\n" + rep * 3 + "suffix\n"
    out = transform(text.encode(), P.context_efficient(), SUFFIX)
    assert out.loss_mode is LossMode.DETERMINISTIC_TRANSFORM
    assert out.content == ("prefix\n" + rep + FOLD.format(2) + "suffix\n").encode() + SUFFIX


def test_r3_fold_below_threshold_and_unshortening_folds_are_not_applied() -> None:
    assert fold_repeated_lines(b"a\na\nb\n", 3) is None  # run of 2 < 3
    assert fold_repeated_lines(b"a\na\na\n", 3) is None  # marker longer than the lines it replaces
    assert fold_repeated_lines(b"a\na\n", 2) is None


def test_r3_fold_last_line_without_newline_never_joins_run() -> None:
    line = b"x" * 80 + b"\n"
    out = fold_repeated_lines(line * 3 + b"x" * 80, 3)
    assert out == line + FOLD.format(2).encode() + b"x" * 80


def test_r3_fold_threshold_two() -> None:
    line = b"y" * 100 + b"\n"
    assert fold_repeated_lines(line * 2, 2) == line + FOLD.format(1).encode()


def test_r3_fold_vectorised_path_equals_reference_on_large_log() -> None:
    lines = []
    for i in range(4000):
        lines.append(f"2024 INFO id={i:08d} status=200\n")
        if i % 97 == 0:
            lines.extend([f"retrying connection {i % 3}\n"] * (i % 7 + 1))
        if i % 50 == 0:
            lines.extend(["\n"] * 4 + ["ab\n"] * 5)
    data = "".join(lines).encode()
    assert len(data) > 64 * 1024
    for threshold in (2, 3, 5):
        assert fold_repeated_lines(data, threshold) == fold_reference(data, threshold)


def test_r3_fold_vectorised_path_rejects_word_filter_false_positives() -> None:
    # Same length, same first/middle/last 8 bytes, different elsewhere: must not fold.
    a = b"AAAAAAAA" + b"1" * 10 + b"MMMMMMMM" + b"2" * 10 + b"ZZZZZZZ\n"
    b = b"AAAAAAAA" + b"3" * 10 + b"MMMMMMMM" + b"4" * 10 + b"ZZZZZZZ\n"
    assert len(a) == len(b)
    data = (a + b) * 3 + a * 4
    assert fold_repeated_lines(data, 3) == fold_reference(data, 3)
    folded = _assemble(data, _find_runs(data, 3))
    assert folded is not None and folded.to_bytes() == fold_reference(data, 3)
    assert fold_reference(data, 3) == (a + b) * 3 + a + FOLD.format(3).encode()


LINES = st.sampled_from(
    [b"a\n", b"b\n", b"\n", b"abcdefgh\n", b"abcdefgX\n", b"x" * 30 + b"\n", "é界\n".encode(), b"q"]
)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(LINES, st.integers(1, 6)), max_size=30), st.integers(2, 5), st.binary(max_size=3))
def test_r3_fold_vectorised_equals_reference_property(
    runs: list[tuple[bytes, int]], threshold: int, tail: bytes
) -> None:
    data = b"".join(line * count for line, count in runs) + tail.replace(b"\n", b"")
    folded = _assemble(data, _find_runs(data, threshold))
    assert (None if folded is None else folded.to_bytes()) == fold_reference(data, threshold)


# -- step 4: head/tail cut and markers ------------------------------------------------------------


def test_r3_conservative_truncation_marker_exact() -> None:
    data = b"z" * 200_000
    out = transform(data, P.conservative(), SUFFIX)
    assert out.loss_mode is LossMode.BOUNDED_PREVIEW
    assert out.shown_bytes == 102400
    marker = (
        b"\n\n[tool output truncated: showing the first 102400 of 200000 bytes. "
        b"Full output is retained as an immutable artifact.]"
    )
    assert out.content == b"z" * 102400 + marker + SUFFIX


def test_r3_head_tail_marker_exact() -> None:
    data = b"H" * 1000 + b"T" * 1000
    out = transform(data, small(fold_repeated_lines=False), SUFFIX)
    assert out.loss_mode is LossMode.HEAD_TAIL
    assert out.shown_bytes == 512
    marker = (
        b"\n\n[tool output bounded by a3s.code.tool-result-transform.v1: "
        b"omitted 1488 bytes between retained head/tail regions]\n\n"
    )
    assert out.content == b"H" * 256 + marker + b"T" * 256 + SUFFIX


def test_r3_non_compat_tail_zero_is_bounded_preview_with_truncation_marker() -> None:
    out = transform(b"q" * 5000, small(tail_bytes=0, fold_repeated_lines=False), SUFFIX)
    assert out.loss_mode is LossMode.BOUNDED_PREVIEW
    assert out.content.startswith(
        b"q" * 256 + b"\n\n[tool output truncated: showing the first 256 of 5000 bytes."
    )


def test_r3_composite_when_transformed_text_still_too_large() -> None:
    block = b"".join(b"unique line %06d\n" % i for i in range(200))
    data = block + b"dup line\n" * 50 + block
    out = transform(data, small(), SUFFIX)
    assert out.loss_mode is LossMode.COMPOSITE
    assert out.shown_bytes == 0
    assert b"omitted" in out.content and b"between retained head/tail regions" in out.content
    assert out.content.endswith(SUFFIX)


def test_r3_fits_without_loss_is_untouched_and_has_no_artifact_line() -> None:
    data = "plain output 界\n".encode()
    for policy in (P.conservative(), P.context_efficient()):
        out = transform(data, policy, SUFFIX)
        assert out.loss_mode is LossMode.NONE
        assert out.content == data
        assert out.shown_bytes == len(data)


def test_r4_transformed_text_that_fits_only_without_artifact_line_is_cut() -> None:
    policy = small(fold_repeated_lines=True)
    line = b"r" * 60 + b"\n"
    filler = b"".join(b"%04d%s\n" % (i, b"." * 40) for i in range(21))  # 966 bytes, no repeats
    data = filler[: 1024 - len(line) - len(FOLD.format(4)) - 5] + b"\n" + line * 5
    folded = fold_repeated_lines(data, 3)
    assert folded is not None and len(folded) <= 1024 < len(folded) + len(SUFFIX)
    out = transform(data, policy, SUFFIX)
    assert out.loss_mode is LossMode.COMPOSITE
    assert len(out.content) <= 1024


@pytest.mark.parametrize("char", ["é", "界", "🙂"])
@pytest.mark.parametrize("shift", range(4))
def test_r3_cuts_are_utf8_safe_at_every_offset(char: str, shift: int) -> None:
    text = "a" * shift + char * 2000
    out = transform(text.encode(), small(fold_repeated_lines=False), SUFFIX)
    decoded = out.content.decode("utf-8")  # raises if a cut split a character
    assert decoded.startswith("a" * shift)
    head, _, rest = decoded.partition("\n\n[tool output bounded")
    assert len(head.encode()) <= 256 and len(head.encode()) > 256 - len(char.encode())
    tail = rest.split("]\n\n", 1)[1].split("\n\n[Full output artifact")[0]
    assert set(tail) == {char} and len(tail.encode()) > 256 - len(char.encode())


def test_r3_utf8_helpers() -> None:
    data = "ab界".encode()  # 2 + 3 bytes
    assert [utf8_prefix(data, n) for n in range(6)] == [b"", b"a", b"ab", b"ab", b"ab", data]
    assert [utf8_suffix(data, n) for n in range(6)] == [b"", b"", b"", "界".encode(), "b界".encode(), data]


def test_r3_same_input_same_policy_is_byte_identical() -> None:
    data = ("line\n" * 50 + "x" * 3000 + "界" * 5000 + "\n" + "end\n" * 9).encode()
    for policy in (P.conservative(), P.context_efficient(), small()):
        first = transform(data, policy, SUFFIX)
        assert all(transform(bytes(data), policy, SUFFIX) == first for _ in range(3))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=20), max_size=12), st.integers(0, 300))
def test_r3_folded_segments_prefix_suffix_match_joined_bytes(parts: list[bytes], n: int) -> None:
    from kernel.projection.fold import Folded

    folded = Folded(list(parts))
    joined = b"".join(parts)
    assert len(folded) == len(joined)
    assert folded.raw_prefix(n) == joined[:n]
    assert folded.raw_suffix(n) == (joined[-n:] if n else b"")


def test_r3_large_fold_then_cut_is_utf8_safe_and_matches_materialised_cut() -> None:
    """The lazy (segment) cut equals cutting the fully folded bytes, at multibyte boundaries too."""
    lines = []
    for i in range(6000):
        lines.append(f"事件 {i:06d} 状态=正常 🙂\n")
        if i % 10 == 0:
            lines.extend(["重复的行 界界界\n"] * 5)
    data = "".join(lines).encode()
    policy = P.context_efficient()
    out = transform(data, policy, SUFFIX)
    assert out.loss_mode is LossMode.COMPOSITE
    out.content.decode("utf-8")
    folded = fold_reference(data, 3)
    assert folded is not None
    head, tail = utf8_prefix(folded, policy.head_bytes), utf8_suffix(folded, policy.tail_bytes)
    marker = (
        b"\n\n[tool output bounded by a3s.code.tool-result-transform.v1: omitted %d bytes between retained head/tail regions]\n\n"
        % (len(folded) - len(head) - len(tail))
    )
    assert out.content == head + marker + tail + SUFFIX
    assert len(out.content) <= policy.max_output_bytes


def test_r3_folded_tail_cut_never_starts_inside_a_character() -> None:
    """Regression found by hypothesis: a tail cut of folded text landed inside a 2-byte character."""
    from kernel.artifacts import MemoryArtifactStore
    from kernel.projection import Projector, ToolResultTransformPolicyV1

    policy = ToolResultTransformPolicyV1(
        **{
            "schema": "a3s.code.tool-result-transform-policy.v1",
            "max_output_bytes": 1024,
            "head_bytes": 256,
            "tail_bytes": 91,
            "fold_repeated_lines": True,
            "repeated_line_threshold": 2,
            "structured_sample_items": 0,
        }
    )
    chunk = "x" * 200 + "\n"
    output = (chunk * 7 + "\x80\x80\x80" + "0" * 9 + "0000\n0000\n0000\n0000\n00000000000") * 2
    projected, meta = Projector(policy, MemoryArtifactStore()).project("t", output, None)
    assert len(projected.encode()) <= 1024
    assert meta["a3s_tool_result_evidence"]["loss_mode"] in ("composite", "head_tail")
