"""The one Celery app of the fleet, built by a factory from ``Settings`` (SPEC F-1, F-5; DEPENDENCIES §1).

``make_app(settings)`` returns a fresh app with the fleet's jobs registered on it explicitly — no
``shared_task``, no ``current_app`` (the app is never made the process default), never
``task_always_eager``. ``celery -A workers.app:app …`` (what ``a3s-fleet worker`` and Flower run)
gets ``app``: built on first access from the environment (``A3S_*``), so importing this module has no
side effect.

Invariants of ``celery_config`` (each one is there because of a measured failure mode):

- JSON only, for tasks, results and events: a message can never make a worker unpickle code.
- ``task_acks_late`` + ``task_reject_on_worker_lost``: a job is acknowledged after it ran, and a job
  whose worker died is delivered again (at-least-once; jobs are idempotent, see ``workers.jobs``).
- ``worker_prefetch_multiplier=1``: a worker reserves one job per slot, so a dead worker strands
  at most its own slots' jobs and a long job never sits behind another in one worker's buffer.
- soft time limit < hard time limit < visibility timeout: Redis hands an unacknowledged message to a
  second worker once the visibility timeout passes, *even if the first still runs it*; so every job
  must end (or be killed) before that.
- ``unacked_restore_interval`` / ``unacked_restore_throttle``: with kombu 5.7's defaults a message of a
  worker that died whole comes back only after ~100 s *plus* the visibility timeout; sweeping every
  ``restore_interval_s(vt)`` seconds (throttle 1) bounds that to about the visibility timeout.
- task events on (``worker_send_task_events``, ``task_send_sent_event``): Flower's ``/api/tasks``.
- one named queue (``settings.queue``) that ``a3s.*`` jobs are routed to.
- every worker of this app beats its presence into Redis and hands a lost worker's unacknowledged
  jobs back to the queue after ``worker_lost_after_s``, not after the visibility timeout
  (``workers.presence``).
"""

from __future__ import annotations

from typing import Any

from celery import Celery
from celery.app.amqp import AMQP
from kombu import Queue

from config.settings import Settings
from kernel.errors import InvalidArgument
from workers.presence import presence_step

DEFAULT_BROKER_URL = "redis://127.0.0.1:6379/0"
RESULT_EXPIRES_S = 3600
BROKER_SOCKET_TIMEOUT_S = 10  # a broker that vanished without a FIN costs seconds, not forever
BROKER_CONNECT_TIMEOUT_S = 5
MIN_RESTORE_INTERVAL_S = 1
MAX_RESTORE_INTERVAL_S = 5  # DEPENDENCIES §1: 5 s sweeps worked; more often only costs SCANs
WORKER_LOST_WAIT_S = 1.0
BROKER_SCHEMES = ("redis", "rediss", "unix")
PUBLISH_RETRY_POLICY = {"max_retries": 3, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.5}


def restore_interval_s(visibility_timeout_s: int) -> int:
    """Sweep a few times per visibility timeout, between 1 s and 5 s."""
    return max(MIN_RESTORE_INTERVAL_S, min(MAX_RESTORE_INTERVAL_S, visibility_timeout_s // 3))


def check_time_limits(settings: Settings) -> None:
    soft, hard, vt = settings.job_soft_time_limit_s, settings.job_time_limit_s, settings.visibility_timeout_s
    if not 0 < soft < hard < vt:
        raise InvalidArgument(
            "fleet time limits must satisfy 0 < job_soft_time_limit_s < job_time_limit_s < visibility_timeout_s "
            f"(got soft={soft}, hard={hard}, visibility={vt}): a job still running when the visibility "
            "timeout passes is handed to a second worker"
        )


def broker_url(settings: Settings) -> str:
    return settings.broker_url or DEFAULT_BROKER_URL


def check_broker_url(url: str) -> str:
    """``url`` if it names a Redis broker the fleet can use, else ``InvalidArgument`` in one line."""
    from urllib.parse import urlsplit

    import redis

    parts = urlsplit(url)
    if parts.scheme not in BROKER_SCHEMES:
        raise InvalidArgument(
            f"broker URL {redact_url(url)!r} must start with redis://, rediss:// or unix:// "
            "(e.g. redis://127.0.0.1:6379/0)",
            path="broker_url",
        )
    try:
        _ = parts.port  # an out-of-range or non-numeric port
        redis.ConnectionPool.from_url(url)  # parses only: no connection
    except ValueError as exc:
        raise InvalidArgument(f"malformed broker URL {redact_url(url)!r}: {exc}", path="broker_url") from None
    return url


def redact_url(url: str) -> str:
    """A broker URL fit for messages and logs: the credentials are masked."""
    if "@" not in url:
        return url
    scheme, _, rest = url.partition("://")
    return f"{scheme}://***@{rest.rsplit('@', 1)[1]}"


def celery_config(settings: Settings) -> dict[str, Any]:
    """The Celery settings of the fleet (also used by the benchmark's bare-Celery baseline)."""
    check_time_limits(settings)
    url = broker_url(settings)
    vt = settings.visibility_timeout_s
    return {
        "broker_url": url,
        "result_backend": settings.result_backend or url,
        "task_serializer": "json",
        "result_serializer": "json",
        "event_serializer": "json",
        "accept_content": ["json"],
        "result_accept_content": ["json"],
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "broker_transport_options": {
            "visibility_timeout": vt,
            "unacked_restore_interval": restore_interval_s(vt),
            "unacked_restore_throttle": 1,
            "socket_timeout": BROKER_SOCKET_TIMEOUT_S,
            "socket_connect_timeout": BROKER_CONNECT_TIMEOUT_S,
        },
        "result_backend_transport_options": {"visibility_timeout": vt},
        "task_time_limit": settings.job_time_limit_s,
        "task_soft_time_limit": settings.job_soft_time_limit_s,
        "worker_send_task_events": True,
        "task_send_sent_event": True,
        "task_default_queue": settings.queue,
        "task_queues": [Queue(settings.queue)],
        "task_routes": {"a3s.*": {"queue": settings.queue}},
        "task_publish_retry_policy": PUBLISH_RETRY_POLICY,
        "result_expires": RESULT_EXPIRES_S,
        "broker_connection_retry_on_startup": True,
        # A job whose message cannot be acked after a broker reconnect is delivered again anyway:
        # stop it rather than run it twice at once (Celery's recommended setting since 5.1).
        "worker_cancel_long_running_tasks_on_connection_loss": True,
        "worker_disable_rate_limits": True,
        # How long a prefork parent waits for a dead child's result before WorkerLostError (and the
        # redelivery). A lost result is harmless here — the redelivery recovers it from the step
        # store — so wait 1 s rather than Celery's 10 s.
        "worker_lost_wait": WORKER_LOST_WAIT_S,
        "task_always_eager": False,
    }


class FleetAMQP(AMQP):
    """Celery's message builder, but the ``task-sent`` event names the job by its label.

    Celery puts the task's own name (``a3s.tool``) in the client's ``task-sent`` event and the
    ``shadow`` name only in the worker's events; Flower keeps whichever it merged last, so a job
    could show as a bare ``a3s.tool`` while queued (or after a late ``task-sent``). With the label in
    both, every event of a job names it the same way (``workers.protocol.job_label``, SPEC F-5).
    """

    def as_task_v2(self, task_id: str, name: str, *args: Any, **kwargs: Any) -> Any:
        message = super().as_task_v2(task_id, name, *args, **kwargs)
        shadow = message.headers.get("shadow")
        if shadow and message.sent_event is not None:
            message.sent_event["name"] = shadow
        return message


def make_app(settings: Settings | None = None) -> Celery:
    """A new fleet app with ``a3s.tool`` registered; never the process-wide current app."""
    from workers import agent_jobs, jobs  # the session core and the tools: only when an app is built

    settings = settings or Settings()
    app = Celery("a3s", set_as_current=False, amqp=FleetAMQP)
    app.conf.update(celery_config(settings))
    jobs.register(app, settings)
    # Presence: dispatchers see which queues have live workers; a lost worker's jobs come back at once.
    app.steps["consumer"].add(presence_step(settings))
    agent_jobs.register(app, settings)  # a3s.agent: agent runs, task children, continuations
    return app


_APP: Celery | None = None


def __getattr__(name: str) -> Any:
    """``workers.app.app``: the app of this process's environment, built on first access."""
    global _APP
    if name != "app":
        raise AttributeError(name)
    if _APP is None:
        _APP = make_app(Settings())
    return _APP
