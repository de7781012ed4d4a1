"""Workflows on a fleet: steps as Celery jobs, history in a Redis Stream (SPEC F-1, F-3, F-5, F-7).

``fleet_workflow_services(runner, settings, workspace)`` gives a fleet session the two services the
``dynamic_workflow`` tool looks for (``flows.workflow.tool``):

- ``workflow_step_runner`` — ``BranchStepRunner``: each step is one branch of the session's
  ``CeleryRunner`` under the workflow's run id, i.e. one ``a3s.tool`` job labelled
  ``a3s.tool:step <step_id>: <tool> [<run_id>:<step_id>]`` for Flower (``workers.protocol.job_label``).
  Its branch index is the lowest slot of the run free at that moment: the run has at most
  ``max_concurrent_steps`` (≤ ``MAX_CONCURRENT_STEPS``, the fan-out's ``MAX_BRANCHES``) steps in
  flight, so it stays below that however many steps the session runs. Its idempotency key is
  ``wf:<query digest>/<failures>:<step_id>`` — ``failures``: how many times the history says the
  step failed under this query — stable across driver restarts, so the workers' step store
  (F-3: run id, query, key) recovers a step that completed on a worker while no driver listened (a
  SIGKILLed CLI) instead of running it again, and a worker killed mid-step has its job redelivered
  and run or recovered exactly once in effect; a step that failed gets a new key on resume, so it
  runs again instead of its failure being recovered from the store. The driver itself stays in
  this process and holds no worker slot while steps run;
- ``workflow_logs`` — ``RedisEventLogs``: one Stream per run, ``a3s:workflow:<run_id>``, one
  ``XADD`` per event (field ``envelope``: the JSON envelope; events submitted together go in one
  ``MULTI`` pipeline), expiring ``LOG_TTL_MS`` after its last event; one driver per run at a time through the lease key ``a3s:workflow:<run_id>:lock`` (renewed
  every ``LOCK_RENEW_S`` while the run is driven; a driver that died frees it within
  ``LOCK_LEASE_MS``, and the next driver of that run waits that long for it before giving up).
  A run belongs to the workspace that first drove it (``a3s:workflow:<run_id>:workspace``, expiring
  with the stream): the stream is keyed by run id alone and every session of the fleet shares it, so
  a session on another workspace naming the same run id is refused (``permission_denied``, reason
  ``workflow_run_of_another_workspace``) — it never replays, extends or recovers another
  workspace's steps.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import time
from collections.abc import Awaitable
from typing import Any

import redis.asyncio as aioredis

from config.settings import Settings
from flows.workflow import StepCall, check_run_id
from flows.workflow import log as file_log
from flows.workflow.driver import MAX_CONCURRENT_STEPS
from flows.workflow.events import digest
from flows.workflow.log import GroupCommit
from kernel.errors import BudgetExhausted, PermissionDenied, Transport, VersionConflict
from kernel.result import ToolResult
from orchestrator.fanout import Branch, BranchRunner

KEY_PREFIX = "a3s:workflow"
LOCK_LEASE_MS = 10_000
LOCK_RENEW_S = 3.0
LOCK_POLL_S = 0.25
LOG_TTL_MS = 7 * 24 * 3600_000
CONNECTION_ERRORS = (ConnectionError, OSError, aioredis.ConnectionError, aioredis.TimeoutError)

# Delete the lock only when we still hold it (KEYS: lock; ARGV: token).
RELEASE_LUA = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"
RENEW_LUA = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0"


class BranchStepRunner:
    """A workflow step as one fleet job (see the module docstring).

    The session's budget admits and counts each step where the session lives (K-3), as the kernel
    does for an embedded step: ``runner`` is the session's runner, whose ``BudgetedRunner``
    (``orchestrator.fanout_budget``) holds the step before its job is sent — refused
    ``budget_exhausted`` otherwise — and charges what the worker reports it spent when it returns."""

    def __init__(self, runner: BranchRunner) -> None:
        self.runner = runner
        # Per run: the branch indexes of its steps in flight. A session-wide counter climbed past
        # the envelope's MAX_BRANCH_INDEX (100 000) in a long-lived session, and every step after
        # that was refused.
        self._slots: dict[str, set[int]] = {}

    async def run_step(self, call: StepCall) -> ToolResult:
        branch = Branch(
            call.tool,
            call.args,
            f"step {call.step_id}: {call.tool}",  # Flower: a3s.tool:step <id>: <tool> [<run_id>:<id>]
            key=step_key(call.query, call.step_id, call.failures),
            label=call.step_id,
        )
        busy = self._slots.setdefault(call.run_id, set())
        index = next(i for i in itertools.count() if i not in busy)
        if index >= MAX_CONCURRENT_STEPS:  # the driver's step slots make this unreachable
            raise BudgetExhausted(
                f"workflow run {call.run_id} has {len(busy)} steps in flight, the most a run may have",
                resource="steps",
                reason="max_concurrent_steps",
            )
        busy.add(index)
        try:
            return await self.runner.run_branch(call.run_id, index, branch)
        finally:
            busy.discard(index)
            if not busy:
                self._slots.pop(call.run_id, None)


def step_key(query: str, step_id: str, failures: int = 0) -> str:
    return f"wf:{digest(query)[:16]}/{failures}:{step_id}"


def _client(url: str) -> aioredis.Redis:
    return aioredis.Redis.from_url(url, decode_responses=True, socket_timeout=10, socket_connect_timeout=5)


def _stream(run_id: str) -> str:
    return f"{KEY_PREFIX}:{check_run_id(run_id)}"


class RedisEventLogs:
    """``workspace``: the name of the session's workspace; a run driven through these logs must belong
    to it (None: no owner is checked or recorded — the CLI's read-only ``status``/``history``)."""

    def __init__(self, url: str, workspace: str | None = None) -> None:
        self.url = url
        self.workspace = workspace

    def location(self, run_id: str) -> str:
        return f"redis stream {_stream(run_id)}"

    async def open_for_run(self, run_id: str) -> RedisEventLog:
        client = _client(self.url)
        token = f"{os.uname().nodename}:{os.getpid()}:{time.monotonic_ns()}"
        lock = f"{_stream(run_id)}:lock"
        deadline = time.monotonic() + LOCK_LEASE_MS / 1000 + 1
        try:
            while not await client.set(lock, token, nx=True, px=LOCK_LEASE_MS):
                if time.monotonic() > deadline:
                    raise VersionConflict(
                        f"workflow run {run_id} is being driven by another process", path=run_id
                    )
                await asyncio.sleep(LOCK_POLL_S)
            if self.workspace is not None:
                await self._claim(client, run_id, lock, token)
        except CONNECTION_ERRORS as exc:
            await client.aclose()
            raise Transport(f"workflow log: redis unreachable: {exc}", op="redis") from exc
        except BaseException:
            await client.aclose()
            raise
        return RedisEventLog(client, run_id, lock, token, owner=self.workspace is not None)

    async def _claim(self, client: aioredis.Redis, run_id: str, lock: str, token: str) -> None:
        """Record this workspace as the run's owner, or refuse a run another workspace owns."""
        key = _owner(run_id)
        async with client.pipeline(transaction=True) as pipe:
            pipe.set(key, str(self.workspace), nx=True, px=LOG_TTL_MS)
            pipe.get(key)
            _, owner = await pipe.execute()
        if owner != self.workspace:
            with contextlib.suppress(*CONNECTION_ERRORS):
                await client.eval(RELEASE_LUA, 1, lock, token)
            raise PermissionDenied(
                f"workflow run {run_id} belongs to another workspace; a run id resumes only the run of "
                "its own workspace (choose another run id)",
                reason="workflow_run_of_another_workspace",
                path=run_id,
            )

    async def read(self, run_id: str) -> list[dict[str, Any]]:
        client = _client(self.url)
        try:
            return await _load(client, _stream(run_id))
        except CONNECTION_ERRORS as exc:
            raise Transport(f"workflow log: redis unreachable: {exc}", op="redis") from exc
        finally:
            await client.aclose()

    async def running(self, run_id: str) -> bool:
        client = _client(self.url)
        try:
            return bool(await client.exists(f"{_stream(run_id)}:lock"))
        finally:
            await client.aclose()


class RedisEventLog:
    def __init__(
        self, client: aioredis.Redis, run_id: str, lock: str, token: str, *, owner: bool = False
    ) -> None:
        self.client = client
        self.key = _stream(run_id)
        self.owner = _owner(run_id) if owner else None  # expires with the stream
        self.lock = lock
        self.token = token
        self._renewer = asyncio.ensure_future(self._renew())
        self._commits = GroupCommit(self._write)
        self._size: int | None = None  # bytes of the stream's envelopes (the lock holder is its only writer)

    async def _renew(self) -> None:
        while True:
            await asyncio.sleep(LOCK_RENEW_S)
            with contextlib.suppress(*CONNECTION_ERRORS):
                await self.client.eval(RENEW_LUA, 1, self.lock, self.token, LOCK_LEASE_MS)

    async def load(self) -> list[dict[str, Any]]:
        try:
            envelopes, self._size = await _load_sized(self.client, self.key)
        except CONNECTION_ERRORS as exc:
            raise Transport(f"workflow log: redis unreachable: {exc}", op="redis") from exc
        return envelopes

    def submit(self, envelope: dict[str, Any]) -> Awaitable[None]:
        return self._commits.submit(envelope)

    async def _write(self, envelopes: list[dict[str, Any]]) -> None:
        # The same cap as the file log (MAX_LOG_BYTES): every resume reads the stream whole.
        texts = [_envelope_text(env) for env in envelopes]
        size = sum(len(t.encode()) for t in texts)
        try:
            if self._size is None:
                _, self._size = await _load_sized(self.client, self.key)
            if self._size + size > file_log.MAX_LOG_BYTES:
                raise file_log.history_full(self._size + size)
            async with self.client.pipeline(transaction=True) as pipe:
                for text in texts:
                    pipe.xadd(self.key, {"envelope": text})
                pipe.pexpire(self.key, LOG_TTL_MS)
                if self.owner is not None:
                    pipe.pexpire(self.owner, LOG_TTL_MS)
                await pipe.execute()
        except CONNECTION_ERRORS as exc:
            raise Transport(f"workflow log: cannot append to {self.key}: {exc}", op="redis") from exc
        self._size += size

    async def close(self) -> None:
        await self._commits.drain()
        self._renewer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._renewer
        with contextlib.suppress(*CONNECTION_ERRORS):
            await self.client.eval(RELEASE_LUA, 1, self.lock, self.token)
        await self.client.aclose()


def _owner(run_id: str) -> str:
    return f"{_stream(run_id)}:workspace"


def _envelope_text(env: dict[str, Any]) -> str:
    text = json.dumps(env, separators=(",", ":"), ensure_ascii=False)
    try:
        text.encode()
    except UnicodeEncodeError:
        # A lone surrogate (a step's output naming a file that is not UTF-8): redis-py encodes
        # strictly, so escape it; json.loads reads it back the same.
        return json.dumps(env, separators=(",", ":"))
    return text


async def _load(client: aioredis.Redis, key: str) -> list[dict[str, Any]]:
    return (await _load_sized(client, key))[0]


async def _load_sized(client: aioredis.Redis, key: str) -> tuple[list[dict[str, Any]], int]:
    """The stream's envelopes and their bytes (what counts against ``MAX_LOG_BYTES``)."""
    out: list[dict[str, Any]] = []
    size = 0
    for _id, fields in await client.xrange(key, "-", "+"):
        text = fields.get("envelope", "")
        size += len(text.encode()) if isinstance(text, str) else len(text)
        try:
            item = json.loads(text)
        except ValueError:
            continue
        if isinstance(item, dict):
            out.append(item)
    return out, size


def fleet_workflow_logs(settings: Settings, workspace: str | None = None) -> RedisEventLogs:
    """The fleet's workflow logs: on the fleet's state Redis (``A3S_STATE_URL``, else the broker);
    runs driven through them belong to ``workspace`` (see the module docstring)."""
    from workers.runtime import state_url

    return RedisEventLogs(state_url(settings), workspace)


def fleet_workflow_services(runner: BranchRunner, settings: Settings, workspace: str) -> dict[str, Any]:
    """``runner``: the session's (budgeted) runner; its steps are admitted and counted by it.
    ``workspace``: the session's workspace name, the owner of the runs it drives."""
    return {
        "workflow_step_runner": BranchStepRunner(runner),
        "workflow_logs": fleet_workflow_logs(settings, workspace),
    }
