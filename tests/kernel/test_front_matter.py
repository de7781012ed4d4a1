"""Front matter of agent and skill files is hostile input: read safely and bounded (SPEC M-2, X-3, K-8).

Every way it can fail is a ``FrontMatterError`` (``invalid_argument``) whose ``reason`` names the
problem, never a ``ValueError`` from a constructor or a value too large to print.
"""

from __future__ import annotations

import time

import pytest

from kernel.errors import InvalidArgument
from kernel.front_matter import MAX_DEPTH, FrontMatterError, load_mapping, shown_value

BOMB = "\n".join(
    [
        "a: &a [x, x, x, x, x, x, x, x, x]",
        "b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]",
        "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]",
        "d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]",
        "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]",
        "f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]",
        "g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]",
        "h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]",
        "name: *h",
    ]
)


def test_m2_a_plain_mapping_loads_and_shared_aliases_within_bounds_are_fine() -> None:
    assert load_mapping("name: a\ntags: &t [x, y]\nmore: *t\n") == {
        "name": "a",
        "tags": ["x", "y"],
        "more": ["x", "y"],
    }


def test_m2_an_alias_bomb_is_refused_before_anything_is_built() -> None:
    started = time.monotonic()
    with pytest.raises(FrontMatterError) as info:
        load_mapping(BOMB)
    assert info.value.reason == "alias_bomb" and "alias bomb" in info.value.message
    assert time.monotonic() - started < 1.0


@pytest.mark.parametrize(
    ("text", "reason", "words"),
    [
        ("? [a, b]\n: 1\nname: x\n", "unbuildable", "not valid YAML"),  # unhashable key
        ("!!python/object/apply:os.system ['true']\n", "unbuildable", "not valid YAML"),
        ("name: x\nwhen: 2001-99-99 10:00:00\n", "unbuildable", "ValueError"),  # bad timestamp
        ("name: !!float x\n", "unbuildable", "ValueError"),
        ("<<: 5\n", "unbuildable", "not valid YAML"),
        ("a: &a [1, *a]\n", "recursive_alias", "its own anchor"),
        ("name: " + "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1) + "\n", "too_deep", "deeper than"),
        ("- a\n- b\n", "not_mapping", "must be a mapping"),
        ("", "not_mapping", "must be a mapping"),
        ("name: [unclosed\n", "not_yaml", "not valid YAML"),
    ],
)
def test_m2_front_matter_that_cannot_be_built_is_a_typed_error(text: str, reason: str, words: str) -> None:
    with pytest.raises(FrontMatterError) as info:
        load_mapping(text)
    assert isinstance(info.value, InvalidArgument)
    assert info.value.reason == reason and words in info.value.message


def test_m2_values_are_shown_by_type_when_they_are_not_text() -> None:
    huge = int("f" * 9000, 16)  # over Python's int-to-str digit limit: str() would raise ValueError
    assert shown_value(huge) == "(type int)"
    assert shown_value("x" * 500) == repr("x" * 80)
    assert shown_value(None) == "(missing)"
