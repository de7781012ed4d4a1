"""The governed invocation kernel (pure: no Celery, Redis, tools or orchestrator imports).

The SDK-facing names: ``SessionOptions``, ``ToolResultTransformPolicyV1``, ``PermissionPolicy``,
``Budget``, ``Deny``, ``ToolResult`` (+ ``ToolCapabilities``, the error tree in ``kernel.errors``).
"""

from kernel.budget import Budget
from kernel.capabilities import ToolCapabilities
from kernel.options import ConfirmationRequest, SessionOptions
from kernel.policy import Allow, Ask, Deny, PermissionPolicy
from kernel.result import ToolResult


def __getattr__(name: str) -> object:
    # Lazy: the projection package is heavier and optional for pure-kernel imports.
    if name == "ToolResultTransformPolicyV1":
        from kernel.projection import ToolResultTransformPolicyV1

        return ToolResultTransformPolicyV1
    raise AttributeError(name)


__all__ = [
    "Allow",
    "Ask",
    "Budget",
    "ConfirmationRequest",
    "Deny",
    "PermissionPolicy",
    "SessionOptions",
    "ToolCapabilities",
    "ToolResult",
    "ToolResultTransformPolicyV1",
]
