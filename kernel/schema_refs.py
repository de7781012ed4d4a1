"""References in a schema the model or an MCP server wrote: local, resolvable, never fetched (SPEC K-4,
G-2, M-1, X-3).

jsonschema resolves a ``$ref`` it has not seen through its default registry, which *fetches the URI
over the network* (``urlopen``, with a DeprecationWarning) — and a reference that resolves nowhere
raises from the middle of a validation, long after the schema was accepted. The schemas here come
from the model (``generate_object``'s ``schema``, a task's ``output_schema``) or from an MCP server
(a tool's ``inputSchema``), so:

- ``check_refs(schema, cls)`` crawls the schema once with ``referencing`` (the library jsonschema
  resolves with) as the draft of validator class ``cls`` reads it, and walks its subschemas with
  their base URIs (``$id`` included): every ``$ref``, ``$dynamicRef`` and ``$recursiveRef`` must be
  a string starting with ``#`` (a JSON pointer or an anchor of this document) and must resolve to a
  schema. Otherwise ``RefRefused`` (a ``ValueError``: an argument validator turns it into
  ``invalid_argument``; a host registering a tool gets it at registration). Keywords that hold data
  (``enum``, ``const``, ``default``, ``examples``) are not subschemas and are not looked at. It
  returns the crawled registry;
- ``ref_validator(cls, schema)`` is ``linear_validator(cls)`` (RE2 patterns, counted steps) built on
  that registry: every lookup of a validation hits what the crawl found — nothing is crawled again,
  and the registry's retrieval is ``referencing``'s default, which refuses every URI (no network).
"""

from __future__ import annotations

from typing import Any

REF_KEYWORDS = ("$ref", "$dynamicRef", "$recursiveRef")
MAX_SHOWN_REF_CHARS = 200


class RefRefused(ValueError):
    """A schema reference that is not local or does not resolve (the message names it)."""


def _shown(ref: Any) -> str:
    if isinstance(ref, str):
        return repr(ref[:MAX_SHOWN_REF_CHARS])
    return f"a {type(ref).__name__}"


def _specification(cls: Any) -> Any:
    """The ``referencing`` specification jsonschema's ``cls`` builds its root resource with."""
    from referencing.jsonschema import DRAFT202012, specification_with

    dialect = cls.ID_OF(cls.META_SCHEMA)
    if not isinstance(dialect, str):
        return DRAFT202012
    return specification_with(dialect, default=DRAFT202012)


def check_refs(schema: Any, cls: Any) -> Any:
    """The crawled ``referencing.Registry`` of ``schema``; ``RefRefused`` for a reference that is not
    local or does not resolve to a schema (see the module docstring)."""
    from referencing import Registry

    root = _specification(cls).create_resource(schema)
    # The URI jsonschema gives the root (``Registry.resolver_with_root``): lookups hit this crawl.
    base = root.id() or ""
    registry = Registry().with_resource(base, root).crawl()
    stack = [(registry.resolver(base_uri=base), root)]
    while stack:
        resolver, resource = stack.pop()
        contents = resource.contents
        if isinstance(contents, dict):
            for keyword in REF_KEYWORDS:
                if keyword in contents:
                    _resolve(resolver, keyword, contents[keyword])
        for sub in resource.subresources():
            stack.append((resolver.in_subresource(sub), sub))
    return registry


def _resolve(resolver: Any, keyword: str, ref: Any) -> None:
    if not isinstance(ref, str) or not ref.startswith("#"):
        raise RefRefused(
            f"{keyword} {_shown(ref)} is not a local reference: only local references (#…) "
            "are allowed, nothing is fetched"
        )
    try:
        target = resolver.lookup(ref).contents
    except Exception as exc:  # Unresolvable, or a pointer walking into a non-container: either way, nowhere
        raise RefRefused(f"{keyword} {_shown(ref)} does not resolve ({type(exc).__name__})") from None
    if not isinstance(target, (dict, bool)):
        raise RefRefused(f"{keyword} {_shown(ref)} does not resolve to a schema")


def ref_validator(cls: Any, schema: Any) -> Any:
    """A ``linear_validator(cls)`` for ``schema`` built on its checked, crawled registry."""
    from kernel.schema_patterns import linear_validator

    return linear_validator(cls)(schema, registry=check_refs(schema, cls))
