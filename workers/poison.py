"""The poison-job guard (DEPENDENCIES §1): a job that keeps killing its worker stops being requeued.

With ``task_reject_on_worker_lost`` a job whose worker dies is delivered again — forever, if the job
itself is what kills the worker (a native crash, an OOM). Every delivery of a job increments a Redis
counter keyed by its task id *before* the job runs; a delivery beyond ``max_deliveries`` does not run
the tool again and returns a typed failure instead (``cancelled{op: "a3s.tool", reason:
"poison_job", deliveries, max_deliveries}``), which is then acknowledged like any result.

The same round trip reads the branch's cancel flag, so a cancelled branch never starts.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis

from kernel.errors import Cancelled
from workers.protocol import TOOL_TASK, FleetKeys
from workers.state.redis_client import redis_errors

DELIVERIES_TTL_S = 7 * 24 * 3600  # longer than any job can be redelivered


@dataclass(frozen=True, slots=True)
class DeliveryCheck:
    deliveries: int
    cancelled: bool


def check_delivery(client: redis.Redis, keys: FleetKeys, task_id: str) -> DeliveryCheck:
    """Count this delivery and read the cancel flag, in one round trip."""
    counter = keys.deliveries(task_id)
    with redis_errors("fleet.delivery"):
        pipe = client.pipeline(transaction=False)
        pipe.incr(counter)
        pipe.expire(counter, DELIVERIES_TTL_S)
        pipe.exists(keys.cancel(task_id))
        deliveries, _, cancelled = pipe.execute()
    return DeliveryCheck(int(deliveries), bool(cancelled))


def is_poison(check: DeliveryCheck, max_deliveries: int) -> bool:
    return check.deliveries > max_deliveries


def poison_error(task_id: str, deliveries: int, max_deliveries: int) -> Cancelled:
    return Cancelled(
        f"job {task_id} was stopped after {deliveries - 1} deliveries that never finished "
        f"(max_deliveries={max_deliveries}): it looks like a poison job that kills its worker",
        op=TOOL_TASK,
        reason="poison_job",
        deliveries=deliveries - 1,
        max_deliveries=max_deliveries,
    )
