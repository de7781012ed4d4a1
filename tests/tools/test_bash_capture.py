"""The bounded two-stream capture behind bash (SPEC B-2): one budget, exact counts, separable streams."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from tools.bash.capture import BUDGET_BYTES, HEAD_BYTES, TAIL_BYTES, OutputCapture, truncation_marker


def test_b2_budget_constants_match_the_reference():
    assert (HEAD_BYTES, TAIL_BYTES, BUDGET_BYTES) == (64 * 1024, 36 * 1024, 100 * 1024)


def test_b2_small_output_is_kept_whole_and_unmarked():
    cap = OutputCapture()
    cap.feed("stdout", b"out\n")
    cap.feed("stderr", b"err\n")
    assert cap.view("stdout").text == "out\n"
    assert cap.view("stderr").text == "err\n"
    assert not cap.truncated
    assert cap.render() == "[stdout]\nout\n[stderr]\nerr\n"
    summary = cap.summary(timed_out=False)
    assert {k: summary[k] for k in ("total_bytes", "captured_bytes", "truncated", "timed_out")} == {
        "total_bytes": 8,
        "captured_bytes": 8,
        "truncated": False,
        "timed_out": False,
    }


def test_b2_one_stream_renders_without_labels():
    cap = OutputCapture()
    cap.feed("stderr", b"only err")
    assert cap.render() == "only err"


def test_b2_head_and_tail_keep_exact_prefix_and_suffix_with_marker():
    cap = OutputCapture(head_bytes=4, tail_bytes=3)
    for chunk in (b"abc", b"defgh", b"ij", b"klmno"):
        cap.feed("stdout", chunk)
    view = cap.view("stdout")
    assert (view.head, view.tail, view.total_bytes) == (b"abcd", b"mno", 15)
    assert view.text == "abcd\n" + truncation_marker(4, 3, 15) + "\nmno"
    assert (
        cap.view("stdout").text.count(
            "[command output truncated: retained the first 4 and last 3 of 15 bytes]"
        )
        == 1
    )


_chunks = st.lists(st.tuples(st.sampled_from(["stdout", "stderr"]), st.binary(max_size=40)), max_size=40)


@settings(max_examples=200, deadline=None)
@given(chunks=_chunks, head=st.integers(0, 50), tail=st.integers(0, 50))
def test_b2_views_are_prefix_and_suffix_of_each_stream_within_one_budget(chunks, head, tail):
    cap = OutputCapture(head_bytes=head, tail_bytes=tail)
    for stream, data in chunks:
        cap.feed(stream, data)
    whole = {"stdout": b"", "stderr": b""}
    for stream, data in chunks:
        whole[stream] += data
    interleaved = b"".join(d for _, d in chunks)
    assert cap.total_bytes == len(interleaved)
    assert cap.captured_bytes == min(len(interleaved), head + min(tail, max(0, len(interleaved) - head)))
    assert cap.captured_bytes <= head + tail
    for stream in ("stdout", "stderr"):
        view = cap.view(stream)
        assert view.total_bytes == len(whole[stream])
        assert whole[stream].startswith(view.head)
        assert whole[stream].endswith(view.tail)
        assert len(view.head) + len(view.tail) <= len(whole[stream])
    assert sum(cap.view(s).captured_bytes for s in ("stdout", "stderr")) == cap.captured_bytes


def test_b2_rendered_text_fits_the_cap_and_markers_count_what_is_shown():
    cap = OutputCapture(head_bytes=100, tail_bytes=60)
    cap.feed("stdout", b"o" * 500)
    cap.feed("stderr", b"e" * 500)
    text = cap.render(max_bytes=300)
    assert len(text.encode()) <= 300
    assert text.startswith("[stdout]\n" + "o" * 10) and text.endswith("e")
    out_part, err_part = text.split("[stderr]\n")
    for part, char in ((out_part, "o"), (err_part, "e")):
        head, tail, total = map(
            int, re.findall(r"retained the first (\d+) and last (\d+) of (\d+) bytes", part)[0]
        )
        assert total == 500
        body = "".join(line for line in part.split("\n") if not line.startswith("["))
        assert body == char * (head + tail)  # each marker counts exactly the bytes it frames
    # Metadata views keep everything captured.
    assert cap.view("stdout").captured_bytes + cap.view("stderr").captured_bytes == 160
