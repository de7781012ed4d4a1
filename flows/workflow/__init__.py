"""Durable dynamic workflows (SPEC F-2, F-3, F-7; REFERENCE 4.15): replay driver, history, logs, the tool.

``WorkflowDriver`` runs a script and its steps; ``History`` reads a run's event log; ``FileEventLogs``
keeps logs in ``<workspace>/.a3s/workflow/``; ``TOOL`` is the ``dynamic_workflow`` tool.
"""

from flows.workflow.driver import StepCall, StepRunner, WorkflowDriver, WorkflowLimits, WorkflowOutcome
from flows.workflow.events import History, check_run_id, query_of
from flows.workflow.log import EventLog, EventLogs, FileEventLogs
from flows.workflow.tool import TOOL, normalize_workflow_options

__all__ = [
    "TOOL",
    "EventLog",
    "EventLogs",
    "FileEventLogs",
    "History",
    "StepCall",
    "StepRunner",
    "WorkflowDriver",
    "WorkflowLimits",
    "WorkflowOutcome",
    "check_run_id",
    "normalize_workflow_options",
    "query_of",
]
