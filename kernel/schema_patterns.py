"""Raw JSON Schemas whose ``pattern``s are matched in linear time (SPEC K-4, M-1).

A dynamic tool's schema comes from its host or from an MCP server, which may be hostile, and the
model picks the strings matched against it. jsonschema matches ``pattern``, ``patternProperties``
and the ``additionalProperties`` that depends on them with Python's backtracking ``re``:
``^(a+)+$`` against 30 ``a`` and a ``!`` took 39 s, holding the GIL — no deadline stops a match
in progress, so every session of the process stopped with it. Here those keywords match with RE2
(linear time, as ``tools/search/linear_regex.py`` uses for grep).

``linear_validator(cls)`` is ``cls`` with those keywords replaced. ``check_patterns(schema)`` runs at
registration: a pattern RE2 cannot read (backreferences, lookaround) refuses the tool, and so does
``unevaluatedProperties`` next to ``patternProperties`` (jsonschema would match those patterns
with ``re`` to find the evaluated keys).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

# Keywords whose values are data, not schemas: a "pattern" inside them is not a pattern.
_DATA_KEYWORDS = frozenset({"default", "examples", "const", "enum"})


class PatternRefused(ValueError):
    """A schema pattern that cannot be matched in linear time."""


def _options() -> Any:
    import re2  # on first use, like jsonschema: CLI start-up does not pay for it

    options = re2.Options()
    options.log_errors = False  # the refusal says why; RE2's own log line would go to stderr
    return options


@functools.lru_cache(maxsize=512)
def _compiled(pattern: str) -> Any:
    import re2

    try:
        return re2.compile(pattern, _options())
    except re2.error as exc:
        detail = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else exc
        raise PatternRefused(
            f"schema pattern {pattern[:200]!r} cannot be matched in linear time ({detail}); "
            "backreferences and lookaround are not supported"
        ) from None


def _search(pattern: str, text: str) -> bool:
    return _compiled(pattern).search(text) is not None


def _patterns(schema: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every (pattern, the schema object holding it) of ``schema``, data keywords skipped."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
            continue
        if not isinstance(node, dict):
            continue
        if isinstance(node.get("pattern"), str):
            yield node["pattern"], node
        props = node.get("patternProperties")
        if isinstance(props, dict):
            for key in props:
                yield key, node
        stack.extend(v for k, v in node.items() if k not in _DATA_KEYWORDS)


def check_patterns(schema: dict[str, Any]) -> None:
    """``PatternRefused`` unless every pattern of ``schema`` compiles in RE2 (see the module docstring)."""
    uses_unevaluated = False
    uses_pattern_properties = False
    stack: list[Any] = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            uses_unevaluated |= "unevaluatedProperties" in node
            uses_pattern_properties |= isinstance(node.get("patternProperties"), dict)
            stack.extend(v for k, v in node.items() if k not in _DATA_KEYWORDS)
        elif isinstance(node, list):
            stack.extend(node)
    if uses_unevaluated and uses_pattern_properties:
        raise PatternRefused(
            "schemas with both unevaluatedProperties and patternProperties are not supported"
        )
    for pattern, _ in _patterns(schema):
        _compiled(pattern)


def _pattern(validator: Any, pattern: str, instance: Any, schema: dict[str, Any]) -> Iterator[Any]:
    from jsonschema.exceptions import ValidationError

    if validator.is_type(instance, "string") and not _search(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(
    validator: Any, properties: dict[str, Any], instance: Any, schema: Any
) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in properties.items():
        for key, value in instance.items():
            if _search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional(instance: dict[str, Any], schema: dict[str, Any]) -> list[str]:
    properties = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    return [
        key
        for key in instance
        if key not in properties and not any(_search(pattern, key) for pattern in patterns)
    ]


def _additional_properties(
    validator: Any, allowed: Any, instance: Any, schema: dict[str, Any]
) -> Iterator[Any]:
    from jsonschema.exceptions import ValidationError

    if not validator.is_type(instance, "object"):
        return
    extras = _additional(instance, schema)
    if validator.is_type(allowed, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], allowed, path=extra)
    elif not allowed and extras:
        shown = ", ".join(repr(each) for each in sorted(extras))
        yield ValidationError(f"Additional properties are not allowed ({shown} unexpected)")


@functools.lru_cache(maxsize=8)
def linear_validator(cls: Any) -> Any:
    """``cls`` (a jsonschema draft validator) with its pattern keywords matched by RE2,
    ``uniqueItems`` checked in linear time (``kernel.schema_unique``), and every keyword counted
    against the budget of ``kernel.schema_steps.bounded_errors``."""
    from jsonschema import validators

    from kernel.schema_steps import counted
    from kernel.schema_unique import unique_items

    keywords = {
        **cls.VALIDATORS,
        "pattern": _pattern,
        "patternProperties": _pattern_properties,
        "additionalProperties": _additional_properties,
    }
    if "uniqueItems" in keywords:  # jsonschema's compares every pair of unsortable items
        keywords["uniqueItems"] = unique_items
    return validators.extend(cls, {name: counted(fn) for name, fn in keywords.items()})
