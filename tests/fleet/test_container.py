"""A usable container (issue 13 item 11; SPEC F-1, F-5, F-6): ``.dockerignore``, ``Dockerfile``,
``docker-compose.yml`` (+ the sandbox overlay) and the example plan the image runs.

Building and running the image takes minutes, so it is a manual check, ``scripts/container-check``
(Docker or Podman; docs/fleet.md "Containers" has what it ran and the figures). Here the first tests check the
files statically (parsed, not grepped where a parser exists). The ``fleet`` tests then run, for real,
everything the compose file relies on that does not need a container: the worker's healthcheck
command against a live worker (and against a missing one), Flower started as compose starts it — its
API behind the basic auth compose requires, its healthcheck open — and the example plan on real workers.
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


def _health(service: str) -> str:
    """A service's healthcheck as the container's shell runs it (CMD-SHELL; compose's $$ is $)."""
    test = _compose()["services"][service]["healthcheck"]["test"]
    assert test[0] == "CMD-SHELL" and len(test) == 2, test  # podman-compose 1.0.3 garbles the CMD form
    return str(test[1]).replace("$$", "$")


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
    (install,) = [r for r in _instruction("RUN") if "apt-get install" in r and "ripgrep" in r]
    packages = set(shlex.split(install.split("apt-get install", 1)[1].split("&&")[0]))
    assert {"git", "ripgrep", "bubblewrap"} <= packages  # bubblewrap: model-side bash fails closed without it
    runs = _instruction("RUN")
    # The package goes into a venv that leads PATH: Debian's own python3 refuses pip (PEP 668),
    # and the healthchecks and the example plan call `python`, `celery`, `a3s-fleet` by name.
    venv = runs.index("python3 -m venv /opt/a3s")
    (build,) = [i for i, r in enumerate(runs) if 'pip install --no-cache-dir ".[fleet]"' in r]
    assert build > venv
    # The projection's and the git diff's C extensions are compiled there, required, and the
    # compiler is removed in the same layer (docs/fleet.md).
    assert "apt-get install" in runs[build] and "gcc" in runs[build]
    assert "import kernel.projection._scan, kernel._throttle" in runs[build]
    assert "apt-get purge" in runs[build]
    (env,) = _instruction("ENV")
    assert "VIRTUAL_ENV=/opt/a3s" in env.split() and "PATH=/opt/a3s/bin:$PATH" in env.split()
    # A3S_UID=0 (`$(id -u)` as root) would make useradd fail obscurely or the worker root: refused.
    (useradd,) = [r for r in runs if "useradd" in r]
    assert '"${A3S_UID}" = 0' in useradd and "exit 1" in useradd
    assert _instruction("COPY") == [". /app"]  # the example plan ships at /app/examples
    assert _instruction("USER") == ["a3s"]
    (cmd,) = _instruction("CMD")
    procfile_worker = next(
        line.partition(":")[2].strip()
        for line in (ROOT / "Procfile").read_text().splitlines()
        if line.startswith("worker:")
    )
    assert json.loads(cmd) == shlex.split(procfile_worker)  # exec form: signals reach the worker


def test_the_base_image_is_an_argument_defaulting_to_python_slim() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert "ARG BASE_IMAGE=python:3.11-slim" in _dockerfile()
    assert _dockerfile().index("ARG BASE_IMAGE=python:3.11-slim") < _dockerfile().index("FROM ${BASE_IMAGE}")
    assert text.count("\nFROM ") == 1  # one stage: scripts/container-check builds the very same file
    args = _compose()["x-a3s-image"]["build"]["args"]
    assert args["BASE_IMAGE"] == "${BASE_IMAGE:-python:3.11-slim}"  # compose passes the same default


def test_compose_services_have_healthchecks_and_start_in_dependency_order() -> None:
    services = _compose()["services"]
    for name in SERVICES:
        assert _health(name), name
    assert _health("redis") == "redis-cli ping"
    # $(hostname), not $HOSTNAME: Podman with host networking leaves HOSTNAME unset (measured).
    assert "--destination celery@$(hostname)" in _health("worker") and "HOSTNAME" not in _health("worker")
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
    assert services["flower"]["ports"] == ["127.0.0.1:${A3S_FLOWER_PORT:-5555}:5555"]
    # Workers reach Redis from other containers without a password: protected mode would refuse
    # them with Debian's redis-server (the official image builds with it off).
    redis = shlex.split(services["redis"]["command"])
    assert redis[redis.index("--protected-mode") + 1] == "no"
    assert redis[redis.index("--bind") + 1] == "0.0.0.0"
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
    """Each option is needed (scripts/container-check: bwrap fails closed without either of the first
    and third under Podman); none adds a capability."""
    overlay = _compose("docker-compose.sandbox.yml")
    assert set(overlay["services"]) == {"worker"}
    assert overlay["services"]["worker"] == {
        "security_opt": ["seccomp=unconfined", "apparmor=unconfined", "systempaths=unconfined"]
    }


def test_the_container_check_is_a_manual_bash_script_that_parses() -> None:
    """scripts/container-check builds and runs the image (minutes): kept out of scripts/test."""
    script = ROOT / "scripts" / "container-check"
    assert os.access(script, os.X_OK)
    parsed = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, timeout=30)
    assert parsed.returncode == 0, parsed.stderr
    assert "container-check" not in (ROOT / "scripts" / "test").read_text()


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
    test = _health("worker")
    # In a container the node is celery@<its hostname>; here the test worker has its own name.
    live = _shell(test.replace("celery@$(hostname)", path_worker.name), fleet.env)
    assert live.returncode == 0, live.stdout + live.stderr
    assert path_worker.name in live.stdout and "pong" in live.stdout
    gone = _shell(test.replace("$(hostname)", "no-such-worker").replace("10", "1"), fleet.env)
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
            probe = _shell(_health("flower").replace("5555", str(port)), env, timeout=30)
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
