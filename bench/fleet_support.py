"""What the fleet benchmark's workers load: the no-op *tool* (through ``A3S_EXTRA_TOOLS``) and the bare
Celery baseline app (``celery -A bench.fleet_support:app``) with the fleet's own Celery settings and a
no-op *task* — so the only difference measured is what a3s adds around a job."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from kernel.capabilities import ToolCapabilities
from kernel.context import ToolContext
from kernel.spec import ToolSpec

BARE_TASK = "bench.noop"


class NoopParams(BaseModel):
    model_config = ConfigDict(extra="forbid")


async def _noop(ctx: ToolContext, params: NoopParams) -> str:
    return "ok"


TOOLS = [
    ToolSpec(
        name="noop",
        description="Does nothing (benchmark).",
        params=NoopParams,
        run=_noop,
        capabilities=lambda _p: ToolCapabilities.parallel_safe_read(32),
    )
]


def make_bare_app() -> Any:
    from celery import Celery

    from config.settings import Settings
    from workers.app import celery_config

    app = Celery("bench-bare", set_as_current=False)
    app.conf.update(celery_config(Settings()))

    @app.task(name=BARE_TASK, shared=False)
    def noop() -> None:
        return None

    return app


_APP: Any = None


def __getattr__(name: str) -> Any:
    global _APP
    if name != "app":
        raise AttributeError(name)
    if _APP is None:
        _APP = make_bare_app()
    return _APP
