"""Concurrent Python-engine greps hold one big file at a time, not one each (SPEC K-8, Q-2).

The Python engine matched a whole file at once (now runs of lines), so a text file just under its
64 MiB whole-file limit cost its bytes, its decoded text (4 bytes a character once one character
is outside the BMP) and the UTF-8 text RE2 scans: 373 MiB of peak RSS for one grep of a 59 MiB file with an emoji
on each line. A model's ``batch`` of such greps ran them side by side — 8 took the host +1842 MiB,
and the thread pool grows with the machine's cores. Measured in a fresh process (ru_maxrss).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
CALLS = 8
PROBE = """
import json, resource, sys
from kernel.options import SessionOptions
from kernel.policy import PermissionPolicy
from orchestrator import Agent
def mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
options = SessionOptions(permission_policy=PermissionPolicy(allow=["*"]), services={"search_engine": "python"})
with Agent() as agent:
    s = agent.session(sys.argv[1], options)
    s.tool("ls", {})
    base = mib()
    grep = {"tool": "search", "args": {"mode": "grep", "query": "needle", "output_mode": "count"}}
    r = s.tool("batch", {"invocations": [grep] * int(sys.argv[2])})
    print(json.dumps({"growth_mib": mib() - base, "exit_code": r.exit_code, "output": r.output[-2000:]}))
"""


def test_k8_q2_concurrent_python_greps_never_hold_more_than_one_big_file_at_once(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    line = ("needle \U0001f600 " + "x" * 90 + "\n").encode()
    with open(root / "big.txt", "wb") as fh:
        for _ in range(40):
            fh.write(line * 10_000)  # 40 x ~1 MiB: a 40 MiB text file, under the 64 MiB limit
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(root), str(CALLS)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    probe = json.loads(done.stdout.strip().splitlines()[-1])
    assert probe["exit_code"] == 0, probe["output"]
    assert probe["output"].count("big.txt:400000") == CALLS, probe["output"]
    # One big file in flight: ~250 MiB when it was matched whole (its bytes, text and UTF-8 copy); side
    # by side it was ~1.2 GiB. Matched in runs of lines (test_search_grep_stream.py) it is a few MiB.
    assert probe["growth_mib"] < 500, probe
