"""The agent loop (SPEC A-2): ``run_agent(core, prompt, ...) -> RunResult``; see ``loop.py``."""

from flows.agent.conversation import MODEL_STATE_KEY, Conversation
from flows.agent.loop import DEFAULT_MAX_STEPS, run_agent
from flows.agent.result import RunResult, ToolCallRecord
from flows.agent.tool_turn import SUSPEND_KEY

__all__ = [
    "DEFAULT_MAX_STEPS",
    "MODEL_STATE_KEY",
    "SUSPEND_KEY",
    "Conversation",
    "RunResult",
    "ToolCallRecord",
    "run_agent",
]
