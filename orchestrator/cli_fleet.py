"""Fleet operations on the ``a3s-fleet`` command line: ``worker`` and ``status`` (SPEC F-1, F-5).

    a3s-fleet worker [--broker URL] [--concurrency N] [--pool prefork|threads|solo] [--queues Q,...]
                     [--hostname NAME] [--loglevel LEVEL] [--mcp-config FILE]
    a3s-fleet status [--broker URL] [--json] [--timeout S]

``worker`` replaces this process with ``celery -A workers.app:app worker`` (so signals, ``kill`` and
process supervisors see Celery itself), consuming the fleet's named queue with task events on.
``--broker`` sets ``A3S_BROKER_URL`` for it; every other ``A3S_*`` variable is passed through.
Mingle and gossip are off: revocations also travel as Redis cancel flags, and a large fleet's
workers need not all subscribe to each other's events.

``status`` prints the workers that answer (with their active jobs), the length of each queue
(plus messages delivered but not yet acknowledged), and the runs orchestrators are waiting on.

The broker is ``--broker``, else ``A3S_BROKER_URL`` — the same rule as ``verify`` and the SDK: with
neither, a3s-fleet runs embedded, so ``status`` says so (exit 0) and ``worker``/``events``, which
need a fleet, fail with one line. Every command names the broker it uses (credentials masked); a
malformed URL or an unreachable broker is one ``error:`` line and exit 2, never a traceback.

``register(main)`` adds these commands (and ``verify`` from ``orchestrator.cli_verify`` when that
module exists) to the ``a3s-fleet`` group.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from functools import wraps
from typing import Any, TypeVar

import click

from config.settings import Settings
from orchestrator.cli_mcp import check_mcp_config, mcp_config_option

POOLS = ("prefork", "threads", "solo")
DEFAULT_CONCURRENCY = 2
STATUS_TIMEOUT_S = 1.0
PRIORITY_SEPARATOR = "\x06\x16"  # kombu's redis transport keeps priority levels in sibling lists
PRIORITY_STEPS = (3, 6, 9)
STALE_RUN_MS = 15_000  # an orchestrator refreshes its runs every few seconds (dispatch.HEARTBEAT_S)
WORKER_CONNECT_S = 10.0  # a worker waits this long for its broker before it gives up (one line)
BROKER_PING_TIMEOUT_S = 2.0
NO_BROKER = "pass --broker redis://HOST:PORT/DB or set A3S_BROKER_URL"

F = TypeVar("F", bound=Callable[..., Any])


def _one_line_errors(fn: F) -> F:
    """``orchestrator.cli``'s guard (imported when called: that module imports this one)."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from orchestrator.cli import _one_line_errors as guard

        return guard(fn)(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def _fail(message: str, code: int = 2) -> Any:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def fleet_settings(broker: str | None, *, needed_by: str | None = None) -> Settings | None:
    """The settings of the fleet ``--broker``/``A3S_BROKER_URL`` names (URL checked), or ``None``
    when neither is set (embedded) — then a command ``needed_by`` a fleet fails in one line."""
    from workers.app import check_broker_url

    settings = Settings(**({"broker_url": broker} if broker else {}))
    if not settings.broker_url:
        if needed_by:
            _fail(
                f"no broker: {needed_by} needs a fleet and a3s-fleet runs embedded without one; {NO_BROKER}"
            )
        return None
    check_broker_url(settings.broker_url)
    return settings


def broker_label(settings: Settings) -> str:
    from workers.app import broker_url, redact_url

    return redact_url(broker_url(settings))


def ping_broker(settings: Settings, wait_s: float = 0.0) -> None:
    """Raise ``transport{op: "broker"}`` naming the broker when it does not answer within ``wait_s``."""
    import redis

    from kernel.errors import Transport
    from workers.app import broker_url

    client = redis.Redis.from_url(
        broker_url(settings),
        socket_timeout=BROKER_PING_TIMEOUT_S,
        socket_connect_timeout=BROKER_PING_TIMEOUT_S,
    )
    deadline = time.monotonic() + wait_s
    try:
        while True:
            try:
                client.ping()
                return
            except redis.RedisError as exc:
                if time.monotonic() >= deadline:
                    raise Transport(
                        f"broker {broker_label(settings)} unreachable: {exc}", op="broker"
                    ) from None
                time.sleep(0.25)
    finally:
        client.close()


def worker_argv(
    *,
    concurrency: int,
    pool: str,
    queues: str,
    hostname: str | None,
    loglevel: str,
    extra: Sequence[str] = (),
) -> list[str]:
    argv = [
        sys.executable, "-m", "celery", "-A", "workers.app:app", "worker",
        "--pool", pool, "--concurrency", str(concurrency), "--queues", queues,
        "--task-events", "--without-mingle", "--without-gossip", "--loglevel", loglevel,
    ]  # fmt: skip
    if hostname:
        argv += ["--hostname", hostname]
    return argv + list(extra)  # any other `celery worker` option, passed on as given


@click.command(
    "worker",
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": True},
    epilog="Any other option is passed on to `celery worker` (e.g. --max-tasks-per-child 100, --autoscale 8,2).",
)
@click.option("--broker", default=None, help="Redis URL of the broker (default: A3S_BROKER_URL).")
@click.option(
    "--concurrency", "-c", type=click.IntRange(1, 256), default=DEFAULT_CONCURRENCY, show_default=True
)
@click.option("--pool", "-P", type=click.Choice(POOLS), default="prefork", show_default=True)
@click.option("--queues", "-Q", default=None, help="Comma-separated queues (default: A3S_QUEUE).")
@click.option("--hostname", "-n", default=None, help="Worker node name (default: celery@<host>).")
@click.option("--loglevel", "-l", default="INFO", show_default=True)
@mcp_config_option
@click.argument("celery_args", nargs=-1, type=click.UNPROCESSED)
@_one_line_errors
def worker_cmd(
    broker: str | None,
    concurrency: int,
    pool: str,
    queues: str | None,
    hostname: str | None,
    loglevel: str,
    mcp_config: str | None,
    celery_args: tuple[str, ...],
) -> None:
    """Run a fleet worker: `celery worker` with the fleet's app, queue and settings."""
    settings = fleet_settings(broker, needed_by="a worker")
    assert settings is not None
    env = dict(os.environ)
    if broker:
        env["A3S_BROKER_URL"] = broker
    if mcp_config:  # the servers this worker may start; checked now, read by each worker process
        check_mcp_config(mcp_config)
        env["A3S_MCP_CONFIG"] = os.path.abspath(mcp_config)
    from workers.app import check_time_limits

    check_time_limits(settings)  # fail here, in one line, rather than in Celery's traceback
    # Celery would retry an unreachable broker forever, logging a traceback each time: give it a
    # few seconds here (a broker starting beside us), then say so in one line.
    ping_broker(settings, WORKER_CONNECT_S)
    click.echo(
        f"a3s-fleet worker: broker {broker_label(settings)}, queues {queues or settings.queue}", err=True
    )
    if pool == "threads":  # threads that ignore terminate requests instead of logging errors
        from workers.pools import THREADS_POOL

        env["CELERY_CUSTOM_WORKER_POOL"] = THREADS_POOL
        pool = "custom"
    argv = worker_argv(
        concurrency=concurrency,
        pool=pool,
        queues=queues or settings.queue,
        hostname=hostname,
        loglevel=loglevel,
        extra=celery_args,
    )
    sys.stdout.flush()
    os.execve(argv[0], argv, env)


def _queue_lengths(client: Any, queues: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for q in queues:
        names = [q, *(f"{q}{PRIORITY_SEPARATOR}{p}" for p in PRIORITY_STEPS)]
        out[q] = sum(int(client.llen(n)) for n in names)
    return out


def collect_status(settings: Settings, timeout_s: float = STATUS_TIMEOUT_S) -> dict[str, Any]:
    """Workers (with their active jobs), queue lengths, unacknowledged messages, live runs."""
    from workers.app import broker_url, make_app
    from workers.protocol import FleetKeys
    from workers.runtime import state_url
    from workers.state import make_client

    broker = make_client(broker_url(settings))
    state = make_client(state_url(settings))
    keys = FleetKeys()
    try:
        queues = _queue_lengths(broker, [settings.queue])
        unacked = int(broker.hlen("unacked"))
        runs = []
        for run_id, beat in state.zrange(keys.runs(), 0, -1, withscores=True):
            fields = ["session_id", "done", "total", "started_ms", "host"]
            values = state.hmget(keys.run(run_id), fields)
            if not any(values):
                continue
            meta = {k: v for k, v in zip(fields, values, strict=True) if v is not None}
            runs.append(
                {
                    "run_id": run_id,
                    "session_id": meta.get("session_id", ""),
                    "done": int(meta.get("done", 0)),
                    "total": int(meta.get("total", 0)),
                    "started_ms": int(meta.get("started_ms", 0)),
                    "last_seen_ms": int(beat),
                    "host": meta.get("host", ""),
                    "stale": int(time.time() * 1000) - int(beat) > STALE_RUN_MS,
                }
            )
    finally:
        broker.close()
        state.close()
    # Workers last: a broadcast ping waits its whole timeout, and runs move on meanwhile.
    app = make_app(settings)
    try:
        # Every live worker answers `active` (an empty list when idle): one broadcast, not two.
        active = app.control.inspect(timeout=timeout_s).active() or {}
    finally:
        app.close()
    workers = [
        {
            "name": name,
            "active": [
                {
                    "id": job.get("id"),
                    "name": job.get("name"),
                    "kwargs": job.get("kwargs"),
                    "worker_pid": job.get("worker_pid"),
                }
                for job in active.get(name, [])
            ],
        }
        for name in sorted(active)
    ]
    return {
        "broker": broker_label(settings),
        "mode": "fleet",
        "workers": workers,
        "queues": queues,
        "unacked": unacked,
        "runs": runs,
    }


@click.command("status")
@click.option("--broker", default=None, help="Redis URL of the broker (default: A3S_BROKER_URL).")
@click.option("--json", "as_json", is_flag=True, help="Print the status as one JSON object.")
@click.option(
    "--timeout", type=float, default=STATUS_TIMEOUT_S, show_default=True, help="Seconds to wait for workers."
)
@_one_line_errors
def status_cmd(broker: str | None, as_json: bool, timeout: float) -> None:
    """Show the fleet: workers, queue lengths, running runs."""
    settings = fleet_settings(broker)
    if settings is None:  # the same default as verify and the SDK: embedded
        if as_json:
            empty = {
                "broker": None,
                "mode": "embedded",
                "workers": [],
                "queues": {},
                "unacked": 0,
                "runs": [],
            }
            click.echo(json.dumps(empty))
        else:
            click.echo(
                f"broker   none: embedded (calls run in the calling process); {NO_BROKER} to see a fleet"
            )
        return
    ping_broker(settings)
    status = collect_status(settings, timeout)
    if as_json:
        click.echo(json.dumps(status))
        return
    click.echo(f"broker   {status['broker']}")
    click.echo(f"workers  {len(status['workers'])}")
    for w in status["workers"]:
        click.echo(f"  {w['name']}  active={len(w['active'])}")
        for job in w["active"]:
            click.echo(f"    {job['name']}  {job['kwargs']}")
    for q, n in status["queues"].items():
        click.echo(f"queue    {q}  ready={n}")
    click.echo(f"unacked  {status['unacked']}")
    now = int(time.time() * 1000)
    click.echo(f"runs     {len(status['runs'])}")
    for run in status["runs"]:
        age = (now - run["started_ms"]) / 1000
        stale = "  (stale: its orchestrator stopped reporting)" if run["stale"] else ""
        click.echo(
            f"  {run['run_id']}  {run['done']}/{run['total']} done  {age:.1f}s  from {run['host']}{stale}"
        )


@click.command("events")
@click.argument("session_id")
@click.option("--broker", default=None, help="Redis URL of the broker (default: A3S_BROKER_URL).")
@click.option("--after", "after_id", default="0-0", show_default=True, help="Resume after this stream id.")
@click.option("--follow", is_flag=True, help="Keep waiting for new events (Ctrl-C to stop).")
@click.option("--idle-timeout", type=float, default=None, help="With --follow: stop after S quiet seconds.")
@_one_line_errors
def events_cmd(
    session_id: str, broker: str | None, after_id: str, follow: bool, idle_timeout: float | None
) -> None:
    """Print a fleet session's events as JSON lines (stream id + event), in order, from any process."""
    from orchestrator.event_stream import follow as follow_stream
    from orchestrator.event_stream import session_has_events
    from workers.runtime import state_url

    settings = fleet_settings(broker, needed_by="events")
    assert settings is not None
    url = state_url(settings)
    where = broker_label(settings)
    ping_broker(settings)
    if not session_has_events(url, session_id):
        if not follow:
            _fail(
                f"no events for session {session_id!r} on {where} (unknown session id, or its events expired)",
                1,
            )
        click.echo(f"events: session {session_id!r} has no events on {where} yet; waiting", err=True)
    for stream_id, event in follow_stream(
        url, session_id, after_id=after_id, live=follow, idle_timeout_s=idle_timeout
    ):
        click.echo(json.dumps({"id": stream_id, **event.to_json()}))


def register(main: click.Group) -> None:
    from orchestrator import cli_verify

    main.add_command(worker_cmd)
    main.add_command(status_cmd)
    main.add_command(events_cmd)
    cli_verify.register(main)
