"""``a3s-fleet batch`` embedded, over the OpenAI wire format (SPEC A-5, A-1): the whole file is validated
before anything runs, results are appended per job, a rerun runs only the failed ids, and a terminal
shows a live progress bar."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.model_servers import ScriptedOpenAIServer
from tests.task_support import by_prompt, first_user_text

ROOT = Path(__file__).resolve().parents[2]
CLI = str(Path(sys.executable).parent / "a3s-fleet")


def env_for(server: ScriptedOpenAIServer, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("A3S_")}
    env.update(server.env(), PYTHONPATH=str(ROOT), **extra)
    return env


def write_jobs(path: Path, jobs: list[Any]) -> Path:
    path.write_text("".join((j if isinstance(j, str) else json.dumps(j)) + "\n" for j in jobs))
    return path


def on_a_terminal(argv: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Run with stderr on a pseudo-terminal; returns the exit code and what the terminal showed."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=slave)
    os.close(slave)
    shown = b""
    while True:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                chunk = b""
            if not chunk:
                break
            shown += chunk
        elif proc.poll() is not None:
            break
    os.close(master)
    return proc.wait(timeout=60), shown.decode(errors="replace")


def test_a5_a_bad_line_is_one_error_naming_it_and_nothing_runs(tmp_path: Path) -> None:
    with ScriptedOpenAIServer(route=lambda body: {"text": "should never be asked"}) as server:
        jobs = write_jobs(tmp_path / "jobs.jsonl", [{"id": "a", "prompt": "p"}, {"id": "a", "prompt": "q"}])
        out = tmp_path / "results.jsonl"
        argv = [
            CLI,
            "batch",
            str(jobs),
            "--out",
            str(out),
            "--model",
            "openai:m",
            "--workspace",
            str(tmp_path),
        ]
        done = subprocess.run(argv, env=env_for(server), cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert done.returncode == 2
        assert done.stderr.strip() == f"error: invalid_argument: {jobs}:2: duplicate id 'a' (first on line 1)"
        assert not out.exists() and server.requests == []
        no_model = write_jobs(tmp_path / "nomodel.jsonl", [{"id": "x", "prompt": "p"}])
        argv = [CLI, "batch", str(no_model), "--out", str(out), "--workspace", str(tmp_path)]
        done = subprocess.run(argv, env=env_for(server), cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and f"{no_model}:1: job 'x' has no model" in done.stderr
        missing = write_jobs(
            tmp_path / "ws.jsonl", [{"id": "y", "prompt": "p", "workspace": str(tmp_path / "nope")}]
        )
        argv = [CLI, "batch", str(missing), "--out", str(out), "--model", "openai:m"]
        done = subprocess.run(argv, env=env_for(server), cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and "nope" in done.stderr and "Traceback" not in done.stderr
        assert server.requests == []


def test_a5_embedded_batch_shows_a_progress_bar_appends_results_and_reruns_only_failures(
    tmp_path: Path,
) -> None:
    scripts: dict[str, list[dict[str, Any]]] = {
        "JOB 1": [{"text": "first"}],
        "JOB 2": [{"status": 400}],
        "JOB 3": [{"text": '{"n": 3}'}],
    }
    ws = tmp_path / "ws"
    ws.mkdir()
    with ScriptedOpenAIServer(route=by_prompt(scripts)) as server:
        jobs = write_jobs(
            tmp_path / "jobs.jsonl",
            [
                {"id": "one", "prompt": "JOB 1"},
                {"id": "two", "prompt": "JOB 2"},
                {"id": "three", "prompt": "JOB 3", "output_schema": {"type": "object", "required": ["n"]}},
            ],
        )
        out = tmp_path / "results.jsonl"
        argv = [
            CLI,
            "batch",
            str(jobs),
            "--out",
            str(out),
            "--model",
            "openai:m",
            "--workspace",
            str(ws),
            "--concurrency",
            "2",
        ]
        code, shown = on_a_terminal(argv, env_for(server))
        assert code == 1, shown
        assert "3/3 · 1 failed · 0 running" in shown and "jobs/s · ETA" in shown and "[#" in shown
        assert "batch: 2 succeeded, 1 failed, 0 skipped (already succeeded) embedded" in shown
        rows = {r["id"]: r for r in map(json.loads, out.read_text().splitlines())}
        assert rows["one"]["text"] == "first" and rows["one"]["success"]
        assert rows["two"]["error"]["type"] == "provider_error" and not rows["two"]["success"]
        assert rows["three"]["structured"] == {"n": 3}
        assert all(r["session_id"] and r["usage"]["prompt_tokens"] > 0 for r in rows.values() if r["success"])
        before = len(server.requests)
        scripts["JOB 2"] = [{"text": "second, at last"}]
        done = subprocess.run(argv, env=env_for(server), cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert "1 succeeded, 0 failed, 2 skipped" in done.stderr
        assert [first_user_text(r.body) for r in server.requests[before:]] == ["JOB 2"]
        assert json.loads(out.read_text().splitlines()[-1])["text"] == "second, at last"


def test_a5_x2_a_job_that_raises_is_that_jobs_failure_and_the_batch_goes_on(
    tmp_path: Path, monkeypatch: Any, caplog: Any
) -> None:
    """SPEC A-5, K-8, X-2: an untyped exception inside one embedded job (a bug, not a ToolError) used to
    escape the worker thread and abort the whole batch, losing the other jobs' results. It is now that
    job's failed row (internal_error naming the exception type), the traceback goes to the log, and the
    other jobs are recorded."""
    from orchestrator import batch as batch_mod

    real_advance = batch_mod.advance

    def advance(core: Any, plan: Any, *, prompt: str) -> Any:
        if prompt == "BOOM":
            raise KeyError("lost-key")
        return real_advance(core, plan, prompt=prompt)

    monkeypatch.setattr(batch_mod, "advance", advance)
    ws = tmp_path / "ws"
    ws.mkdir()
    with ScriptedOpenAIServer(route=by_prompt({"JOB 1": [{"text": "first"}]})) as server:
        for name, value in server.env().items():
            monkeypatch.setenv(name, value)
        jobs = write_jobs(
            tmp_path / "jobs.jsonl", [{"id": "boom", "prompt": "BOOM"}, {"id": "one", "prompt": "JOB 1"}]
        )
        out = tmp_path / "results.jsonl"
        req = batch_mod.BatchRequest(str(jobs), str(out), model="openai:m", workspace=str(ws), concurrency=2)
        state = batch_mod.run_batch(req)
    assert (state.done, state.failed) == (1, 1)
    rows = {r["id"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert rows["one"]["success"] and rows["one"]["text"] == "first"
    assert not rows["boom"]["success"] and rows["boom"]["error"]["type"] == "internal_error"
    assert "KeyError" in rows["boom"]["text"] and "Traceback" not in rows["boom"]["text"], rows["boom"]
    assert any("batch job boom failed" in r.getMessage() and r.exc_info for r in caplog.records)
