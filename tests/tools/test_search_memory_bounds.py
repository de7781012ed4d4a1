"""A search cannot take the host's memory through an oversized ignore file (SPEC K-8, Q-1).

Found by the issue-15 attack run: a sandboxed ``truncate -s 3G sub/.gitignore`` costs no disk, but
ripgrep parses every ignore file it passes whole — about 40 times its size in memory — and the next
``search`` grew rg to 24 GiB until the kernel's OOM killer stepped in (it could as well have killed
the worker or Redis). ripgrep now runs with a data-segment limit and says so when it hits it; the
Python engine reads at most the 1 MiB of an ignore file it uses.
"""

from __future__ import annotations

import os
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from kernel import PermissionPolicy, SessionOptions
from orchestrator import Agent
from tools.search.grep import rg_binary

POLICY = PermissionPolicy(allow=["search"])


def _workspace(root: Path, ignore_bytes: int) -> Path:
    (root / "src").mkdir(parents=True)
    (root / "src" / "a.py").write_text("needle = 1\n")
    (root / "sub").mkdir()
    with open(root / "sub" / ".gitignore", "wb") as fh:
        fh.truncate(ignore_bytes)  # sparse: no disk, all NULs
    return root


@pytest.mark.skipif(rg_binary() is None, reason="ripgrep is not installed")
@pytest.mark.parametrize("mode", ["grep", "glob"])
def test_k8_ripgrep_has_a_memory_limit(tmp_path: Path, mode: str) -> None:
    # 50 MiB of ignore file: ~2 GiB of rg without the limit (survivable if the limit regresses).
    root = _workspace(tmp_path / "ws", 50 * 1024 * 1024)
    with Agent() as agent:
        s = agent.session(str(root), options=SessionOptions(permission_policy=POLICY))
        t0 = time.monotonic()
        query = "needle" if mode == "grep" else "**/*.py"
        result = s.model_tool_call("search", {"mode": mode, "query": query})
        elapsed = time.monotonic() - t0
    assert result.error_kind is not None, f"rg ran unbounded and answered: {result.output[:200]}"
    assert result.error_kind["type"] == "budget_exhausted" and result.error_kind["resource"] == "memory"
    assert "memory limit" in result.output and "ignore file" in result.output
    assert elapsed < 30


def _python_grep_peak(root: Path) -> tuple[Any, int]:
    """A model's grep for ``needle`` with the Python engine, and tracemalloc's peak during it."""
    options = SessionOptions(permission_policy=POLICY, services={"search_engine": "python"})
    with Agent() as agent:
        s = agent.session(str(root), options=options)
        tracemalloc.start()
        try:
            result = s.model_tool_call("search", {"mode": "grep", "query": "needle"})
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    return result, peak


def test_k8_python_engine_reads_only_what_it_uses_of_an_ignore_file(tmp_path: Path) -> None:
    root = _workspace(tmp_path / "ws", 600 * 1024 * 1024)
    result, peak = _python_grep_peak(root)
    assert result.error_kind is None and "src/a.py" in result.output
    # What is left is the cost of compiling the 1 MiB it uses (one 1 MiB pattern here), whatever
    # the file's size; reading the file whole made it 600 MiB more.
    assert peak < 200 * 1024 * 1024, f"peak {peak >> 20} MiB for a 600 MiB sparse ignore file"
    assert os.path.getsize(root / "sub" / ".gitignore") == 600 * 1024 * 1024


def test_k8_q2_python_engine_never_reads_a_huge_text_file_whole(tmp_path: Path) -> None:
    """A sandboxed command can write a text head and ``truncate`` the file to 600 MiB (no disk): the
    Python engine matched its regex over the whole file, so it read all of it into the host. Now a
    text file over the whole-file limit is a failed read, like on a ``git:`` workspace."""
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / "src" / "a.py").write_text("needle = 1\n")
    with open(root / "big.txt", "wb") as fh:
        fh.write(b"needle in a text head\n" * 4000)  # 88 KB of text: past the binary probe
        fh.truncate(600 * 1024 * 1024)
    result, peak = _python_grep_peak(root)
    assert result.error_kind is None and "src/a.py" in result.output
    assert peak < 100 * 1024 * 1024, f"peak {peak >> 20} MiB for a 600 MiB text file"
    assert result.metadata["failed_reads"] == 1 and "big.txt" not in result.output
