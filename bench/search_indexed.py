"""Benchmark of search mode ``indexed`` (issue 14, SPEC Q-8) on a generated source tree.

    python -m bench.search_indexed [--mb 500] [--rounds 7] [--keep DIR]

``bench.search`` runs the same figures (``report``) in its one run.

1. **The tree**: copies of the interpreter's standard library (``.py`` files) until ``--mb`` MB,
   every identifier of six or more characters suffixed per copy (``parse_headers`` →
   ``parse_headers_c3``), so the vocabulary grows with the tree as a real monorepo's does instead
   of repeating one copy's words. One identifier, ``zebraQuokkaDispatcher``, is planted in a single
   file in the middle of the tree. Generated in a temp dir, deleted afterwards (``--keep`` keeps it).
2. **Build rate**: ``a3s-fleet index build``'s function (``update_index``) from nothing: MB of
   source read per second of wall time (walk, read, digest, tokenize, tantivy indexing, commits,
   final merge).
3. **Incremental update after one edit**: one file rewritten, then an update (walk + stat of
   every file, the one file re-read and re-indexed): seconds, and the count of re-indexed files.
4. **Query latency vs rg**: the same identifier searched by ``rg -n --no-config -F`` (its output
   captured) and by ``session.tool("search", {"mode": "indexed", ...})`` — the public path through
   the kernel (validation, permission, index reload, tantivy top-k, the freshness re-read and
   digest of every returned file, rendering, projection). Page cache warm for both (one untimed
   round each), rounds interleaved, median reported. Target: indexed ≤ 0.2× rg's time.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any

# bench/ holds scripts named like project packages (bench/kernel.py): never import from here.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

NEEDLE = "zebraQuokkaDispatcher"
COMMON = "getLogger"  # an identifier that occurs all over the tree (rg prints thousands of lines)
TARGET_RATIO = 0.2
_IDENT = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]{5,})\b")


def make_tree(root: Path, target_bytes: int) -> tuple[int, int]:
    """Write the tree (see the module docstring); (files, bytes)."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    sources = []
    for p in sorted(stdlib.rglob("*.py")):
        if "site-packages" in p.parts or "__pycache__" in p.parts:
            continue
        try:
            sources.append((p.relative_to(stdlib), p.read_text(encoding="utf-8")))
        except (UnicodeDecodeError, OSError):
            continue
    one_copy = sum(len(t.encode()) for _, t in sources)
    copies = max(1, -(-target_bytes // one_copy))
    files = written = 0
    planted = False
    for c in range(copies):
        suffix = f"_c{c}"
        for rel, text in sources:
            if written >= target_bytes:
                break
            body = _IDENT.sub(lambda m, s=suffix: m.group(1) + s, text)
            if not planted and c == copies // 2:
                body += f"\n\ndef {NEEDLE}(event):\n    return event.dispatch()\n"
                planted = True
            dst = root / f"copy{c:02d}" / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            data = body.encode()
            dst.write_bytes(data)
            files += 1
            written += len(data)
    if not planted:  # a tree smaller than two copies: plant in the last file written
        with open(dst, "a", encoding="utf-8") as fh:
            fh.write(f"\n\ndef {NEEDLE}(event):\n    return event.dispatch()\n")
    return files, written


def _median_ms(xs: list[float]) -> float:
    return statistics.median(xs) * 1000


def bench(mb: int, rounds: int, keep: Path | None = None) -> dict[str, Any]:
    from kernel.options import SessionOptions
    from kernel.workspace import LocalWorkspace
    from orchestrator.agent import Agent
    from tools.search.indexed.build import update_index

    base = keep or Path(tempfile.mkdtemp(prefix="a3s-bench-indexed-"))
    root = base / "tree"
    out: dict[str, Any] = {}
    try:
        if not root.exists():
            root.mkdir(parents=True)
            t = time.perf_counter()
            out["files"], out["bytes"] = make_tree(root, mb * 1_000_000)
            out["generate_s"] = time.perf_counter() - t
        else:
            out["files"] = sum(1 for p in root.rglob("*.py"))
            out["bytes"] = sum(p.stat().st_size for p in root.rglob("*.py"))
        shutil.rmtree(root / ".a3s", ignore_errors=True)
        ws = LocalWorkspace(root)
        subprocess.run(
            ["rg", "--no-config", "-c", "-F", "x", "."], cwd=root, capture_output=True, check=False
        )
        t = time.perf_counter()
        report = update_index(ws)
        build_s = time.perf_counter() - t
        out["build"] = report.to_json() | {"wall_s": build_s, "mb_per_s": report.bytes_read / 1e6 / build_s}
        index_dir = Path(report.directory)
        out["index_bytes"] = sum(p.stat().st_size for p in (index_dir / "fts").iterdir() if p.is_file())

        victim = next(iter(sorted((root / "copy00").rglob("*.py"))))
        victim.write_text(victim.read_text() + "\n# edited by the benchmark\n")
        t = time.perf_counter()
        inc = update_index(ws)
        out["incremental"] = {"seconds": time.perf_counter() - t, "indexed_files": inc.indexed_files}

        with Agent() as agent:
            session = agent.session(
                root,
                SessionOptions(artifact_store="memory", services={"search_index": {"auto_update": False}}),
            )
            for ident in (NEEDLE, COMMON):
                args = {"mode": "indexed", "query": ident}
                argv = ["rg", "--no-config", "-n", "-F", "--", ident]
                res = session.tool("search", args)  # warm: page cache, index handle
                assert res.exit_code == 0, res.output
                subprocess.run(argv, cwd=root, capture_output=True, check=False)
                ours: list[float] = []
                rg: list[float] = []
                for _ in range(rounds):
                    t = time.perf_counter()
                    proc = subprocess.run(argv, cwd=root, capture_output=True, check=False)
                    rg.append(time.perf_counter() - t)
                    t = time.perf_counter()
                    res = session.tool("search", args)
                    ours.append(time.perf_counter() - t)
                top = res.metadata["results"][0]["path"] if res.metadata["results"] else None
                out[ident] = {
                    "rg_ms": _median_ms(rg),
                    "indexed_ms": _median_ms(ours),
                    "rg_lines": proc.stdout.count(b"\n"),
                    "indexed_results": res.metadata["returned_results"],
                    "top": top,
                }
    finally:
        if keep is None:
            shutil.rmtree(base, ignore_errors=True)
    return out


def report(mb: int = 500, rounds: int = 7, keep: Path | None = None) -> dict[str, Any]:
    """Print the figures; return them (bench.search adds the verdicts)."""
    print(f"indexed mode on a generated {mb} MB tree (stdlib copies, identifiers suffixed per copy):")
    r = bench(mb, rounds, keep)
    b = r["build"]
    print(
        f"   tree: {r['files']} files, {r['bytes'] / 1e6:.0f} MB"
        + (f" (generated in {r['generate_s']:.0f} s)" if "generate_s" in r else "")
        + f"; index {r['index_bytes'] / 1e6:.0f} MB on disk"
    )
    print(
        f"   build from nothing: {b['wall_s']:.1f} s, {b['mb_per_s']:.1f} MB/s"
        f" ({b['indexed_files']} files, {b['chunks']} chunks, {b['commits']} commits)"
    )
    inc = r["incremental"]
    print(
        f"   incremental update after one edit: {inc['seconds']:.2f} s ({inc['indexed_files']} file re-indexed)"
    )
    for ident in (NEEDLE, COMMON):
        q = r[ident]
        print(
            f"   query {ident!r}: rg {q['rg_ms']:.1f} ms ({q['rg_lines']} lines) vs indexed"
            f" {q['indexed_ms']:.1f} ms ({q['indexed_results']} results, top {q['top']})"
            f" = {q['indexed_ms'] / q['rg_ms']:.3f}x rg"
        )
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--keep", type=Path, default=None, help="generate (or reuse) the tree here and keep it")
    args = ap.parse_args()
    if shutil.which("rg") is None:
        sys.exit("rg is not on PATH")
    os.environ.pop("A3S_BROKER_URL", None)
    report(args.mb, args.rounds, args.keep)


if __name__ == "__main__":
    main()
