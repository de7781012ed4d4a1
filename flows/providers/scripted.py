"""``scripted:FILE`` — a deterministic model that replays a JSON file of assistant turns (SPEC G-6).

For offline demos and tests. The file is ``{"turns": [...]}`` or a bare list; each turn is
``{"text"?, "tool_calls"?: [{"id"?, "name", "arguments": object | JSON text}], "usage"?, "error"?}``.
The whole file is checked when the provider is built, so a bad script fails before any request.

Replay is stateless: the answer to a request is ``turns[N]`` where N is the number of assistant
messages already in the request. A resumed session therefore continues the script where it stopped
(in any process), and each ``generate_object`` call — a fresh conversation — starts at ``turns[0]``.
A turn with ``error`` (an ``error_kind`` dict) raises that typed error instead of answering, so the
loop's retry and failure paths can be exercised offline. Usage defaults to ceil(bytes/4) estimates.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flows.providers.base import drain
from flows.providers.types import (
    Completion,
    Message,
    ModelRequest,
    ProviderFeatures,
    StreamItem,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    Usage,
)
from kernel.errors import InvalidArgument, error_from_kind

MAX_SCRIPT_BYTES = 16 * 1024 * 1024
TEXT_CHUNK_CHARS = 16  # streamed text arrives in pieces, like a real server's
FEATURES = ProviderFeatures(tool_choice=True, json_mode=True, strict_schema=True)


@dataclass(frozen=True, slots=True)
class ScriptedTurn:
    text: str
    tool_calls: tuple[ToolCall, ...]
    usage: Usage | None
    error: dict[str, Any] | None


def _estimate(text: str) -> int:
    return (len(text.encode("utf-8")) + 3) // 4


def parse_turns(data: Any, source: str) -> list[ScriptedTurn]:
    """The turns of a script (``{"turns": [...]}`` or a list); ``InvalidArgument`` naming the bad turn."""
    turns = data.get("turns") if isinstance(data, dict) else data
    if not isinstance(turns, list) or not turns:
        raise InvalidArgument(f"{source}: expected a non-empty list of turns (or {{'turns': [...]}})")
    out: list[ScriptedTurn] = []
    for i, turn in enumerate(turns):
        where = f"{source}: turns[{i}]"
        if not isinstance(turn, dict):
            raise InvalidArgument(f"{where}: a turn is an object")
        unknown = set(turn) - {"text", "tool_calls", "usage", "error"}
        if unknown:
            raise InvalidArgument(f"{where}: unknown keys {sorted(unknown)}")
        text = turn.get("text", "")
        if not isinstance(text, str):
            raise InvalidArgument(f"{where}.text: a string")
        error = turn.get("error")
        if error is not None and not (isinstance(error, dict) and isinstance(error.get("type"), str)):
            raise InvalidArgument(f"{where}.error: an error_kind object with a 'type'")
        calls: list[ToolCall] = []
        for j, call in enumerate(turn.get("tool_calls") or []):
            if not isinstance(call, dict) or not isinstance(call.get("name"), str) or not call["name"]:
                raise InvalidArgument(f"{where}.tool_calls[{j}]: needs a 'name'")
            args = call.get("arguments", {})
            raw = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
            calls.append(ToolCall(str(call.get("id") or f"call_{i}_{j}"), call["name"], raw))
        usage = turn.get("usage")
        if usage is not None and not isinstance(usage, dict):
            raise InvalidArgument(f"{where}.usage: an object")
        out.append(ScriptedTurn(text, tuple(calls), Usage.from_json(usage) if usage else None, error))
    return out


def load_script(path: str) -> list[ScriptedTurn]:
    """The turns of the script at ``path``: a regular file of at most ``MAX_SCRIPT_BYTES``.

    An agent definition names its model, and the model can write ``.a3s/agents``: ``scripted:/dev/zero``
    read without end, a FIFO blocked the open forever. The file is opened non-blocking, checked on
    its descriptor (no race with a swap), and read to at most one byte past the bound."""
    try:
        fd = os.open(os.path.expanduser(path), os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise InvalidArgument(f"scripted model file not found: {path}") from None
    except OSError as exc:
        raise InvalidArgument(f"scripted model file {path} is not readable ({exc.strerror or exc})") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise InvalidArgument(f"scripted model file {path} is not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            raw = fh.read(MAX_SCRIPT_BYTES + 1)
    except OSError as exc:
        raise InvalidArgument(f"scripted model file {path} is not readable ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
    if len(raw) > MAX_SCRIPT_BYTES:
        raise InvalidArgument(f"scripted model file {path} is larger than {MAX_SCRIPT_BYTES} bytes")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise InvalidArgument(f"scripted model file {path} is not readable JSON: {exc}") from None
    return parse_turns(data, path)


class ScriptedProvider:
    features = FEATURES

    def __init__(self, path: str, turns: list[ScriptedTurn] | None = None) -> None:
        self.name = f"scripted:{path}"
        self.turns = turns if turns is not None else load_script(path)

    async def complete(self, request: ModelRequest) -> Completion:
        return await drain(self.stream(request))

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        n = sum(1 for m in request.messages if m.role == "assistant")
        if n >= len(self.turns):
            raise InvalidArgument(f"scripted model has no turn {n} (the script has {len(self.turns)})")
        turn = self.turns[n]
        if turn.error is not None:
            raise error_from_kind(turn.error, f"scripted model error: {turn.error['type']}")
        if request.stream:
            for i in range(0, len(turn.text), TEXT_CHUNK_CHARS):
                yield TextDelta(turn.text[i : i + TEXT_CHUNK_CHARS])
            for index, call in enumerate(turn.tool_calls):
                yield ToolCallDelta(index, call.id, call.name, call.arguments)
        elif turn.text:
            yield TextDelta(turn.text)
        usage = turn.usage or Usage(
            _estimate((request.system or "") + "".join(m.content for m in request.messages)),
            _estimate(turn.text + "".join(c.arguments for c in turn.tool_calls)),
        )
        stop = "tool_calls" if turn.tool_calls else "stop"
        yield Completion(Message("assistant", turn.text, turn.tool_calls), usage, stop)


def script_key(path: str) -> tuple[str, ...]:
    """Cache identity of a script file: a changed file is read again."""
    try:
        st = Path(os.path.expanduser(path)).stat()
    except OSError:
        return ("missing",)
    return (str(st.st_mtime_ns), str(st.st_size))
