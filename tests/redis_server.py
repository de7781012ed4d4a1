"""A private ``redis-server`` for the tests: started on a free loopback port, in a temp directory, no
persistence — so no test ever reads, writes or flushes a Redis that someone else may use.

``A3S_TEST_REDIS_URL`` points the tests at a server of the user's choosing instead; it is used only
when its database is empty (a non-empty one is refused, never flushed).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import redis

START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 10.0
ENV_URL = "A3S_TEST_REDIS_URL"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """One ``redis-server`` process bound to 127.0.0.1 on ``port``; ``url(db)`` names a database."""

    def __init__(self, port: int, workdir: Path) -> None:
        self.port = port
        self.workdir = workdir
        self.proc: subprocess.Popen[bytes] | None = None

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def start(self) -> RedisServer:
        args = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
        args += ["--appendonly", "no", "--dir", str(self.workdir), "--databases", "16"]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis(port=self.port)
        deadline = time.monotonic() + START_TIMEOUT_S
        try:
            while True:
                try:
                    client.ping()
                    return self
                except redis.ConnectionError:
                    if self.proc.poll() is not None or time.monotonic() > deadline:
                        raise
                    time.sleep(0.02)
        finally:
            client.close()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)


def redis_server_available() -> bool:
    return shutil.which("redis-server") is not None


def check_given_url(url: str) -> str | None:
    """Why ``url`` may not be used by the tests (unreachable or not empty), or None when it may."""
    client = redis.Redis.from_url(url)
    try:
        size = client.dbsize()
    except redis.RedisError as exc:
        return f"{ENV_URL}={url} is not reachable: {exc}"
    finally:
        with contextlib.suppress(Exception):
            client.close()
    if size:
        return f"{ENV_URL}={url} holds {size} keys; the tests only use an empty database and never flush one"
    return None


def given_url() -> str | None:
    return os.environ.get(ENV_URL) or None
