"""The SDK and CLI entry points: ``from orchestrator import Agent``."""

from orchestrator.agent import Agent
from orchestrator.session import InvocationRuntime, Session

__all__ = ["Agent", "InvocationRuntime", "Session"]
