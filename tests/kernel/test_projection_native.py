"""The C scans of the projection give exactly what the pure-Python paths give (SPEC R-3; issue 13 item 7).

``kernel/projection/_scan.c`` validates a big JSON array and finds runs of repeated lines with the
GIL released. It reads model-controlled bytes, so it is held here to three oracles:
- for sampling, ``sample_json_array`` with and without the module gives the same bytes (or the
  same refusal) on generated documents and on near misses of them (one byte dropped, changed or
  added);
- its verdict agrees with Python's strict ``json`` parser, and its head and tail cuts hold exactly
  the first and last items;
- for folding, its runs splice into exactly what ``fold_reference`` (the literal algorithm) gives.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from kernel.projection import fold, native, sample
from kernel.projection.fold import fold_reference
from kernel.projection.sample import sample_json_array

TRICKY = st.text(
    alphabet=st.sampled_from(list('ab"\\[]{},:/ \n\t\x00\x1f\u00e9\u2028\U0001f642')), max_size=10
)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | TRICKY
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TRICKY, inner, max_size=4),
    max_leaves=10,
)
# fmt: off
NOISE = st.sampled_from(
    [b",", b"]", b"[", b"}", b"{", b'"', b"\\", b":", b"0", b"-", b"e", b".", b" ", b"\x00", b"\x1f",
     b"\xc3", b"\xff", b"NaN", b"\\u", b"\\ud800", b"1e400", b"tru"]
)
# fmt: on


def scan() -> object:
    assert native.scan is not None
    return native.scan


def without_native(monkeypatch: pytest.MonkeyPatch, data: bytes, max_items: int) -> bytes | None:
    with monkeypatch.context() as m:
        m.setattr(native, "scan", None)
        return sample_json_array(data, max_items)


def is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def strict_loads(data: bytes) -> object:
    def reject(token: str) -> object:
        raise ValueError(token)

    return json.loads(data.decode("utf-8"), parse_constant=reject)


def test_r3_the_installed_package_carries_the_c_scans() -> None:
    # setup.py builds it wherever a C compiler exists (CI's machine has one); without it every
    # projection below would silently take the slower pure-Python paths.
    assert native.scan is not None
    assert native.scan.json_array(b"[1,2,3]", 1, 1) == (native.VALID, 3, 2, 5)


@st.composite
def documents(draw: st.DrawFn) -> bytes:
    items = draw(st.lists(VALUES, max_size=12))
    indent = draw(st.sampled_from([None, 1, "\t"]))
    text = json.dumps(items, indent=indent, ensure_ascii=draw(st.booleans()))
    return (draw(st.sampled_from(["", " ", "\n\t "])) + text + draw(st.sampled_from(["", " \r\n"]))).encode(
        "utf-8", "surrogatepass"
    )


@st.composite
def near_misses(draw: st.DrawFn) -> bytes:
    data = draw(documents())
    at = draw(st.integers(0, len(data)))
    how = draw(st.sampled_from(["drop", "change", "add"]))
    if how == "drop" and data:
        at = min(at, len(data) - 1)
        return data[:at] + data[at + 1 :]
    noise = draw(NOISE)
    return data[:at] + noise + data[at + (1 if how == "change" else 0) :]


@settings(max_examples=600, deadline=None)
@given(st.one_of(documents(), near_misses()), st.integers(1, 9))
def test_r3_native_sampling_equals_the_python_paths(data: bytes, max_items: int) -> None:
    # The projector hands the transform valid UTF-8 only (it encodes a str); invalid bytes are
    # held to strict JSON in the test below instead (msgspec's skip does not check them).
    assume(is_utf8(data))
    with pytest.MonkeyPatch.context() as monkeypatch:
        expected = without_native(monkeypatch, data, max_items)
    assert sample_json_array(data, max_items) == expected


@settings(max_examples=600, deadline=None)
@given(st.one_of(documents(), near_misses()), st.integers(1, 5), st.integers(0, 5))
def test_r3_native_verdict_and_cuts_agree_with_strict_json(data: bytes, head: int, tail: int) -> None:
    verdict, total, head_stop, tail_from = native.scan.json_array(data, head, tail)
    try:
        value = strict_loads(data)
    except (ValueError, RecursionError):
        value = None
    if verdict == native.UNDECIDED:
        return  # lone surrogate escapes, huge numbers, deep nesting: the Python parsers decide
    if verdict == native.NOT_ARRAY:
        assert not isinstance(value, list)
        return
    assert isinstance(value, list) and total == len(value)
    if total > head:
        start = data.index(b"[")
        assert strict_loads(data[start:head_stop] + b"]") == value[:head]
    if tail and total > tail:
        end = data.rindex(b"]")
        assert strict_loads(b"[" + data[tail_from : end + 1]) == value[-tail:]


# fmt: off
NOT_JSON_ARRAYS = [
    b"[01]", b"[1.]", b"[.5]", b"[-]", b"[+1]", b"[1e]", b"[1e+]", b"[--1]", b'["\x1f"]', b'["\\u12"]',
    b'["\\x"]', b"[tru]", b"[nul]", b"[NaN]", b"[Infinity]", b"[-Infinity]", b"[1] x", b"[1]]",
    b"[[1]", b"{}", b'"x"', b"[1 2]", b"[1,,2]", b"[,1]", b"[1,]", b'[{"a" 1}]', b'[{"a":1,}]',
    b"[{1:2}]", b"\xef\xbb\xbf[1]", b'["\xff"]', b'["\xc0\x80"]', b'["\xed\xa0\x80"]',
    b'["\xf4\x90\x80\x80"]', b'["\xe2\x82"]', b"[1\x00]", b"[\x0b1]", b"", b"[",
]
# fmt: on


@pytest.mark.parametrize("text", NOT_JSON_ARRAYS)
def test_r3_strict_json_refusals(text: bytes) -> None:
    assert native.scan.json_array(text, 1, 1)[0] == native.NOT_ARRAY


@pytest.mark.parametrize(
    ("text", "verdict"),
    [
        (b"[1e307, 1.7e307, 0.0001e311, 0e999999, -0, 1E+2, 1e-999]", native.VALID),
        (b"[1e308]", native.UNDECIDED),  # near f64's limit: serde refuses 2e308, Python reads inf
        (b"[123e306]", native.UNDECIDED),
        (b"[-1" + b"0" * 400 + b"]", native.UNDECIDED),
        (b'["\\ud83d\\ude42", "\\u00e9\xc3\xa9\xf0\x9f\x99\x82"]', native.VALID),
        (b'["\\ud800"]', native.UNDECIDED),  # lone surrogates: parsers differ
        (b'["\\udc00\\ud800"]', native.UNDECIDED),
        (b"[" * 128 + b"]" * 128, native.VALID),
        (b"[" * 129 + b"]" * 129, native.UNDECIDED),  # deeper than serde_json's limit: Python decides
        (b" [ ] ", native.VALID),
    ],
)
def test_r3_native_edge_cases(text: bytes, verdict: int) -> None:
    assert native.scan.json_array(text, 1, 1)[0] == verdict


def test_r3_native_refuses_out_of_range_arguments() -> None:
    with pytest.raises(ValueError):
        native.scan.json_array(b"[1]", 1, 1025)
    with pytest.raises(ValueError):
        native.scan.json_array(b"[1]", -1, 1)


def test_r3_nul_bytes_never_make_a_document_utf16() -> None:
    """Regression: the strict stdlib fallback read bytes, and json.loads guesses UTF-16 from NULs —
    a text of ASCII letters and NULs holding "NaN" was sampled as a UTF-16 array."""
    items = ",".join(['"\u614eN"'] + [str(i) for i in range(40)])
    data = ("[" + items + "]").encode("utf-16-le")
    assert b"NaN" in data
    assert sample_json_array(data, 4) is None
    with pytest.MonkeyPatch.context() as monkeypatch:
        assert without_native(monkeypatch, data, 4) is None


LINES = st.sampled_from([b"a\n", b"b\n", b"\n", b"ab\n", b"ba\n", b"\xc3\xa9\n", b"a"])


@settings(max_examples=500, deadline=None)
@given(st.lists(st.tuples(LINES, st.integers(1, 6)), max_size=30), st.integers(1, 5), st.binary(max_size=3))
def test_r3_native_runs_fold_exactly_like_the_reference(
    groups: list[tuple[bytes, int]], threshold: int, tail: bytes
) -> None:
    data = b"".join(line * count for line, count in groups) + tail
    folded = fold._assemble(data, scan().repeated_runs(data, threshold))  # type: ignore[attr-defined]
    assert (None if folded is None else folded.to_bytes()) == fold_reference(data, threshold)


def test_r3_native_fold_of_a_large_log_equals_the_python_path() -> None:
    lines = []
    for i in range(20_000):
        lines.append(
            b"WARN retrying upstream connection pool=3 after a timeout\n" * (i % 7)
            + b"INFO request %d ok\n" % i
        )
    data = b"".join(lines)
    assert len(data) > fold.VECTOR_FOLD_MIN_BYTES
    expected = fold._assemble(data, fold._find_runs(data, 3))
    got = fold.fold_segments(data, 3)
    assert got is not None and expected is not None
    assert got.to_bytes() == expected.to_bytes() == fold_reference(data, 3)


def test_r3_native_sampling_of_a_big_array_equals_the_python_path(monkeypatch: pytest.MonkeyPatch) -> None:
    items = [{"id": i, "name": f"item-{i}", "tags": ["a", "b"], "score": i / 7} for i in range(50_000)]
    data = json.dumps(items).encode()
    got = sample_json_array(data, 32)
    assert got is not None and got == without_native(monkeypatch, data, 32)
    document = json.loads(got)
    assert document["$a3s_sample"]["original_items"] == 50_000
    assert document["items"] == items[:16] + items[-16:]
    assert sample._raw_items(data, 16, 16) is not sample._UNDECIDED
