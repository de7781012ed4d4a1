"""Each tool's ``quick`` validator against its pydantic model (``kernel.spec.DeferredParams``; K-3, K-4).

``read`` and ``ls`` validate ordinary arguments without importing pydantic (CLI start-up, issue 13
item 7). Two validators of one schema must never disagree on what they accept, so on generated
arguments — valid ones, and every near miss: wrong JSON types, bools for ints, bounds ±1, extra
keys, lone surrogates, both forms of ``read`` at once — whatever ``quick`` accepts the model accepts
too, with the same value in every field; and ordinary valid arguments never need the model.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernel.errors import InvalidArgument
from kernel.spec import DeferredParams
from tools import ls, read
from tools.ls_params import Params as LsModel
from tools.read_params import Params as ReadModel

ODD_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-3, max_value=3),
    st.sampled_from([0, 1, 999, 1000, 1001, 1023, 1024, 2000, 2001, 98_304, 98_305, 2**70, -(2**70)]),
    st.floats(allow_nan=True),
    st.text(max_size=6),
    st.sampled_from(["", "a", "\ud800", "é", "x" * 4096, "x" * 4097, "../x", "README.md"]),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


def file_items() -> st.SearchStrategy[Any]:
    valid = st.fixed_dictionaries(
        {"path": st.sampled_from(["a.py", "src/b.py", "é.txt"])},
        optional={"offset": st.integers(0, 10**6), "limit": st.one_of(st.none(), st.integers(1, 2000))},
    )
    near = st.dictionaries(st.sampled_from(["path", "offset", "limit", "paths", "x"]), ODD_VALUES, max_size=4)
    return st.one_of(valid, near, ODD_VALUES)


def valid_read_args() -> st.SearchStrategy[dict[str, Any]]:
    single = st.fixed_dictionaries(
        {"file_path": st.sampled_from(["README.md", "a/b.py", "é"])},
        optional={
            "offset": st.one_of(st.none(), st.integers(0, 10**9)),
            "limit": st.one_of(st.none(), st.integers(1, 10**6)),
        },
    )
    batch = st.fixed_dictionaries(
        {"files": st.lists(file_items(), min_size=1, max_size=32)},
        optional={"max_output_bytes": st.one_of(st.none(), st.integers(1024, 98_304))},
    )
    return st.one_of(single, batch)


def one_key_off(
    valid: st.SearchStrategy[dict[str, Any]], keys: list[str]
) -> st.SearchStrategy[dict[str, Any]]:
    """A valid call with one key set to an odd value: the near misses a model makes."""
    return st.builds(lambda args, key, value: {**args, key: value}, valid, st.sampled_from(keys), ODD_VALUES)


def read_args() -> st.SearchStrategy[dict[str, Any]]:
    keys = ["file_path", "files", "offset", "limit", "max_output_bytes", "extra"]
    return st.one_of(valid_read_args(), one_key_off(valid_read_args(), keys), any_read_args())


def any_read_args() -> st.SearchStrategy[dict[str, Any]]:
    files = st.one_of(st.lists(file_items(), min_size=0, max_size=34), ODD_VALUES)
    values = {
        "file_path": st.one_of(st.sampled_from(["README.md", "a/b.py", ""]), ODD_VALUES),
        "files": files,
        "offset": st.one_of(st.integers(-2, 10**6), ODD_VALUES),
        "limit": st.one_of(st.integers(-1, 5000), ODD_VALUES),
        "max_output_bytes": st.one_of(st.integers(1000, 100_000), ODD_VALUES),
        "extra": ODD_VALUES,
    }
    return st.fixed_dictionaries({}, optional=values)


def ls_args() -> st.SearchStrategy[dict[str, Any]]:
    valid = st.fixed_dictionaries(
        {},
        optional={"path": st.sampled_from(["", "src"]), "limit": st.integers(1, 1000), "cursor": st.just("")},
    )
    return st.one_of(valid, one_key_off(valid, ["path", "limit", "cursor", "recursive"]), any_ls_args())


def any_ls_args() -> st.SearchStrategy[dict[str, Any]]:
    values = {
        "path": st.one_of(st.sampled_from(["", ".", "src", "a/b"]), ODD_VALUES),
        "limit": st.one_of(st.integers(-1, 1001), ODD_VALUES),
        "cursor": st.one_of(st.just(ls.encode_cursor("a")), ODD_VALUES),
        "recursive": ODD_VALUES,
    }
    return st.fixed_dictionaries({}, optional=values)


def _assert_agrees(quick: Any, model: Any, args: dict[str, Any]) -> None:
    value = quick(args)
    if value is None:
        return  # left to the model: nothing to compare
    parsed = model.model_validate(args, strict=True)  # raises if quick accepted what the model refuses
    assert dataclasses.asdict(value) == parsed.model_dump(), args


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(read_args())
def test_k4_read_quick_accepts_only_what_the_model_accepts_with_equal_values(args: dict[str, Any]) -> None:
    _assert_agrees(read.quick_params, ReadModel, args)


@settings(max_examples=800, deadline=None)
@given(ls_args())
def test_k4_ls_quick_accepts_only_what_the_model_accepts_with_equal_values(args: dict[str, Any]) -> None:
    _assert_agrees(ls.quick_params, LsModel, args)


@pytest.mark.parametrize(
    "tool, args",
    [
        (read, {"file_path": "README.md"}),
        (read, {"file_path": "src/main.py", "offset": 10, "limit": 2000}),
        (read, {"file_path": "a", "offset": None, "limit": None, "files": None, "max_output_bytes": None}),
        (read, {"files": [{"path": "a.py"}, {"path": "b.py", "offset": 100, "limit": 50}]}),
        (read, {"files": [{"path": "a.py", "limit": None}] * 32, "max_output_bytes": 1024}),
        (ls, {}),
        (ls, {"path": "src", "limit": 1000, "cursor": ""}),
    ],
)
def test_k3_ordinary_arguments_never_need_the_model(tool: Any, args: dict[str, Any]) -> None:
    assert tool.quick_params(args) is not None
    assert isinstance(tool.TOOL.params, DeferredParams)
    assert tool.TOOL.validate(args) == tool.quick_params(args)


@pytest.mark.parametrize(
    "args, where",
    [
        ({"file_path": "a", "limit": True}, "/limit"),
        ({"file_path": "a", "offset": -1}, "/offset"),
        ({"files": [{"path": "a", "offset": "3"}]}, "/files/0/offset"),
        ({"file_path": "a", "files": [{"path": "b"}]}, "exactly one of file_path and files"),
        ({"file_path": "a", "surprise": 1}, "/surprise: additional property is not allowed"),
    ],
)
def test_k4_what_quick_leaves_gets_the_models_error(args: dict[str, Any], where: str) -> None:
    assert read.quick_params(args) is None
    with pytest.raises(InvalidArgument, match=where):
        read.TOOL.validate(args)


def test_k3_the_schema_is_still_generated_from_the_model() -> None:
    """CONVENTIONS 2: the JSON Schema comes from the pydantic model, never written by hand."""
    assert read.TOOL.json_schema["properties"] == ReadModel.model_json_schema()["properties"]
    assert ls.TOOL.json_schema["properties"] == LsModel.model_json_schema()["properties"]
    assert read.TOOL.json_schema["additionalProperties"] is False
    assert read.Params is ReadModel and read.FileRequest.__name__ == "FileRequest" and ls.Params is LsModel
