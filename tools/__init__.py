"""The built-in tools. The list and the surface rule (SPEC S-2) are ``tools.builtin``; importing
one tool module (``tools.read``) no longer imports every other tool, so the CLI's ``tool read`` loads
only ``read`` (issue 13 item 7). ``from tools import builtin_tools`` still works (lazily)."""

from __future__ import annotations

from typing import Any

_BUILTIN = ("builtin_tools", "WORKSPACE_TOOLS", "RUNTIME_TOOLS", "ALL_TOOLS")


def __getattr__(name: str) -> Any:
    if name in _BUILTIN:
        from tools import builtin

        return getattr(builtin, name)
    raise AttributeError(f"module 'tools' has no attribute {name!r}")
