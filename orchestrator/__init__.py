"""The SDK and CLI entry points: ``from orchestrator import Agent``.

The names are resolved on first use (PEP 562), so importing a submodule — the ``a3s-fleet``
command line starts with ``orchestrator.cli`` — does not build the whole SDK first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orchestrator.agent import Agent
    from orchestrator.session import InvocationRuntime, Session

__version__ = "0.1.0"  # the package version (pyproject.toml reads it from here)
__all__ = ["Agent", "InvocationRuntime", "Session", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "Agent":
        from orchestrator.agent import Agent

        return Agent
    if name in ("InvocationRuntime", "Session"):
        from orchestrator import session

        return getattr(session, name)
    raise AttributeError(f"module 'orchestrator' has no attribute {name!r}")
