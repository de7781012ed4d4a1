"""YAML front matter of workspace definition files: agents and skills (SPEC M-2, X-3; K-8).

The model can write every file of the workspace, ``.a3s/agents/*.md`` and ``.a3s/skills/*/SKILL.md``
included, so their front matter is hostile input. ``load_mapping(text)`` reads it with libyaml's
safe loader (``yaml.CSafeLoader`` when PyYAML was built with it, else ``yaml.SafeLoader``: no Python
tags, no object construction) in two steps:

1. compose the node graph and weigh it before building anything: YAML aliases share nodes, so ten
   lines can stand for 10^9 values ("billion laughs") that only blow up later, when a value is
   printed or copied. The graph is walked once, iteratively, counting each node as many times as
   aliases repeat it; past ``MAX_EXPANDED_VALUES`` values, past ``MAX_DEPTH`` levels, or on an
   alias inside its own anchor (a cycle) the front matter is refused with a ``reason`` naming the
   problem (``alias_bomb``, ``too_deep``, ``recursive_alias``);
2. build the values. Whatever a safe constructor raises — an unhashable key (``? [a]``), a
   ``!!python/…`` tag, a malformed merge, a bad ``!!timestamp`` or ``!!float`` (``ValueError``) —
   means the front matter cannot be built: ``reason`` ``unbuildable``, naming the problem. A document that is not a mapping is
   ``not_mapping``; text that is not YAML is ``not_yaml``.

Every failure is ``FrontMatterError`` (an ``InvalidArgument``); callers prefix the file it came from.
"""

from __future__ import annotations

from typing import Any

from kernel.errors import InvalidArgument

MAX_EXPANDED_VALUES = 100_000
MAX_DEPTH = 64
MAX_DETAIL_CHARS = 300


class FrontMatterError(InvalidArgument):
    """Front matter that cannot be read; ``reason`` is one of the kinds of the module docstring."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message, reason=reason)
        self.reason = reason


def _detail(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:MAX_DETAIL_CHARS]


def _loader_class() -> Any:
    import yaml

    return getattr(yaml, "CSafeLoader", None) or yaml.SafeLoader


def load_mapping(text: str) -> dict[Any, Any]:
    """The mapping ``text`` (YAML) holds; ``FrontMatterError`` otherwise (see the module docstring)."""
    import yaml

    loader = _loader_class()(text)
    try:
        try:
            node = loader.get_single_node()
        except yaml.YAMLError as exc:
            raise FrontMatterError(f"is not valid YAML ({_detail(exc)})", "not_yaml") from None
        except RecursionError:
            raise FrontMatterError(f"nests deeper than {MAX_DEPTH} levels", "too_deep") from None
        if node is None:
            raise FrontMatterError("must be a mapping (it is empty)", "not_mapping")
        _weigh(node)
        try:
            value = loader.construct_document(node)
        except yaml.YAMLError as exc:  # an unknown (Python) tag, an unhashable key, a bad merge
            raise FrontMatterError(f"is not valid YAML ({_detail(exc)})", "unbuildable") from None
        except Exception as exc:  # safe constructors on hostile input: any failure means "cannot build"
            raise FrontMatterError(
                f"holds a value that cannot be built ({type(exc).__name__}: {_detail(exc)})", "unbuildable"
            ) from None
    finally:
        loader.dispose()
    if not isinstance(value, dict):
        raise FrontMatterError("must be a mapping", "not_mapping")
    return value


def _weigh(root: Any) -> None:
    """Refuse a node graph that expands past the bounds (iterative post-order walk, memoised per node)."""
    import yaml

    size: dict[int, int] = {}  # id(node) -> expanded values below and including it
    depth: dict[int, int] = {}
    open_nodes: set[int] = set()  # on the current path: meeting one again is a cycle
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if isinstance(node, yaml.MappingNode):
            children = [child for pair in node.value for child in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        else:
            children = []
        if done:
            open_nodes.discard(key)
            total = 1 + sum(size[id(c)] for c in children)
            deepest = 1 + max((depth[id(c)] for c in children), default=0)
            if total > MAX_EXPANDED_VALUES:
                raise FrontMatterError(
                    f"is refused: its YAML aliases expand to more than {MAX_EXPANDED_VALUES} values "
                    "(an alias bomb)",
                    "alias_bomb",
                )
            if deepest > MAX_DEPTH:
                raise FrontMatterError(f"nests deeper than {MAX_DEPTH} levels", "too_deep")
            size[key] = total
            depth[key] = deepest
            continue
        if key in size:
            continue
        if key in open_nodes:
            raise FrontMatterError("is refused: a YAML alias refers to its own anchor", "recursive_alias")
        open_nodes.add(key)
        stack.append((node, True))
        for child in children:
            cid = id(child)
            if cid in open_nodes:
                raise FrontMatterError("is refused: a YAML alias refers to its own anchor", "recursive_alias")
            if cid not in size:
                stack.append((child, False))


def shown_value(value: Any, limit: int = 80) -> str:
    """``value`` as an error message shows it: a string quoted and cut, anything else by its type
    (a 16 KiB ``0x…`` integer has no decimal ``str``; a list built from aliases may be huge)."""
    if isinstance(value, str):
        return repr(value[:limit])
    return f"(type {type(value).__name__})" if value is not None else "(missing)"
