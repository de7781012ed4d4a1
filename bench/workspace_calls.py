"""Per-call cost of the path-touching tools, one tree at a time (issue 15: race-free resolution).

Run as a script by ``bench.workspace`` (``python -P bench/workspace_calls.py ROUNDS``) with
``PYTHONPATH`` pointing at either the current tree or a baseline tree extracted from git, so the
same inputs go through both implementations. Uses only surface that every version has: the public
SDK (``Agent``, ``SessionOptions``, ``session.tool``) and ``LocalWorkspace``'s protocol methods
(``read_bytes``, ``stat``, ``list_dir``: the resolver alone, without the kernel around it). Prints
one JSON object: median CPU microseconds per call (all threads), by operation.

The workspace: 20 directories x 3 levels, 200 small files, one symlinked directory (so the
resolver's symlink path is exercised too). Calls: ``read`` of a depth-3 file, ``read`` through
the symlink, ``ls`` of a directory, ``write`` and ``edit`` of a depth-3 file, ``search`` grep and
glob with the Python engine.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def _tree(root: Path) -> list[str]:
    names = []
    for i in range(200):
        rel = f"pkg{i % 20:02d}/sub{i % 3}/mod/f{i:03d}.py"
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("".join(f"def f{i}_{k}(x):  # line {k}\n    return x + {k}\n" for k in range(20)))
        names.append(rel)
    os.symlink("pkg00/sub0", root / "linked")
    return names


def _measure(call: Any, n: int) -> float:
    """Median CPU microseconds per call, all threads of this process (the session's loop thread and
    offload threads included). CPU time, not wall time: on a shared machine other processes'
    load stretches wall time by multiples and would drown the difference being measured."""
    samples = []
    for _ in range(n):
        t0 = time.process_time_ns()
        call()
        samples.append(time.process_time_ns() - t0)
    return statistics.median(samples) / 1000.0


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    from kernel import SessionOptions
    from orchestrator import Agent

    with tempfile.TemporaryDirectory() as tmp, Agent() as agent:
        root = Path(tmp)
        names = _tree(root)
        options = SessionOptions(artifact_store="memory", services={"search_engine": "python"})
        session = agent.session(root, options)
        target = names[7]
        linked = "linked/mod/" + Path(names[0]).name
        counter = [0]

        def ok(name: str, args: dict[str, Any]) -> None:
            res = session.tool(name, args)
            if res.exit_code != 0:
                raise SystemExit(f"{name} failed: {res.output[:300]}")

        def write() -> None:
            counter[0] += 1
            ok("write", {"file_path": target, "content": f"x = {counter[0]}\n"})

        def edit() -> None:
            counter[0] += 1
            ok("write", {"file_path": names[8], "content": "value = 0\n"})
            ok(
                "edit",
                {"file_path": names[8], "old_string": "value = 0", "new_string": f"value = {counter[0]}"},
            )

        calls = {
            "read": lambda: ok("read", {"file_path": names[3]}),
            "read_symlinked": lambda: ok("read", {"file_path": linked}),
            "ls": lambda: ok("ls", {"path": "pkg05/sub2/mod"}),
            "write": write,
            "write+edit": edit,
            "grep": lambda: ok("search", {"mode": "grep", "query": "f17_3", "path": "pkg17"}),
            "glob": lambda: ok("search", {"mode": "glob", "query": "*.py", "path": "pkg04"}),
        }
        from kernel.workspace import LocalWorkspace

        ws = LocalWorkspace(root)
        calls.update(
            {
                "ws.read_bytes": lambda: ws.read_bytes(names[3]),
                "ws.read_bytes_symlinked": lambda: ws.read_bytes(linked),
                "ws.stat": lambda: ws.stat(names[5]),
                "ws.list_dir": lambda: ws.list_dir("pkg05/sub2/mod"),
            }
        )
        for call in calls.values():  # warm caches and imports
            call()
        out = {name: _measure(call, rounds) for name, call in calls.items()}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
