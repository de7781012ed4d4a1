"""Worker pools the fleet runs with ``--pool threads`` (Celery's thread pool, one difference).

Celery's thread pool raises ``NotImplementedError`` (logged as a pidbox error on every cancelled
branch) when a revoke asks it to terminate a job: a thread cannot be killed. The orchestrator always
revokes with ``terminate=True`` — that is what stops a job in a prefork child — so here terminating
is a no-op and the job stops itself: it polls its branch's cancel flag (``workers.jobs``).
``a3s-fleet worker --pool threads`` selects this class through Celery's documented
``CELERY_CUSTOM_WORKER_POOL`` hook (``--pool custom``).
"""

from __future__ import annotations

from typing import Any

from celery.concurrency.thread import TaskPool


class CooperativeThreadPool(TaskPool):
    def terminate_job(self, pid: Any, signal: Any = None) -> None:
        return None  # cooperative: the job sees its cancel flag within jobs.CANCEL_POLL_S


THREADS_POOL = f"{__name__}:CooperativeThreadPool"
