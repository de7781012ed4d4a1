"""Merging streamed tool-call deltas (SPEC A-3; REFERENCE #139).

Servers stream a tool call in pieces keyed by ``index``: the first piece usually carries the id and
name, later ones only argument text. Some servers (llama.cpp, vLLM versions, proxies) repeat the
name as ``""`` or ``null`` in later pieces; a naive ``name = delta.name`` would erase the real
name, so an empty later ``name`` or ``id`` never overwrites a real one. Pieces may arrive for
several indexes interleaved; the merged calls come out in index order. ``StreamState`` is what a
wire's stream reader keeps across its chunks (both wires' readers share it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from flows.providers.types import ToolCall, ToolCallDelta, Usage


@dataclass(slots=True)
class _Partial:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class ToolCallAccumulator:
    def __init__(self) -> None:
        self._calls: dict[int, _Partial] = {}

    def add(self, delta: ToolCallDelta) -> None:
        part = self._calls.setdefault(delta.index, _Partial())
        if delta.id:  # never overwrite a real id with an empty one
            part.id = delta.id
        if delta.name:  # never overwrite a real name with an empty one (#139)
            part.name = delta.name
        if delta.arguments:
            part.arguments.append(delta.arguments)

    def __bool__(self) -> bool:
        return bool(self._calls)

    def calls(self, id_prefix: str = "call") -> tuple[ToolCall, ...]:
        """The merged calls in index order; a call the server never named an id gets a stable one."""
        out = []
        for index in sorted(self._calls):
            part = self._calls[index]
            out.append(ToolCall(part.id or f"{id_prefix}_{index}", part.name, "".join(part.arguments)))
        return tuple(out)


@dataclass
class StreamState:
    """A streamed answer so far: its text pieces, tool-call pieces, usage and stop reason."""

    text: list[str] = field(default_factory=list)
    calls: ToolCallAccumulator = field(default_factory=ToolCallAccumulator)
    usage: Usage = field(default_factory=Usage)
    stop: str = ""
    started: bool = False  # Anthropic's message_start was read
