"""``write``/``edit``/``patch`` refuse a file too big to hold in memory (SPEC K-8, B-3).

Found by the issue-15 attack run: a sandboxed ``truncate -s 20G big.txt`` costs no disk, and a
model-side ``edit`` of it read the whole file into the host process (a 2 GiB one took 6 GiB before
Python's MemoryError; 8 GiB would have brought the OOM killer to the worker). These tools keep the
file's old and new bytes in memory by design, so they now refuse files over ``MAX_FILE_BYTES``
before reading anything (``invalid_argument``, naming the limit and ``bash`` as the way), and the
file is left as it was.
"""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path

import pytest

from kernel import PermissionPolicy, SessionOptions
from orchestrator import Agent
from tools._fileio import MAX_FILE_BYTES

BIG = 1024 * 1024 * 1024  # sparse: no disk


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("edit", {"file_path": "big.txt", "old_string": "x", "new_string": "y"}),
        ("edit", {"file_path": "big.txt", "old_string": "x", "new_string": "y", "dry_run": True}),
        ("write", {"file_path": "big.txt", "content": "small now\n"}),
        ("patch", {"diff": "--- a/big.txt\n+++ b/big.txt\n@@ -1 +1 @@\n-x\n+y\n"}),
        ("patch", {"diff": "--- a/big.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n"}),
    ],
)
def test_k8_file_tools_refuse_a_file_too_big_to_hold(tmp_path: Path, tool: str, args: dict) -> None:
    with open(tmp_path / "big.txt", "wb") as fh:
        fh.truncate(BIG)
    with Agent() as agent:
        s = agent.session(
            str(tmp_path), options=SessionOptions(permission_policy=PermissionPolicy(allow=[tool]))
        )
        tracemalloc.start()
        try:
            result = s.model_tool_call(tool, args)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert result.error_kind is not None and result.error_kind["type"] == "invalid_argument", result.output
    assert f"{MAX_FILE_BYTES >> 20} MiB" in result.output and "bash" in result.output, result.output
    assert peak < 32 * 1024 * 1024, f"peak {peak >> 20} MiB"
    assert os.path.getsize(tmp_path / "big.txt") == BIG
