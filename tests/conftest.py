"""Shared fixtures: an embedded ``Agent`` per test module, a small workspace tree, a private Redis, and
a real llama.cpp server (``llama_server``, see ``tests/llama_server.py``).

``redis_urls`` starts one ``redis-server`` on a free loopback port for the whole test session (see
``tests/redis_server.py``): no test touches a Redis it did not start, unless ``A3S_TEST_REDIS_URL``
names an *empty* database to use instead.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from orchestrator import Agent
from tests.llama_server import LlamaServer
from tests.llama_server import missing as llama_missing
from tests.redis_server import RedisServer, check_given_url, free_port, given_url, redis_server_available


@pytest.fixture(scope="session", autouse=True)
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """MiniLM's ONNX graph (~90 MB, written on first use) goes to the test session's own directory,
    not the user's cache: a run leaves nothing behind (subprocesses inherit the variable)."""
    name = "A3S_MODEL_CACHE"  # tools.search.retrieval.minilm_onnx.CACHE_ENV (not imported here: light)
    path = tmp_path_factory.mktemp("models")
    old = os.environ.get(name)
    os.environ[name] = str(path)
    try:
        yield path
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


@pytest.fixture(scope="module")
def agent() -> Iterator[Agent]:
    a = Agent()
    yield a
    a.close()


@pytest.fixture()
def workspace(tmp_path: Path) -> Path:
    """A small tree: a few text files, a nested directory."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "app.py").write_text("import os\n\ndef main():\n    return os.getcwd()\n")
    (tmp_path / "README.md").write_text("# demo\n\nhello world\n")
    (tmp_path / "notes.txt").write_text("".join(f"line {i}\n" for i in range(1, 301)))
    return tmp_path


@pytest.fixture(scope="session")
def redis_urls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[int], str]]:
    """``redis_urls(db)``: a URL of the test session's own Redis (or of the one the user gave)."""
    url = given_url()
    if url is not None:
        problem = check_given_url(url)
        if problem:
            pytest.fail(problem, pytrace=False)
        yield lambda _db: url
        return
    if not redis_server_available():
        pytest.skip("these tests need redis-server (apt-get install redis-server)")
    server = RedisServer(free_port(), tmp_path_factory.mktemp("redis")).start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    """A real OpenAI-compatible server (llama.cpp + SmolLM2-135M) on a free loopback port, for the whole
    test session; killed at the end. Missing packages fail the test: scripts/setup installs them."""
    problem = llama_missing()
    if problem:
        pytest.fail(problem, pytrace=False)
    log = tmp_path_factory.mktemp("llama") / "server.log"
    server = LlamaServer(free_port(), log).start()
    try:
        yield server
    finally:
        server.stop()
