"""Validating the model's object against the caller's schema, and getting JSON out of a reply (G-2, G-3).

``ObjectSchema`` compiles the caller's schema once (draft 2020-12, local ``$ref``/``$defs``) and
reports at most ``MAX_REPORTED_ERRORS`` errors as ``"<json path>: <message>"``, each cut to
``MAX_ERROR_CHARS`` — what goes back to the model in a repair round. ``tool_parameters`` is the
schema as a forced tool's parameters: a tool's arguments are always an object, so a non-object root (an array, an enum…) is wrapped as
``{"value": …}`` with its ``$defs`` lifted to the wrapper so local references still resolve, and
``unwrap`` takes the value back out. ``extract_json`` reads a JSON value out of a text reply
(a bare value, or one fenced in Markdown, or the outermost ``{…}``/``[…]`` in prose), nested at most
``MAX_ANSWER_DEPTH`` levels (``TooDeep`` otherwise).
"""

from __future__ import annotations

import json
import re
from typing import Any

from kernel.call_args import depth_within, long_int_reason

MAX_REPORTED_ERRORS = 8
MAX_ERROR_CHARS = 300  # per reported error, its JSON path included
# An answer nests at most this deep (as a call's arguments do, ``kernel.call_args.MAX_ARGS_DEPTH``):
# deeper, ``json.loads`` or jsonschema's recursive descent raised RecursionError out of the call.
MAX_ANSWER_DEPTH = 64
WRAP_KEY = "value"
_FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.S)


class ObjectSchema:
    def __init__(self, schema: dict[str, Any]) -> None:
        import jsonschema  # on first use: not with every session build (CLI start-up, issue 13 item 7)

        self.schema = schema
        from kernel.schema_refs import ref_validator  # RE2 patterns (K-4); local refs, crawled once

        self._validator = ref_validator(jsonschema.Draft202012Validator, schema)
        self.wrapped = schema.get("type") != "object"

    def errors(self, value: Any) -> list[str]:
        """``"<path>: <message>"`` for each way ``value`` fails the schema (empty when it is valid)."""
        from kernel.schema_steps import bounded_errors  # a costly schema: invalid_argument (K-8)

        found = sorted(
            bounded_errors(self._validator, value), key=lambda e: (len(e.absolute_path), str(e.message))
        )
        # Each line whole is cut, path included: the model names the keys, and a 60 KiB key made
        # its path (and so the repair message) as long, eight times over.
        return [_short(f"{e.json_path}: {e.message}") for e in found[:MAX_REPORTED_ERRORS]]

    def tool_parameters(self) -> dict[str, Any]:
        if not self.wrapped:
            return self.schema
        inner = {k: v for k, v in self.schema.items() if k not in ("$defs", "definitions", "$schema", "$id")}
        wrapper: dict[str, Any] = {
            "type": "object",
            "properties": {WRAP_KEY: inner},
            "required": [WRAP_KEY],
            "additionalProperties": False,
        }
        for key in ("$defs", "definitions"):
            if key in self.schema:
                wrapper[key] = self.schema[key]
        return wrapper

    def unwrap(self, arguments: Any) -> Any:
        if self.wrapped and isinstance(arguments, dict) and set(arguments) == {WRAP_KEY}:
            return arguments[WRAP_KEY]
        return arguments


def _short(message: str, limit: int = MAX_ERROR_CHARS) -> str:
    return message if len(message) <= limit else message[:limit] + "…"


class NotJson(ValueError):
    """The reply held no parseable JSON value (a repair round tells the model so)."""


class TooDeep(NotJson):
    """The reply's value nests deeper than ``MAX_ANSWER_DEPTH`` (a repair round tells the model so;
    the final error has ``reason: too_deep``)."""

    def __init__(self) -> None:
        super().__init__(f"the value nests more than {MAX_ANSWER_DEPTH} levels deep")


def loads(text: str) -> Any:
    """``json.loads``, bounded: ``TooDeep`` instead of RecursionError or a value nested too deeply."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise TooDeep() from None
    if not depth_within(value, MAX_ANSWER_DEPTH):
        raise TooDeep()
    return value


def extract_json(text: str) -> Any:
    stripped = text.strip()
    if not stripped:
        raise NotJson("the reply was empty")
    try:
        return loads(stripped)
    except TooDeep:
        raise
    except ValueError:
        pass
    for block in _FENCE.findall(stripped):
        try:
            return loads(block.strip())
        except TooDeep:
            raise
        except ValueError:
            continue
    starts = [i for i in (stripped.find("{"), stripped.find("[")) if i >= 0]
    if starts:
        start = min(starts)
        closer = "}" if stripped[start] == "{" else "]"
        end = stripped.rfind(closer)
        if end > start:
            try:
                return loads(stripped[start : end + 1])
            except TooDeep:
                raise
            except json.JSONDecodeError as exc:
                raise NotJson(f"the reply is not valid JSON ({exc})") from None
            except ValueError as exc:  # valid JSON over Python's int-string limit
                raise NotJson(long_int_reason(exc, "the reply")) from None
    raise NotJson("the reply holds no JSON value")
