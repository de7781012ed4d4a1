"""Step 1 of the transform: sample an oversized top-level JSON array (SPEC R-3; REFERENCE §6.2).

If the whole document is one valid JSON array with more than ``N`` items, it becomes
``{"$a3s_sample":{schema, kind:"json_array", original_items, retained_items, omitted_items},
"items":[first ceil(N/2) … last floor(N/2)]}`` in compact JSON. Anything else (not an array,
invalid JSON, trailing bytes, ``NaN``/``Infinity``, ``<= N`` items) is left alone (``None``).

Speed: msgspec validates the whole document in C while keeping items as raw slices, and only the
head and tail items are decoded (≈ 2× a SHA-256 pass over 10 MiB). Documents msgspec refuses go
to a pydantic-core (Rust) parse that builds Python objects only for the head and tail, which then
decides. The parser accepts the non-JSON
tokens ``NaN``/``Infinity``, so a document that contains them goes through the strict stdlib
parser instead (rare). Known difference from the Rust reference: jiter's depth limit is 200
where serde_json's is 128, and numbers beyond f64 become ±inf instead of failing the parse
(a retained ±inf still leaves the document alone, because the sample could not be JSON).
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

import msgspec
from pydantic_core import SchemaValidator, ValidationError
from pydantic_core import core_schema as cs

from kernel.projection.policy import MAX_STRUCTURED_SAMPLE_ITEMS, TRANSFORM_ALGORITHM


def sample_json_array(data: bytes, max_items: int) -> bytes | None:
    """The sampled document as UTF-8, or ``None`` when the input is not a sampleable array."""
    max_items = min(max_items, MAX_STRUCTURED_SAMPLE_ITEMS)
    if max_items <= 0 or _first_token(data) != 0x5B:  # "["
        return None
    head_count = (max_items + 1) // 2
    tail_count = max_items // 2
    parsed = _raw_items(data, head_count, tail_count)
    if parsed is _UNDECIDED:
        if b"NaN" in data or b"Infinity" in data:
            parsed = _strict_stdlib(data, head_count, tail_count)
        else:
            parsed = _rust_parse(data, head_count, tail_count)
    if parsed is None:
        return None
    total, items = parsed
    if total <= max_items:
        return None
    document = {
        "$a3s_sample": {
            "schema": TRANSFORM_ALGORITHM,
            "kind": "json_array",
            "original_items": total,
            "retained_items": len(items),
            "omitted_items": total - len(items),
        },
        "items": items,
    }
    try:
        text = json.dumps(document, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except ValueError:
        return None
    return text.encode("utf-8")


_UNDECIDED: Any = object()
_JSON_WS = b" \t\r\n"


def _first_token(data: bytes) -> int | None:
    """The first non-whitespace byte, without copying ``data`` (``lstrip`` would copy 10 MiB)."""
    for i in range(min(len(data), 4096)):
        if data[i] not in _JSON_WS:
            return data[i]
    return None


def _raw_items(data: bytes, head_count: int, tail_count: int) -> Any:
    """Fast path: msgspec validates the whole array in C and keeps each item as a raw slice, so
    only the retained items are ever decoded. Anything it refuses goes to the slower parsers,
    which decide (msgspec's number and depth limits differ from serde's)."""
    try:
        raws = _raw_list_decoder().decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return _UNDECIDED
    total = len(raws)
    if total < head_count + tail_count:
        return None
    kept = [*raws[:head_count], *raws[total - tail_count :]]
    try:
        return total, [msgspec.json.decode(raw) for raw in kept]
    except (msgspec.DecodeError, msgspec.ValidationError):
        return _UNDECIDED


def _rust_parse(data: bytes, head_count: int, tail_count: int) -> tuple[int, list[Any]] | None:
    try:
        values = _validator(head_count, tail_count).validate_json(data)
    except ValidationError:
        # Invalid JSON, not an array, or fewer than head+tail items (then nothing to sample).
        return None
    total = len(values)
    return total, [*values[:head_count], *values[total - tail_count :]]


def _strict_stdlib(data: bytes, head_count: int, tail_count: int) -> tuple[int, list[Any]] | None:
    def reject(token: str) -> Any:
        raise ValueError(f"not JSON: {token}")

    try:
        value = json.loads(data, parse_constant=reject)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, list):
        return None
    total = len(value)
    if total < head_count + tail_count:
        return None
    return total, [*value[:head_count], *value[total - tail_count :]]


@lru_cache(maxsize=1)
def _raw_list_decoder() -> msgspec.json.Decoder[list[msgspec.Raw]]:
    return msgspec.json.Decoder(list[msgspec.Raw])


@lru_cache(maxsize=16)
def _validator(head_count: int, tail_count: int) -> SchemaValidator:
    """``tuple[Any * head, *tuple[skip, ...], Any * tail]`` over JSON input."""
    keep = cs.any_schema()
    # An object validates cheaply as an empty TypedDict; anything else fails over to the default.
    skip = cs.with_default_schema(
        cs.typed_dict_schema({}, extra_behavior="ignore"), default=None, on_error="default"
    )
    schema = cs.tuple_schema(
        [keep] * head_count + [skip] + [keep] * tail_count, variadic_item_index=head_count
    )
    return SchemaValidator(schema)
