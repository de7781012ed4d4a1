"""Step 1 of the transform: sample an oversized top-level JSON array (SPEC R-3; REFERENCE §6.2).

If the whole document is one valid JSON array with more than ``N`` items, it becomes
``{"$a3s_sample":{schema, kind:"json_array", original_items, retained_items, omitted_items},
"items":[first ceil(N/2) … last floor(N/2)]}`` in compact JSON. Anything else (not an array,
invalid JSON, trailing bytes, ``NaN``/``Infinity``, ``<= N`` items) is left alone (``None``).

Speed: ``kernel/projection/_scan.c`` (``_native_items``) validates the whole document, counts its
items and finds the head and tail cuts in one pass with the GIL released, so it runs beside the
SHA-256 of the same bytes; only the retained items are decoded. It leaves three rare cases
(nesting deeper than 128, numbers of magnitude >= 1e308, lone surrogate escapes) to the paths
below, which are also what runs where the extension could not be built.

Without it, msgspec validates the whole document in C and only the head and tail items are decoded.
An array of objects (the usual big JSON) is counted keeping an empty ``Struct`` per item, and its
head and tail items are cut out by ``kernel.projection.array_bounds`` (≈ 1.6× a SHA-256 pass over
the bytes); any other array keeps a raw slice per item (≈ 2×). Documents msgspec refuses go
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

from kernel.projection import array_bounds, native
from kernel.projection.policy import MAX_STRUCTURED_SAMPLE_ITEMS, TRANSFORM_ALGORITHM


def sample_json_array(data: bytes, max_items: int) -> bytes | None:
    """The sampled document as UTF-8, or ``None`` when the input is not a sampleable array."""
    max_items = min(max_items, MAX_STRUCTURED_SAMPLE_ITEMS)
    if max_items <= 0 or _first_token(data) != 0x5B:  # "["
        return None
    head_count = (max_items + 1) // 2
    tail_count = max_items // 2
    parsed = _native_items(data, head_count, tail_count)
    if parsed is _UNDECIDED:
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


def _native_items(data: bytes, head_count: int, tail_count: int) -> Any:
    """Fastest path: ``_scan.json_array`` validates the whole document strictly, counts the items
    and finds the head and tail cuts in one pass with the GIL released; only the retained items are
    decoded. ``_UNDECIDED`` where the module is missing or leaves the case to the parsers below."""
    scan = native.scan
    if scan is None:
        return _UNDECIDED
    verdict, total, head_stop, tail_from = scan.json_array(data, head_count, tail_count)
    if verdict == native.NOT_ARRAY:
        return None
    if verdict != native.VALID:
        return _UNDECIDED
    if total <= head_count + tail_count:
        return None
    return _cut_out(data, total, head_stop, tail_from, head_count, tail_count)


def _raw_items(data: bytes, head_count: int, tail_count: int) -> Any:
    """Fast path: msgspec validates the whole array in C, and only the retained items are ever
    decoded. Anything it refuses goes to the slower parsers, which decide (msgspec's number and
    depth limits differ from serde's)."""
    found = _object_items(data, head_count, tail_count)
    if found is not _UNDECIDED:
        return found
    try:
        raws = _raw_list_decoder().decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return _UNDECIDED
    total = len(raws)
    if total < head_count + tail_count:
        return None
    return _decoded(total, [*raws[:head_count], *raws[total - tail_count :]])


def _object_items(data: bytes, head_count: int, tail_count: int) -> Any:
    """An array of objects (the usual big JSON: records, API results): one msgspec pass validates
    and counts it keeping only an empty ``Struct`` per item (a raw slice each costs ~40% more), then
    the head and tail items are cut out by ``kernel.projection.array_bounds`` and parsed alone.
    ``_UNDECIDED`` for anything else (an item that is not an object, a scan too long): the caller
    takes the general path, so the sample is the same either way."""
    try:
        total = len(_object_list_decoder().decode(data))
    except (msgspec.DecodeError, msgspec.ValidationError):
        return _UNDECIDED
    if total < head_count + tail_count:
        return None
    start = data.index(b"[")
    end = data.rindex(b"]")
    head_stop = array_bounds.head_end(data, start, head_count) if total > head_count else end
    tail_from = array_bounds.tail_start(data, end, tail_count) if tail_count else end
    if head_stop is None or tail_from is None:
        return _UNDECIDED
    return _cut_out(data, total, head_stop, tail_from, head_count, tail_count)


def _cut_out(
    data: bytes, total: int, head_stop: int, tail_from: int, head_count: int, tail_count: int
) -> Any:
    """The retained items of a valid array, parsed alone: the head up to ``head_stop`` (the comma
    after it), the tail from ``tail_from`` (just past the comma before it)."""
    decoder = _raw_list_decoder()
    try:
        head = decoder.decode(data[data.index(b"[") : head_stop] + b"]")
        tail = decoder.decode(b"[" + data[tail_from : data.rindex(b"]") + 1]) if tail_count else []
    except (msgspec.DecodeError, msgspec.ValidationError):
        return _UNDECIDED
    if len(head) != head_count or len(tail) != tail_count:  # never, for a valid document: stay safe
        return _UNDECIDED
    return _decoded(total, [*head, *tail])


def _decoded(total: int, kept: list[msgspec.Raw]) -> Any:
    try:
        return total, [msgspec.json.decode(raw) for raw in kept]
    except ValueError:  # msgspec's DecodeError and ValidationError, and invalid UTF-8 in a string
        return _UNDECIDED


class _Skipped(msgspec.Struct, gc=False):
    """An object item, validated and dropped: no fields, every key ignored."""


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
        # Text, not bytes: json.loads would guess UTF-16/32 from NUL bytes, which are not JSON here.
        value = json.loads(data.decode("utf-8"), parse_constant=reject)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, list):
        return None
    total = len(value)
    if total < head_count + tail_count:
        return None
    return total, [*value[:head_count], *value[total - tail_count :]]


@lru_cache(maxsize=1)
def _object_list_decoder() -> msgspec.json.Decoder[list[_Skipped]]:
    return msgspec.json.Decoder(list[_Skipped])


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
