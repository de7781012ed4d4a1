"""The fleet's Celery app (SPEC F-1, F-5; DEPENDENCIES §1): one factory, the settings that make
delivery at-least-once and bounded, JSON only, events on, no ambient app, never eager."""

from __future__ import annotations

import celery
import pytest

from config.settings import Settings
from kernel.errors import InvalidArgument
from workers.app import celery_config, make_app, restore_interval_s
from workers.protocol import TOOL_TASK


@pytest.fixture()
def app() -> celery.Celery:
    a = make_app(Settings(broker_url="redis://127.0.0.1:6379/9", queue="a3s.cfgtest"))
    yield a
    a.close()


def test_f1_app_is_json_only_late_ack_prefetch_one_with_events(app: celery.Celery) -> None:
    conf = app.conf
    assert conf.task_serializer == conf.result_serializer == conf.event_serializer == "json"
    assert list(conf.accept_content) == ["json"] and list(conf.result_accept_content) == ["json"]
    assert conf.task_acks_late and conf.task_reject_on_worker_lost
    assert conf.worker_prefetch_multiplier == 1
    assert conf.worker_send_task_events and conf.task_send_sent_event
    assert conf.task_always_eager is False
    assert conf.result_backend == conf.broker_url == "redis://127.0.0.1:6379/9"


def test_f1_time_limits_sit_below_the_visibility_timeout_and_restore_sweeps_are_frequent(
    app: celery.Celery,
) -> None:
    conf = app.conf
    opts = conf.broker_transport_options
    assert 0 < conf.task_soft_time_limit < conf.task_time_limit < opts["visibility_timeout"]
    assert opts["unacked_restore_throttle"] == 1
    assert 1 <= opts["unacked_restore_interval"] <= 5 < opts["visibility_timeout"]
    assert restore_interval_s(3) == 1 and restore_interval_s(1800) == 5


def test_f1_app_routes_the_named_job_to_the_named_queue(app: celery.Celery) -> None:
    assert TOOL_TASK in app.tasks
    assert app.conf.task_default_queue == "a3s.cfgtest"
    assert [q.name for q in app.conf.task_queues] == ["a3s.cfgtest"]
    assert app.amqp.router.route({}, TOOL_TASK)["queue"].name == "a3s.cfgtest"
    task = app.tasks[TOOL_TASK]
    assert task.acks_late and task.reject_on_worker_lost


def test_f1_factory_builds_independent_apps_and_never_the_current_one(app: celery.Celery) -> None:
    other = make_app(Settings(broker_url="redis://127.0.0.1:6379/8", queue="other"))
    try:
        assert other is not app and other.conf.task_default_queue == "other"
        assert celery.current_app._get_current_object() not in (app, other)
    finally:
        other.close()


@pytest.mark.parametrize(
    ("soft", "hard", "vt"),
    [(60, 60, 120), (30, 120, 120), (30, 200, 120), (0, 10, 20)],
)
def test_f1_time_limits_that_would_let_a_job_outlive_its_visibility_timeout_are_refused(
    soft: int, hard: int, vt: int
) -> None:
    settings = Settings(job_soft_time_limit_s=soft, job_time_limit_s=hard, visibility_timeout_s=vt)
    with pytest.raises(InvalidArgument, match="visibility"):
        celery_config(settings)
