"""How a fleet job is named for people (SPEC F-5): one rule, ``workers.protocol.job_label``, for fan-out
branches, direct calls and workflow steps; the client's ``task-sent`` event carries the same name as the
worker's events, so Flower never shows a bare ``a3s.tool``."""

from __future__ import annotations

import asyncio
import json

from config.settings import Settings
from flows.workflow.driver import StepCall
from kernel.result import ToolResult
from orchestrator.dispatch import CeleryRunner, _Run
from orchestrator.dispatch_workflow import BranchStepRunner
from orchestrator.fanout import Branch
from workers.app import make_app
from workers.protocol import TOOL_TASK, job_label, snapshot_digest


def test_f5_label_names_the_description_and_ties_the_job_to_its_run() -> None:
    label = job_label("run-1", 3, "test: unit — the unit tests", tool="bash")
    assert label.name == "a3s.tool:test: unit — the unit tests [run-1:3]"
    assert json.loads(label.kwargsrepr) == {
        "run_id": "run-1",
        "branch_index": 3,
        "description": "test: unit — the unit tests",
        "tool": "bash",
    }
    assert label.send_options() == {"shadow": label.name, "kwargsrepr": label.kwargsrepr, "argsrepr": "()"}


def test_f5_label_of_an_agent_child_a_step_and_a_bare_tool() -> None:
    child = job_label(
        "run-9", 0, "find the flaky test", task="a3s.agent", agent="explorer", parent_run_id="p"
    )
    assert child.name == "a3s.agent:explorer: find the flaky test [run-9:0]"
    assert json.loads(child.kwargsrepr)["parent_run_id"] == "p"
    step = job_label("wf-1", "fetch", "step fetch: read", tool="read", branch_index=2)
    assert step.name == "a3s.tool:step fetch: read [wf-1:fetch]"
    assert json.loads(step.kwargsrepr) == {
        "run_id": "wf-1",
        "step_id": "fetch",
        "description": "step fetch: read",
        "tool": "read",
        "branch_index": 2,
    }
    assert job_label("r", 1, "", tool="ls").name == "a3s.tool:ls [r:1]"


def test_f5_label_is_one_bounded_line() -> None:
    label = job_label("r", 0, "line one\nline two " + "x" * 500, tool="bash")
    title = label.name.removeprefix(f"{TOOL_TASK}:").removesuffix(" [r:0]")
    assert "\n" not in label.name and len(title) == 100 and title.endswith("…")
    assert len(json.loads(label.kwargsrepr)["description"]) == 120


def _runner() -> CeleryRunner:
    settings = Settings(broker_url="redis://127.0.0.1:1/0", queue="a3s.labels")
    return CeleryRunner(make_app(settings), dict, settings)


class _Recorder:
    """A branch runner that only records the branch a workflow step becomes."""

    def __init__(self) -> None:
        self.branches: list[tuple[str, int, Branch]] = []

    async def run_branch(self, run_id: str, index: int, branch: Branch) -> ToolResult:
        self.branches.append((run_id, index, branch))
        return ToolResult.success(branch.tool, "ok")


def test_f5_dispatch_labels_branches_and_workflow_steps_alike() -> None:
    runner = _runner()
    run = _Run("run-7", {}, "{}", snapshot_digest("{}"))
    run.task_ids = {0: "t0", 5: "t5"}
    plain = runner._message(run, 0, Branch("read", {"file_path": "a"}, "read a"))
    assert plain["shadow"] == "a3s.tool:read a [run-7:0]"
    recorder = _Recorder()
    asyncio.run(BranchStepRunner(recorder).run_step(StepCall("run-7", "nap1", "nap", {"ms": 1}, "q", 1)))
    [(_, _, step)] = recorder.branches
    msg = runner._message(run, 5, step)
    assert msg["shadow"] == "a3s.tool:step nap1: nap [run-7:nap1]"
    assert json.loads(msg["kwargsrepr"]) == {
        "run_id": "run-7",
        "step_id": "nap1",
        "description": "step nap1: nap",
        "tool": "nap",
        "branch_index": 5,
    }
    runner.app.close()


def test_f5_the_task_sent_event_carries_the_label_not_the_bare_task_name() -> None:
    app = make_app(Settings(broker_url="redis://127.0.0.1:1/0", queue="a3s.labels"))
    label = job_label("run-2", 4, "lint: ruff", tool="bash")
    message = app.amqp.create_task_message(
        "tid", TOOL_TASK, (), {}, create_sent_event=True, shadow=label.name, kwargsrepr=label.kwargsrepr
    )
    assert message.headers["task"] == TOOL_TASK and message.headers["shadow"] == label.name
    assert message.sent_event["name"] == label.name
    app.close()
