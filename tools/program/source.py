"""A program's source: loading (inline or a workspace ``.js``/``.mjs`` file), static rejects, entry point.

The static scan is the reference's substring scan (REFERENCE 4.12): a script that contains
``import ``, ``import(``, ``eval(``, ``Function(``, ``Worker(``, ``WebSocket`` or ``fetch(`` is refused
before any process starts. It is a first filter, not the boundary — the VM itself has no file
system, network, process or environment (``fetch``, ``require``, ``process``, ``std``, ``os`` are
``undefined`` there). ``export default`` is rewritten into an assignment the bridge picks up as
the entry point (so both ``export default async function run(ctx, inputs)`` and a default-exported
anonymous function work); any other ``export`` is refused, since the script is not a module.
"""

from __future__ import annotations

import json
import re
from typing import Any

from kernel.errors import InvalidArgument
from kernel.workspace import Workspace

MAX_SOURCE_BYTES = 192 * 1024
MAX_INPUTS_BYTES = 1024 * 1024  # the inputs are copied into the VM, which has 64 MiB
STATIC_REJECTS = ("import ", "import(", "eval(", "Function(", "Worker(", "WebSocket", "fetch(")
SOURCE_SUFFIXES = (".js", ".mjs")
DEFAULT_EXPORT = "globalThis.__a3s_default ="
_EXPORT_DEFAULT = re.compile(r"\bexport\s+default\b")
_OTHER_EXPORT = re.compile(r"(^|[;\n}])\s*export\s+(?!default\b)", re.MULTILINE)


def load_source(workspace: Workspace, source: str | None, path: str | None) -> str:
    """The script text: ``source`` inline, or the workspace file ``path`` (exactly one of them)."""
    if (source is None) == (path is None):
        raise InvalidArgument("program needs exactly one of `source` or `path`")
    if source is not None:
        text = source
    else:
        assert path is not None
        if not path.endswith(SOURCE_SUFFIXES):
            raise InvalidArgument(f"program path must name a .js or .mjs file, got {path!r}")
        entry = workspace.stat(path)
        if entry.size > MAX_SOURCE_BYTES:
            raise InvalidArgument(f"program source {path} is {entry.size} bytes, over {MAX_SOURCE_BYTES}")
        raw = workspace.read_bytes(path)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidArgument(f"program source {path} is not UTF-8: {exc}") from None
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:  # a lone surrogate: the VM could not hand the text back
        raise InvalidArgument(f"program source is not valid Unicode text: {exc}") from None
    if size > MAX_SOURCE_BYTES:
        raise InvalidArgument(f"program source is {size} bytes, over the {MAX_SOURCE_BYTES}-byte limit")
    if not text.strip():
        raise InvalidArgument("program source is empty")
    return text


def check_inputs(value: Any, what: str) -> None:
    """The JSON value handed to a script stays small next to the VM's memory."""
    size = len(json.dumps(value, ensure_ascii=False, default=str).encode("utf-8", "surrogatepass"))
    if size > MAX_INPUTS_BYTES:
        raise InvalidArgument(f"{what} are {size} bytes of JSON, over {MAX_INPUTS_BYTES}")


def check_source(text: str) -> None:
    """The reference's static rejects; each names what was found."""
    for needle in STATIC_REJECTS:
        if needle in text:
            raise InvalidArgument(
                f"program script rejected: it contains `{needle.strip()}`, which is not available in the "
                "QuickJS sandbox (no modules, no eval, no workers, no network; use ctx.* for tools)"
            )
    if _OTHER_EXPORT.search(text):
        raise InvalidArgument(
            "program script rejected: only `export default` is supported (the script is not a module)"
        )


def prepare(text: str) -> str:
    """Check the source and rewrite ``export default`` into the bridge's entry-point assignment."""
    check_source(text)
    matches = _EXPORT_DEFAULT.findall(text)
    if len(matches) > 1:
        raise InvalidArgument("program script rejected: more than one `export default`")
    return _EXPORT_DEFAULT.sub(DEFAULT_EXPORT, text, count=1)
