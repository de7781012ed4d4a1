"""Workspace benchmark (issue 3): ``read.files`` over 1,000 files vs ``cat`` of the same files, and
bash's peak memory while a command prints 200 MB (must stay bounded).

    python -m bench.workspace

``read.files`` takes ≤ 32 files per call, so 1,000 files are 32 host-direct calls through the full
kernel (validation, budget, projection with evidence); ``cat`` reads the same files in one process.
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from pathlib import Path

N_FILES = 1000
LINES_PER_FILE = 40
FILES_PER_CALL = 32


def bench_read_files() -> tuple[float, float]:
    from kernel import SessionOptions
    from orchestrator import Agent

    with tempfile.TemporaryDirectory() as tmp, Agent() as agent:
        root = Path(tmp)
        names = []
        for i in range(N_FILES):
            name = f"d{i % 20:02d}/f{i:04d}.py"
            (root / name).parent.mkdir(exist_ok=True)
            (root / name).write_text(
                "".join(f"def f{i}_{k}(x):  # line {k}\n" for k in range(LINES_PER_FILE))
            )
            names.append(name)
        session = agent.session(root, SessionOptions(artifact_store="memory"))
        t0 = time.perf_counter()
        lines = 0
        for start in range(0, N_FILES, FILES_PER_CALL):
            chunk = [{"path": n} for n in names[start : start + FILES_PER_CALL]]
            res = session.tool("read", {"files": chunk, "max_output_bytes": 98_304})
            assert res.exit_code == 0 and not res.metadata["batch"]["truncated"], res.output[-300:]
            lines += res.metadata["batch"]["returned_lines"]
        ours = time.perf_counter() - t0
        assert lines == N_FILES * LINES_PER_FILE
        t0 = time.perf_counter()
        out = subprocess.run(["cat", *names], cwd=root, capture_output=True, check=True)
        cat = time.perf_counter() - t0
        assert out.stdout.count(b"\n") == N_FILES * LINES_PER_FILE
        return ours, cat


def main() -> None:
    ours, cat = bench_read_files()
    print(
        f"read.files of {N_FILES} files: {ours * 1000:.1f} ms; cat: {cat * 1000:.1f} ms; ratio {ours / cat:.1f}x"
    )
    from bench.workspace_bash import bench_bash_memory

    mem = bench_bash_memory()
    print(f"bash printing 200 MB: {mem}")


if __name__ == "__main__":
    main()
