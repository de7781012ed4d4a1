"""Sub-agents and batch agent jobs on real workers over a real Redis, models over the OpenAI wire
format (a scripted loopback server the workers reach with their own environment) (SPEC A-4, A-5,
X-3, F-1, F-3, F-5, A-1).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kernel.options import SessionOptions
from kernel.policy import PermissionPolicy
from orchestrator.batch import BatchRequest, run_batch
from tests.model_servers import ScriptedOpenAIServer
from tests.task_support import by_prompt, first_user_text, item, task_call, tool_messages

from .conftest import BIN, ROOT, FleetEnv, WorkerFactory

pytestmark = pytest.mark.fleet

MODEL = "openai:fleet-test"


class Model:
    def __init__(self) -> None:
        self.scripts: dict[str, list[dict[str, Any]]] = {}
        self.server = ScriptedOpenAIServer(route=by_prompt(self.scripts))

    def env(self, fleet: FleetEnv, **extra: str) -> FleetEnv:
        return fleet.with_overrides(**{**self.server.env(), **extra})

    def bodies(self, key: str) -> list[dict[str, Any]]:
        return [r.body for r in self.server.requests if key in first_user_text(r.body)]


@pytest.fixture()
def model() -> Iterator[Model]:
    m = Model()
    with m.server:
        yield m


@pytest.fixture()
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a.txt").write_text("alpha\n")
    return root


def write_jobs(path: Path, jobs: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(j) + "\n" for j in jobs))
    return path


def results(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def fan_out_script(model: Model, job: str, n: int = 3) -> None:
    model.scripts[f"JOB {job}"] = [
        task_call(*(item(f"{job}-child-{i}") for i in range(n))),
        {"text": f"{job} summary"},
    ]
    for i in range(n):
        model.scripts[f"{job}-child-{i}"] = [
            {"tool_calls": [{"id": f"r{i}", "name": "read", "arguments": {"file_path": "a.txt"}}]},
            {"text": f"{job} child {i} found alpha"},
        ]


def test_a4_a_batch_of_two_jobs_each_fanning_out_three_children_completes_on_one_worker_with_one_slot(
    fleet: FleetEnv, spawn_worker: WorkerFactory, model: Model, ws: Path, tmp_path: Path
) -> None:
    """A-4, F-1: every job and every child is a Celery job; a parent waiting for its children is
    suspended (its slot freed) and resumed by a continuation job, so ONE worker with
    ``--concurrency 1`` finishes runs whose children fan out."""
    env = model.env(fleet)
    spawn_worker(env, "solo", pool="prefork", concurrency=1)
    for job in ("alpha", "beta"):
        fan_out_script(model, job)
    jobs = write_jobs(
        tmp_path / "jobs.jsonl",
        [{"id": "alpha", "prompt": "JOB alpha: fan out"}, {"id": "beta", "prompt": "JOB beta: fan out"}],
    )
    out = tmp_path / "results.jsonl"
    req = BatchRequest(
        str(jobs), str(out), model=MODEL, workspace=str(ws), allow=("*",), settings=env.settings()
    )
    state = run_batch(req)
    assert (state.done, state.failed) == (2, 0)
    rows = {r["id"]: r for r in results(out)}
    assert rows["alpha"]["success"] and rows["alpha"]["text"] == "alpha summary"
    assert rows["beta"]["text"] == "beta summary"
    for job in ("alpha", "beta"):
        [message] = tool_messages(model.bodies(f"JOB {job}")[-1])
        for i in range(3):
            assert f"{job} child {i} found alpha" in message
        assert message.count("sources: a.txt") == 3
    assert set(rows["alpha"]) == {"id", "success", "text", "usage", "duration_ms", "session_id"}
    assert rows["alpha"]["usage"]["prompt_tokens"] > 0


def test_a5_batch_cli_rerun_runs_only_the_failed_ids(
    fleet: FleetEnv, spawn_worker: WorkerFactory, model: Model, ws: Path, tmp_path: Path
) -> None:
    """A-5: results are appended per job; exit 1 when a job failed; a rerun skips every id whose
    latest result succeeded and runs the rest."""
    env = model.env(fleet)
    spawn_worker(env, "batch", pool="threads", concurrency=2)
    model.scripts["JOB one"] = [{"text": "one ok"}]
    model.scripts["JOB two"] = [{"status": 400}]
    model.scripts["JOB three"] = [{"text": "three ok"}]
    jobs = write_jobs(
        tmp_path / "jobs.jsonl",
        [{"id": n, "prompt": f"JOB {n}"} for n in ("one", "two", "three")],
    )
    out = tmp_path / "results.jsonl"
    argv = [
        str(BIN / "a3s-fleet"),
        "batch",
        str(jobs),
        "--out",
        str(out),
        "--model",
        MODEL,
        "--workspace",
        str(ws),
    ]
    first = subprocess.run(argv, env=env.env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert first.returncode == 1, first.stderr
    assert "2 succeeded, 1 failed, 0 skipped" in first.stderr
    assert {r["id"]: r["success"] for r in results(out)} == {"one": True, "two": False, "three": True}
    seen_before = len(model.server.requests)
    model.scripts["JOB two"] = [{"text": "two ok now"}]
    second = subprocess.run(argv, env=env.env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert second.returncode == 0, second.stderr
    assert "1 succeeded, 0 failed, 2 skipped" in second.stderr
    rerun = [first_user_text(r.body) for r in model.server.requests[seen_before:]]
    assert rerun == ["JOB two"]
    assert [r["id"] for r in results(out)][-1] == "two" and results(out)[-1]["text"] == "two ok now"


def test_a1_no_api_key_appears_anywhere_in_redis(
    fleet: FleetEnv, spawn_worker: WorkerFactory, model: Model, ws: Path, tmp_path: Path
) -> None:
    """A-1: jobs, snapshots, suspensions, results and events name the model, never an endpoint key:
    every key of the database is scanned (strings, hashes, lists, streams, sets)."""
    import redis

    secret = "sk-live-SECRET-4242-never-in-redis"
    env = model.env(fleet, OPENAI_API_KEY=secret)
    spawn_worker(env, "keys", pool="prefork", concurrency=1)
    fan_out_script(model, "gamma", 2)
    jobs = write_jobs(tmp_path / "jobs.jsonl", [{"id": "g", "prompt": "JOB gamma: fan out"}])
    out = tmp_path / "results.jsonl"
    settings = env.settings()
    state = run_batch(
        BatchRequest(str(jobs), str(out), model=MODEL, workspace=str(ws), allow=("*",), settings=settings)
    )
    assert state.done == 1
    assert all(r.headers.get("authorization") == f"Bearer {secret}" for r in model.server.requests)
    client = redis.Redis.from_url(fleet.url)
    found = []
    for key in client.scan_iter(count=1000):
        kind = client.type(key).decode()
        if kind == "string":
            values = [client.get(key) or b""]
        elif kind == "hash":
            values = list(client.hgetall(key).values()) + list(client.hkeys(key))
        elif kind == "list":
            values = client.lrange(key, 0, -1)
        elif kind == "stream":
            values = [v for _id, fields in client.xrange(key) for v in fields.values()]
        elif kind in ("set", "zset"):
            values = list(client.smembers(key) if kind == "set" else client.zrange(key, 0, -1))
        else:
            values = []
        if any(secret.encode() in v for v in values if isinstance(v, bytes)) or secret.encode() in key:
            found.append(key)
    assert found == []


def batch_of(
    model: Model, env: FleetEnv, ws: Path, tmp_path: Path, jobs: list[dict[str, Any]]
) -> dict[str, Any]:
    path = write_jobs(tmp_path / "jobs.jsonl", jobs)
    out = tmp_path / "results.jsonl"
    run_batch(
        BatchRequest(
            str(path), str(out), model=MODEL, workspace=str(ws), allow=("*",), settings=env.settings()
        )
    )
    return {r["id"]: r for r in results(out)}


def test_x3_a_32_child_fan_out_on_the_fleet_returns_every_bounded_output(
    fleet: FleetEnv, spawn_worker: WorkerFactory, model: Model, ws: Path, tmp_path: Path
) -> None:
    """X-3, F-1: a batch job's model fans out the 32-item maximum; each child is a job; the parent's
    continuation hands the model every child's output, a long one cut to 3000 head + 800 tail."""
    env = model.env(fleet)
    spawn_worker(env, "wide", pool="threads", concurrency=4)
    long = "H" * 3000 + "m" * 9000 + "T" * 800
    model.scripts["JOB wide"] = [task_call(*(item(f"w-{i:02d}") for i in range(32))), {"text": "wide done"}]
    for i in range(32):
        model.scripts[f"w-{i:02d}"] = [{"text": long if i == 5 else f"child {i:02d} ok"}]
    rows = batch_of(model, env, ws, tmp_path, [{"id": "wide", "prompt": "JOB wide"}])
    assert rows["wide"]["success"] and rows["wide"]["text"] == "wide done"
    [message] = tool_messages(model.bodies("JOB wide")[-1])
    for i in range(32):
        assert f"[task {i}: explore — do w-{i:02d}] succeeded" in message
    assert "[9000 characters of the child's output omitted]" in message
    assert "m" * 100 not in message


def test_x3_partial_failure_and_min_success_count_on_the_fleet(
    fleet: FleetEnv, spawn_worker: WorkerFactory, model: Model, ws: Path, tmp_path: Path
) -> None:
    """X-3, K-8 on a suspended parent: without allow_partial_failure the first failure settles the
    fan-in (partial_failure{failed, total}); with min_success_count the fan-in settles once enough
    children succeeded and the slow ones are cancelled."""
    env = model.env(fleet)
    spawn_worker(env, "partial", pool="threads", concurrency=4)
    model.scripts["JOB strict"] = [
        task_call(item("s-ok-1"), item("s-bad"), item("s-ok-2")),
        {"text": "strict seen"},
    ]
    model.scripts["JOB lenient"] = [
        task_call(
            item("l-ok-1"),
            item("l-slow"),
            item("l-bad"),
            item("l-ok-2"),
            allow_partial_failure=True,
            min_success_count=2,
        ),
        {"text": "lenient seen"},
    ]
    for key in ("s-ok-1", "s-ok-2", "l-ok-1", "l-ok-2"):
        model.scripts[key] = [{"text": f"{key} fine"}]
    model.scripts["s-bad"] = model.scripts["l-bad"] = [{"status": 400}]
    model.scripts["l-slow"] = [{"delay_s": 8.0, "text": "too slow"}]
    rows = batch_of(
        model,
        env,
        ws,
        tmp_path,
        [{"id": "strict", "prompt": "JOB strict"}, {"id": "lenient", "prompt": "JOB lenient"}],
    )
    assert rows["strict"]["success"] and rows["lenient"]["success"]
    [strict] = tool_messages(model.bodies("JOB strict")[-1])
    assert strict.startswith("Error (partial_failure):") and "[task 1: explore — do s-bad] failed" in strict
    [lenient] = tool_messages(model.bodies("JOB lenient")[-1])
    assert "2 of 4 task(s) succeeded; failed indexes [1, 2]" in lenient
    assert "[task 1: explore — do l-slow] cancelled" in lenient


def test_x3_an_sdk_session_on_the_fleet_sends_its_children_as_jobs(
    fleet: FleetEnv, spawn_worker: WorkerFactory, model: Model, ws: Path
) -> None:
    """F-1, A-4: ``session.tasks`` with a broker: each child is an ``a3s.agent`` job on a worker (with
    the worker's endpoint); the parent waits in the orchestrator, holding no worker slot; schema rules
    are checked before any job is sent."""
    from orchestrator import Agent

    env = model.env(fleet)
    worker = spawn_worker(env, "sdk", pool="prefork", concurrency=1)
    for i in range(3):
        model.scripts[f"sdk-{i}"] = [
            {"tool_calls": [{"id": f"r{i}", "name": "read", "arguments": {"file_path": "a.txt"}}]},
            {"text": f"sdk child {i}"},
        ]
    settings = env.settings()
    with Agent(settings, model=MODEL) as agent:
        session = agent.session(str(ws), SessionOptions(permission_policy=PermissionPolicy(allow=["*"])))
        result = session.tasks([item(f"sdk-{i}") for i in range(3)])
        bad = session.tasks([item("a", background=True), item("b")])
        events = [(e.type, e.data.get("task_id")) for e in session.events() if e.type.startswith("subagent")]
    assert result.exit_code == 0, result.output
    tasks = result.metadata["tasks"]
    assert [t["output"] for t in tasks] == [f"sdk child {i}" for i in range(3)]
    assert all(t["source_anchors"] == ["a.txt"] for t in tasks)
    assert len(events) == 6
    assert bad.error_kind["type"] == "invalid_argument"
    assert worker.name  # the children ran on it: the model server was called by the worker only
    assert len(model.server.requests) == 6


def test_x3_a_child_killed_with_its_worker_completes_once(
    fleet: FleetEnv, spawn_worker: WorkerFactory, model: Model, ws: Path, tmp_path: Path
) -> None:
    """F-3, X-3: SIGKILL the worker (main process and pool) while a child waits for its model; the
    child's job is delivered again to another worker, runs again, and the parent receives its result
    exactly once.

    The slow child's first model request is held until the victim is dead (a barrier, not a guessed
    delay, so a loaded machine cannot let it answer before the kill); its rerun is answered at once.
    """
    import threading
    import time

    env = model.env(
        fleet,
        A3S_VISIBILITY_TIMEOUT_S="6",
        A3S_JOB_TIME_LIMIT_S="5",
        A3S_JOB_SOFT_TIME_LIMIT_S="4",
    )
    victim = spawn_worker(env, "victim", pool="prefork", concurrency=2)
    killed = threading.Event()
    model.scripts["JOB kill"] = [task_call(item("k-fast"), item("k-slow")), {"text": "kill survived"}]
    model.scripts["k-fast"] = [{"text": "fast child"}]
    model.scripts["k-slow"] = [{"hold": killed, "text": "slow child"}]
    path = write_jobs(tmp_path / "jobs.jsonl", [{"id": "kill", "prompt": "JOB kill"}])
    out = tmp_path / "results.jsonl"

    def kill_when_slow_child_asks() -> None:
        deadline = time.monotonic() + 60
        try:
            while time.monotonic() < deadline:
                if model.bodies("k-slow"):
                    victim.kill()
                    killed.set()
                    spawn_worker(env, "rescuer", pool="prefork", concurrency=2)
                    return
                time.sleep(0.02)
        finally:
            killed.set()  # never leave a request held (the assertions below then say what failed)

    killer = threading.Thread(target=kill_when_slow_child_asks)
    killer.start()
    run_batch(
        BatchRequest(
            str(path), str(out), model=MODEL, workspace=str(ws), allow=("*",), settings=env.settings()
        )
    )
    killer.join()
    [row] = results(out)
    assert row["success"] and row["text"] == "kill survived"
    assert len(model.bodies("k-slow")) >= 2  # the child ran again after the kill
    [message] = tool_messages(model.bodies("JOB kill")[-1])
    assert message.count("slow child") == 1 and message.count("fast child") == 1


def test_f1_worker_takes_concurrency_and_passes_other_celery_options_on(
    fleet: FleetEnv, tmp_path: Path
) -> None:
    """``a3s-fleet worker --concurrency N`` and any other ``celery worker`` option, passed on as given."""
    import os
    import signal
    import socket
    import time

    from workers.app import make_app

    name = f"opts-{os.getpid()}@{socket.gethostname()}"
    log = tmp_path / "worker.log"
    argv = [
        str(BIN / "a3s-fleet"),
        "worker",
        "--concurrency",
        "1",
        "--pool",
        "prefork",
        "--hostname",
        name,
        "--max-tasks-per-child",
        "7",
        "--prefetch-multiplier",
        "1",
    ]
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            argv, env=fleet.env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    app = make_app(fleet.settings())
    try:
        deadline = time.monotonic() + 90
        while f"{name} ready." not in log.read_text(errors="replace"):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.1)
        stats = app.control.inspect(destination=[name], timeout=5).stats() or {}
        pool = stats[name]["pool"]
        assert pool["max-concurrency"] == 1 and pool["max-tasks-per-child"] == 7
    finally:
        app.close()
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)


def test_x3_background_children_on_the_fleet_deliver_their_result_later(
    fleet: FleetEnv, spawn_worker: WorkerFactory, model: Model, ws: Path, tmp_path: Path
) -> None:
    """X-3: ``background: true`` returns a handle at once — from an SDK session (the result through
    ``session.task_result``) and from a batch job on a worker (the result stored for the SDK and sent as
    ``subagent_end`` to the parent's session stream, after the parent already finished)."""
    import re
    import time

    import redis

    from orchestrator import Agent
    from workers.agent_protocol import task_result_key

    env = model.env(fleet)
    spawn_worker(env, "bg", pool="threads", concurrency=2)
    model.scripts["sdk-bg"] = [{"delay_s": 0.5, "text": "sdk background answer"}]
    with Agent(env.settings(), model=MODEL) as agent:
        session = agent.session(str(ws), SessionOptions(permission_policy=PermissionPolicy(allow=["*"])))
        started = session.task(item("sdk-bg"), background=True)
        handle = started.metadata["background_task"]
        result = session.task_result(handle["task_id"], timeout=60)
    assert result["output"] == "sdk background answer" and result["success"]

    model.scripts["JOB bg"] = [task_call(item("job-bg", background=True)), {"text": "parent finished first"}]
    model.scripts["job-bg"] = [{"delay_s": 1.0, "text": "job background answer"}]
    rows = batch_of(model, env, ws, tmp_path, [{"id": "bg", "prompt": "JOB bg"}])
    assert rows["bg"]["success"] and rows["bg"]["text"] == "parent finished first"
    [handle_text] = tool_messages(model.bodies("JOB bg")[-1])
    task_id = re.search(r"Started background task (\S+)", handle_text).group(1)  # type: ignore[union-attr]
    client = redis.Redis.from_url(fleet.url, decode_responses=True)
    deadline = time.monotonic() + 60
    while (raw := client.get(task_result_key(task_id))) is None:
        assert time.monotonic() < deadline, "the background child never reported"
        time.sleep(0.1)
    stored = json.loads(raw)
    assert stored["output"] == "job background answer" and stored["success"]
    stream = f"a3s:events:{rows['bg']['session_id']}"
    ends = [
        json.loads(fields["event"])
        for _id, fields in client.xrange(stream)
        if json.loads(fields.get("event", "{}")).get("type") == "subagent_end"
    ]
    assert len(ends) == 1 and ends[0]["data"]["background"] and ends[0]["data"]["task_id"] == task_id


def test_k3_x3_fleet_children_spend_is_charged_to_the_parents_budget(
    fleet: FleetEnv, spawn_worker: WorkerFactory, model: Model, ws: Path
) -> None:
    """K-3/X-3 on the fleet: children that ran as jobs report what they spent, and the parent's
    budget is charged with it, so a second ``task`` call on a spent budget starts nothing."""
    from kernel import Budget
    from orchestrator import Agent

    env = model.env(fleet)
    spawn_worker(env, "budget", pool="prefork", concurrency=1)
    reads = [{"id": f"r{i}", "name": "read", "arguments": {"file_path": "a.txt"}} for i in range(5)]
    for key in ("fleet spender one", "fleet spender two"):
        model.scripts[key] = [{"tool_calls": reads}, {"text": f"{key} done"}]
    options = SessionOptions(permission_policy=PermissionPolicy(allow=["*"]), budget=Budget(max_tool_calls=6))
    with Agent(env.settings(), model=MODEL) as agent:
        session = agent.session(str(ws), options)
        first = session.tasks([item("fleet spender one")])
        second = session.tasks([item("fleet spender two")])
    assert first.exit_code == 0, first.output
    assert first.metadata["tasks"][0]["usage"]["tool_calls"] == 5
    assert all("alpha" in m for m in tool_messages(model.bodies("fleet spender one")[-1]))
    assert second.exit_code == 1 and second.error_kind["type"] == "budget_exhausted", second.output
    assert model.bodies("fleet spender two") == []


def test_k3_x3_a4_two_task_calls_of_a_suspended_run_divide_the_budget_not_double_it(
    fleet: FleetEnv, spawn_worker: WorkerFactory, model: Model, ws: Path
) -> None:
    """K-3/X-3/A-4: a run that is a job asks for two ``task`` calls in one turn; both suspend it, so
    neither was charged before the other planned its child — each child got the whole remainder
    and together they read 17 times on a 10-call budget. The first call now reserves what is left:
    the second is refused ``budget_exhausted``, the resumed run is charged exactly what the child
    read, and nothing exceeds the budget."""
    from kernel import Budget
    from orchestrator import Agent
    from orchestrator.dispatch_agent import AgentJobRunner

    env = model.env(fleet)
    spawn_worker(env, "reserve", pool="prefork", concurrency=1)
    model.scripts["JOB reserve"] = [
        {
            "tool_calls": [
                {"id": f"t{k}", "name": "task", "arguments": {"tasks": [item(f"fleet greedy {k}")]}}
                for k in (1, 2)
            ]
        },
        {"text": "reserve done"},
    ]
    reads = [{"id": f"r{i}", "name": "read", "arguments": {"file_path": "a.txt"}} for i in range(9)]
    for k in (1, 2):
        model.scripts[f"fleet greedy {k}"] = [{"tool_calls": reads}, {"text": f"greedy {k} done"}]
    options = SessionOptions(
        permission_policy=PermissionPolicy(allow=["*"]), budget=Budget(max_tool_calls=10)
    )
    with Agent(env.settings(), model=MODEL) as agent:
        session = agent.session(str(ws), options)
        snapshot = session.snapshot()
        agent.release(session)
        runner = AgentJobRunner(agent.fleet_app(), lambda: snapshot, env.settings(), session_id="reserve")
        body = {
            "kind": "run",
            "snapshot": snapshot,
            "run": {"prompt": "JOB reserve: two calls", "model": MODEL},
            "label": {"agent": "general"},
        }

        async def main() -> Any:
            from flows.fanout import Branch

            try:
                return await runner.run_branch("reserve-run", 0, Branch("agent", body, "job reserve"))
            finally:
                await runner.aclose()

        result = agent.loop.run(main())
    assert result.exit_code == 0, result.output
    assert result.output == "reserve done"

    def reads_done(key: str) -> int:
        bodies = model.bodies(key)
        return sum("alpha" in m for m in tool_messages(bodies[-1])) if bodies else 0

    children = reads_done("fleet greedy 1") + reads_done("fleet greedy 2")
    assert children + 1 <= 10, children  # the first call is the parent's own
    assert reads_done("fleet greedy 1") == 9 and model.bodies("fleet greedy 2") == []
    messages = tool_messages(model.bodies("JOB reserve")[-1])
    assert len(messages) == 2 and any("greedy 1 done" in m for m in messages), messages
    assert any("Error (budget_exhausted)" in m and "held by running task calls" in m for m in messages)
    usage = result.metadata["agent_run"]["usage"]
    assert usage.get("tool_calls") == 10, usage  # its own call + the 9 reads: charged once
