"""Invocation origins (SPEC K-1, K-2; REFERENCE §5.1).

Origin is decided by *who constructs the invocation*, never read from ambient context:

- ``agent``: a model tool call; full policy + confirmation.
- ``governed_nested``: inner calls of model-owned ``batch``/``program``/workflows and every call made
  through the public ``InvocationRuntime``; full policy + confirmation.
- ``host_direct``: ``session.tool(...)`` (trusted control plane: skips policy + confirmation) or
  ``session.governed_tool(...)`` (governed control plane: full policy + confirmation).
- ``trusted_host_nested``: children of a *built-in* orchestrator invoked trusted host-direct; only
  the kernel builds it (see ``Kernel._child_origin``).
"""

from __future__ import annotations

from enum import StrEnum


class Origin(StrEnum):
    AGENT = "agent"
    GOVERNED_NESTED = "governed_nested"
    HOST_DIRECT = "host_direct"
    TRUSTED_HOST_NESTED = "trusted_host_nested"


class ControlPlane(StrEnum):
    """Only meaningful for ``host_direct``: does the call skip model-side policy?"""

    TRUSTED = "trusted"
    GOVERNED = "governed"


def is_governed(origin: Origin, plane: ControlPlane | None) -> bool:
    """Does model-side permission + confirmation apply to this call?"""
    if origin is Origin.HOST_DIRECT:
        return plane is ControlPlane.GOVERNED
    return origin in (Origin.AGENT, Origin.GOVERNED_NESTED)


def is_nested(origin: Origin) -> bool:
    return origin in (Origin.GOVERNED_NESTED, Origin.TRUSTED_HOST_NESTED)


def event_label(origin: Origin, plane: ControlPlane | None) -> str:
    """The origin label events carry: host-direct says which control plane it used."""
    if origin is Origin.HOST_DIRECT:
        return f"host_direct_{(plane or ControlPlane.TRUSTED).value}"
    return origin.value
