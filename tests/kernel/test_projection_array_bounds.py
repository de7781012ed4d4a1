"""Sampling a big array of objects cuts out only its head and tail (SPEC R-3; issue 13 item 7).

``kernel.projection.sample`` validates and counts an array of objects in one msgspec pass that
keeps nothing per item, then finds the retained items' bytes with ``kernel.projection.array_bounds``
(forward from ``[``, backward from ``]``). The sample must be exactly the one the general path
(a raw slice per item) gives — same count, same items, same bytes — for any valid document,
including strings full of quotes, backslashes, brackets and commas, which the backward scan is
most likely to get wrong. Anything the fast path cannot settle goes to the general path.
"""

from __future__ import annotations

import json

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel.projection import array_bounds, sample
from kernel.projection.sample import sample_json_array

TRICKY = st.text(alphabet=st.sampled_from(list('ab"\\[]{},: \n\t\u00e9\U0001f642')), max_size=12)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | TRICKY
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TRICKY, inner, max_size=4),
    max_leaves=12,
)
OBJECTS = st.dictionaries(TRICKY, VALUES, max_size=5)


def general(data: bytes, head: int, tail: int) -> object:
    """The general path: a raw slice per item, the retained ones decoded."""
    raws = msgspec.json.Decoder(list[msgspec.Raw]).decode(data)
    if len(raws) < head + tail:
        return None
    return len(raws), [msgspec.json.decode(r) for r in [*raws[:head], *raws[len(raws) - tail :]]]


@settings(max_examples=300, deadline=None)
@given(
    items=st.lists(OBJECTS, min_size=0, max_size=40),
    keep=st.integers(1, 12),
    indent=st.sampled_from([None, 1]),
    ascii_only=st.booleans(),
)
def test_r3_object_arrays_sample_exactly_as_the_general_path(
    items: list[dict[str, object]], keep: int, indent: int | None, ascii_only: bool
) -> None:
    data = json.dumps(items, indent=indent, ensure_ascii=ascii_only).encode()
    head, tail = (keep + 1) // 2, keep // 2
    fast = sample._object_items(data, head, tail)
    assert fast is sample._UNDECIDED or fast == general(data, head, tail)
    assert sample._raw_items(data, head, tail) == general(data, head, tail)


def test_r3_the_fast_path_settles_big_arrays_of_objects() -> None:
    items = [{"id": i, "s": 'q"}],[{\\', "n": [i, {"x": "]"}]} for i in range(5000)]
    data = json.dumps(items).encode()
    assert sample._object_items(data, 16, 16) == (5000, items[:16] + items[-16:])
    doc = sample_json_array(b"  \n" + data + b"\n ", 32)
    assert doc is not None and json.loads(doc)["items"] == items[:16] + items[-16:]


@pytest.mark.parametrize(
    "text",
    [
        b"[1, 2, 3, 4, 5, 6]",  # not objects: the general path
        b'[{"a": 1}, 2, {"b": 3}, {"c": 4}, {"d": 5}]',  # one is not an object
        b'[{"a": [1, 2]}, [3], {"c": 4}, {"d": 5}, {"e": 6}]',
    ],
)
def test_r3_arrays_that_are_not_all_objects_take_the_general_path(text: bytes) -> None:
    assert sample._object_items(text, 2, 2) is sample._UNDECIDED
    assert sample._raw_items(text, 2, 2) == general(text, 2, 2)


def test_r3_a_long_scan_gives_up_to_the_general_path() -> None:
    """A head item with more structure than a scan may walk: not settled here, same sample anyway."""
    big = {"n": list(range(array_bounds.MAX_TOKENS))}
    items = [big] + [{"i": i} for i in range(10)] + [big]
    data = json.dumps(items).encode()
    assert array_bounds.head_end(data, 0, 1) is None
    assert array_bounds.tail_start(data, len(data) - 1, 1) is None
    assert sample._object_items(data, 2, 2) is sample._UNDECIDED
    assert sample._raw_items(data, 2, 2) == general(data, 2, 2)


def test_r3_backward_scan_starts_inside_a_long_string() -> None:
    """The tail window opens in the middle of a string holding brackets, commas and escaped quotes."""
    filler = '\\"],[{,' * 500
    items = [{"s": filler, "i": i} for i in range(6)]
    data = json.dumps(items).encode()
    start = array_bounds.tail_start(data, len(data) - 1, 2)
    assert start is not None
    assert json.loads(b"[" + data[start:]) == items[-2:]
    stop = array_bounds.head_end(data, 0, 3)
    assert stop is not None and json.loads(data[:stop] + b"]") == items[:3]


def test_r3_long_backslash_runs_near_the_end_give_up_to_the_general_path() -> None:
    items = [{"p": "\\" * 40 + '"' + "\\" * 40, "i": i} for i in range(40)]
    data = json.dumps(items).encode()
    assert array_bounds.tail_start(data, len(data) - 1, 3) is None
    assert sample._raw_items(data, 3, 3) == general(data, 3, 3)
