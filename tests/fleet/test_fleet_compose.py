"""Operations files (issue §6): the compose file cannot run here, so it must at least parse, scale
its workers, and run the very commands the Procfile runs — and those commands must be valid."""

from __future__ import annotations

import importlib
import shlex

import click
import yaml

from orchestrator.cli_fleet import worker_cmd

from .conftest import ROOT


def _procfile() -> dict[str, str]:
    entries = {}
    for line in (ROOT / "Procfile").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, command = line.partition(":")
            entries[name.strip()] = command.strip()
    return entries


def _compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_procfile_and_compose_run_redis_worker_and_flower_with_the_same_commands() -> None:
    procs, services = _procfile(), _compose()["services"]
    assert set(procs) == {"redis", "worker", "flower"} <= set(services)
    assert services["worker"]["command"] == procs["worker"]
    assert (
        services["flower"]["command"].split()[:4] == procs["flower"].split()[:4]
    )  # only the bind address differs
    assert procs["redis"].split()[0] == services["redis"]["command"].split()[0] == "redis-server"
    for name in ("worker", "flower"):
        assert services[name]["environment"]["A3S_BROKER_URL"].startswith("redis://redis:6379/")


def test_compose_workers_can_be_scaled() -> None:
    worker = _compose()["services"]["worker"]
    # `--scale worker=N` fails on fixed container names and published host ports.
    assert "container_name" not in worker and "ports" not in worker


def test_the_worker_and_flower_commands_are_valid() -> None:
    argv = shlex.split(_procfile()["worker"])
    assert argv[:2] == ["a3s-fleet", "worker"]
    ctx = worker_cmd.make_context("worker", argv[2:])  # parses and validates every option
    assert ctx.params["pool"] == "prefork" and ctx.params["concurrency"] == 2
    flower = shlex.split(_procfile()["flower"])
    assert flower[:2] == ["celery", "-A"] and flower[3] == "flower"
    module, _, attr = flower[2].partition(":")
    assert hasattr(importlib.import_module(module), attr)


def test_an_unknown_worker_pool_is_refused_before_celery_starts() -> None:
    try:
        worker_cmd.make_context("worker", ["--pool", "gevent"])
    except click.BadParameter as exc:
        assert "gevent" in str(exc)
    else:
        raise AssertionError("--pool gevent was accepted")
