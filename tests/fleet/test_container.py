"""A usable container (issue 13 item 11; SPEC F-1, F-5, F-6): ``.dockerignore``, ``Dockerfile``,
``docker-compose.yml`` (+ the sandbox overlay) and the example plan the image runs.

No Docker daemon runs here, so the image is never built: the first tests check the files statically
(parsed, not grepped where a parser exists). The ``fleet`` tests then run, for real, everything the
compose file relies on that does not need Docker: the worker's healthcheck command against a live
worker (and against a missing one), Flower started as compose starts it — its API behind the basic
auth compose requires, its healthcheck open — and the example plan on real workers.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from flows.plan_files import load_plan
from tests.redis_server import free_port

from .conftest import BIN, ROOT, FleetEnv, WorkerFactory, WorkerProcess

PLAN = ROOT / "examples" / "container-verify.toml"
FLOWER_READY_S = 60.0
SERVICES = ("redis", "worker", "flower")


def _compose(name: str = "docker-compose.yml") -> dict[str, Any]:
    return yaml.safe_load((ROOT / name).read_text())


def _dockerfile() -> list[str]:
    """Dockerfile instructions, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", (ROOT / "Dockerfile").read_text())
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def _instruction(name: str) -> list[str]:
    return [line[len(name) :].strip() for line in _dockerfile() if line.upper().startswith(name + " ")]


# ---- static: the files ------------------------------------------------------------------------


def test_dockerignore_keeps_venv_git_state_and_secrets_out_of_the_build_context() -> None:
    entries = {
        line.strip().rstrip("/")
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert {".venv", ".git", ".a3s", ".env"} <= entries
    assert not {"examples", "pyproject.toml", "README.md"} & entries  # the build and the plan need them


def test_dockerfile_installs_the_tools_programs_runs_unprivileged_and_starts_a_worker() -> None:
    (install,) = [r for r in _instruction("RUN") if "apt-get install" in r]
    packages = set(shlex.split(install.split("apt-get install", 1)[1].split("&&")[0]))
    assert {"git", "ripgrep", "bubblewrap"} <= packages  # bubblewrap: model-side bash fails closed without it
    assert any('pip install --no-cache-dir ".[fleet]"' in r for r in _instruction("RUN"))
    assert _instruction("COPY") == [". /app"]  # the example plan ships at /app/examples
    assert _instruction("USER") == ["a3s"]
    (cmd,) = _instruction("CMD")
    procfile_worker = next(
        line.partition(":")[2].strip()
        for line in (ROOT / "Procfile").read_text().splitlines()
        if line.startswith("worker:")
    )
    assert json.loads(cmd) == shlex.split(procfile_worker)  # exec form: signals reach the worker


def test_compose_services_have_healthchecks_and_start_in_dependency_order() -> None:
    services = _compose()["services"]
    for name in (*SERVICES, "verify"):
        if name != "verify":
            test = services[name]["healthcheck"]["test"]
            assert test[0] in ("CMD", "CMD-SHELL") and len(test) >= 2, name
    assert services["redis"]["healthcheck"]["test"] == ["CMD", "redis-cli", "ping"]
    assert services["worker"]["depends_on"] == {"redis": {"condition": "service_healthy"}}
    assert services["flower"]["depends_on"]["redis"] == {"condition": "service_healthy"}
    assert services["flower"]["depends_on"]["worker"] == {"condition": "service_started"}
    assert services["verify"]["depends_on"]["worker"] == {"condition": "service_healthy"}
    for name in ("worker", "flower", "verify"):
        assert services[name]["image"] == "a3s-fleet:local" and services[name]["build"]["context"] == "."


def test_compose_flower_needs_a_login_and_everything_published_stays_on_loopback() -> None:
    compose = _compose()
    services = compose["services"]
    auth = services["flower"]["environment"]["FLOWER_BASIC_AUTH"]
    assert auth.startswith("${FLOWER_BASIC_AUTH:?")  # compose refuses to start without a login
    for name in ("redis", "flower"):
        for port in services[name]["ports"]:
            assert port.startswith("127.0.0.1:"), (name, port)
    assert "ports" not in services["worker"]  # `--scale worker=N` needs no fixed host port
    assert compose["networks"]["fleet"]["name"] == "a3s-fleet"  # joinable from outside the project
    for name in (*SERVICES, "verify"):
        assert services[name]["networks"] == ["fleet"], name


def test_compose_mounts_the_workspace_at_the_same_path_for_workers_and_clients() -> None:
    services = _compose()["services"]
    mount = "${A3S_WORKSPACE:-.}:${A3S_WORKSPACE:-/workspace}"
    assert services["worker"]["volumes"] == services["verify"]["volumes"] == [mount]
    argv = shlex.split(services["verify"]["command"])
    assert argv[:2] == ["a3s-fleet", "verify"]
    assert (
        argv[argv.index("--workspace") + 1]
        == services["verify"]["working_dir"]
        == "${A3S_WORKSPACE:-/workspace}"
    )
    assert argv[2] == "/app/examples/container-verify.toml"
    assert (ROOT / argv[2].removeprefix("/app/")).resolve() == PLAN.resolve()


def test_the_example_plan_parses_and_uses_only_programs_the_image_has() -> None:
    plan = load_plan(PLAN)
    assert plan.title and len(plan.commands) >= 4
    assert [c.id for c in plan.commands if not c.required] == ["sandbox"]
    image_programs = {"git", "rg", "bwrap", "a3s-fleet", "python", "env", "head", "grep", "echo", "true"}
    for command in plan.commands:
        for segment in re.split(r"&&|\|\||\|", command.command):
            words = shlex.split(segment)
            if words[0] == "env":
                words = words[3:] if words[1] == "-u" else words[1:]
            assert words[0] in image_programs, (command.id, words[0])


def test_the_sandbox_overlay_only_lifts_the_worker_s_outer_profiles() -> None:
    overlay = _compose("docker-compose.sandbox.yml")
    assert set(overlay["services"]) == {"worker"}
    assert overlay["services"]["worker"] == {"security_opt": ["seccomp=unconfined", "apparmor=unconfined"]}


# ---- real: what compose runs, without Docker -------------------------------------------------


@pytest.fixture(scope="module")
def path_worker(fleet: FleetEnv, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerProcess]:
    """One worker whose commands find the venv's programs on PATH, as the image's do."""
    env = fleet.with_overrides(PATH=os.pathsep.join([str(BIN), os.environ.get("PATH", "")]))
    factory = WorkerFactory(tmp_path_factory.mktemp("container-worker-logs"))
    try:
        yield factory(env, "container", pool="threads", concurrency=4)
    finally:
        factory.stop_all()


def _shell(command: str, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {**env, "PATH": os.pathsep.join([str(BIN), env.get("PATH", "")])}
    return subprocess.run(
        ["sh", "-c", command], env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.fleet
def test_the_worker_healthcheck_passes_for_a_live_worker_and_fails_without_one(
    fleet: FleetEnv, path_worker: WorkerProcess
) -> None:
    test = _compose()["services"]["worker"]["healthcheck"]["test"]
    assert test[0] == "CMD-SHELL" and "celery@$$HOSTNAME" in test[1]
    # $$ is compose's escape for $: the container's shell expands $HOSTNAME (the node is celery@<it>).
    live = _shell(test[1].replace("celery@$$HOSTNAME", path_worker.name), fleet.env)
    assert live.returncode == 0, live.stdout + live.stderr
    assert path_worker.name in live.stdout and "pong" in live.stdout
    gone = _shell(test[1].replace("$$HOSTNAME", "no-such-worker").replace("10", "1"), fleet.env)
    assert gone.returncode != 0


@pytest.mark.fleet
def test_flower_as_compose_runs_it_serves_its_api_only_behind_basic_auth(
    fleet: FleetEnv, path_worker: WorkerProcess, tmp_path: Path
) -> None:
    """F-5 in the container setup: the login compose passes (FLOWER_BASIC_AUTH) guards the API."""
    flower_svc = _compose()["services"]["flower"]
    port = free_port()
    argv = shlex.split(flower_svc["command"].replace("--address=0.0.0.0", "--address=127.0.0.1"))
    argv = [a.replace("5555", str(port)) for a in argv]
    assert argv[:3] == ["celery", "-A", "workers.app:app"]
    env = {k: v for k, v in fleet.env.items() if not k.startswith("FLOWER_")}
    env["FLOWER_BASIC_AUTH"] = "admin:s3cret-pw"
    log = tmp_path / "flower.log"
    with open(log, "wb") as out:
        flower = subprocess.Popen(
            [sys.executable, "-m", *argv], env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5, trust_env=False) as client:
            deadline = time.monotonic() + FLOWER_READY_S
            while True:
                try:
                    resp = client.get("/api/workers", auth=("admin", "s3cret-pw"))
                except httpx.TransportError:
                    resp = None
                if resp is not None and resp.status_code == 200 and path_worker.name in resp.json():
                    break
                assert flower.poll() is None, log.read_text()
                assert time.monotonic() < deadline, (
                    f"flower not ready: {resp and resp.text}\n{log.read_text()[-2000:]}"
                )
                time.sleep(0.2)
            assert client.get("/api/workers").status_code == 401
            assert client.get("/api/workers", auth=("admin", "wrong")).status_code == 401
            assert client.get("/api/tasks", auth=("admin", "s3cret-pw")).status_code == 200
            health = flower_svc["healthcheck"]["test"]
            assert health[0] == "CMD"
            assert health[1] == "python"
            probe = subprocess.run(
                [sys.executable, *(a.replace("5555", str(port)) for a in health[2:])],
                capture_output=True, text=True, timeout=30,
            )  # fmt: skip
            assert probe.returncode == 0, probe.stderr
    finally:
        flower.terminate()
        try:
            flower.wait(timeout=10)
        except subprocess.TimeoutExpired:
            flower.kill()
            flower.wait(timeout=5)


@pytest.mark.fleet
def test_the_example_plan_runs_on_real_workers(
    fleet: FleetEnv, path_worker: WorkerProcess, tmp_path: Path
) -> None:
    """F-6 through the fleet: the compose `verify` client's command, with the test broker."""
    (tmp_path / "hello.txt").write_text("hi\n")
    report = tmp_path / "report.json"
    proc = subprocess.run(
        [str(BIN / "a3s-fleet"), "verify", str(PLAN), "--workspace", str(tmp_path), "--broker", fleet.url,
         "--json", str(report)],
        env=fleet.env, cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(report.read_text())
    assert data["verdict"] == "passed"
    by_id = {c["id"]: c for c in data["commands"]}
    assert all(c["status"] == "passed" for c in data["commands"] if c["required"])
    assert "hello.txt" in by_id["read"]["output"]
    assert f"fleet {fleet.url}" in proc.stdout.splitlines()[0]  # sent to the workers, not run embedded
