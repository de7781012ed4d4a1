"""Network benchmark (issue 12): ``download`` vs curl, and ``web_fetch`` extraction time per MiB.

    python -m bench.network [--mib 256] [--rounds 3]

1. A 256 MiB random file served from loopback by a separate server process (``sendfile``, Range,
   strong ETag), so neither client shares a process or the GIL with the server. Each round runs,
   interleaved: ``curl -o`` (one connection), then ``download`` through the public path (a session's
   host-direct tool call: kernel, guard, staging, fsync, atomic promotion) with one connection,
   then with four. Throughput ratios are ours / curl's per round; the median is reported. The
   target is >= 0.9x curl with one connection. curl does not fsync; ours does.
2. ``web_fetch``: a ~1 MiB and a ~4 MiB article-shaped page served from loopback, fetched through
   the tool (markdown and text); reported as seconds per MiB of HTML, end to end and for the
   extraction step alone, next to html2text converting the whole page (the cheapest peer: no
   main-content detection).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SERVER = r"""
import os, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
ROOT = sys.argv[1]
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def do_GET(self):
        path = os.path.join(ROOT, self.path.lstrip("/").split("?")[0])
        if not os.path.isfile(path):
            self.send_response(404); self.send_header("Content-Length", "0"); self.end_headers(); return
        size = os.path.getsize(path)
        start, end, status = 0, size - 1, 200
        rng = self.headers.get("Range")
        if rng and rng.startswith("bytes="):
            a, _, b = rng[6:].partition("-")
            start, end, status = int(a), min(int(b) if b else size - 1, size - 1), 206
        self.send_response(status)
        ctype = "text/html; charset=utf-8" if path.endswith(".html") else "application/octet-stream"
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(end - start + 1))
        self.send_header("ETag", '"bench-1"')
        self.send_header("Accept-Ranges", "bytes")
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.end_headers()
        with open(path, "rb") as f:
            self.connection.sendfile(f, start, end - start + 1)
srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
print(srv.server_address[1], flush=True)
srv.serve_forever()
"""


def _serve(root: Path) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen([sys.executable, "-c", SERVER, str(root)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return proc, int(proc.stdout.readline())


def _random_file(path: Path, mib: int) -> str:
    digest = hashlib.sha256()
    with open(path, "wb") as fh:
        for _ in range(mib):
            block = os.urandom(1 << 20)
            digest.update(block)
            fh.write(block)
    return digest.hexdigest()


def bench_download(mib: int, rounds: int) -> None:
    from kernel import SessionOptions
    from orchestrator import Agent

    curl = shutil.which("curl")
    with tempfile.TemporaryDirectory() as tmp, Agent() as agent:
        root, out = Path(tmp) / "srv", Path(tmp) / "ws"
        root.mkdir()
        out.mkdir()
        digest = _random_file(root / "blob.bin", mib)
        proc, port = _serve(root)
        url = f"http://127.0.0.1:{port}/blob.bin"
        session = agent.session(out, SessionOptions(net_allow=("127.0.0.1",), artifact_store="memory"))
        size = mib << 20
        rows: dict[str, list[float]] = {"curl": [], "ours x1": [], "ours x4": []}
        try:
            for _ in range(rounds):
                if curl:
                    t0 = time.perf_counter()
                    subprocess.run([curl, "-s", "-o", str(out / "curl.bin"), url], check=True)
                    rows["curl"].append(time.perf_counter() - t0)
                    (out / "curl.bin").unlink()
                for label, conns in (("ours x1", 1), ("ours x4", 4)):
                    t0 = time.perf_counter()
                    res = session.tool(
                        "download",
                        {"url": url, "file_path": "blob.bin", "connections": conns, "overwrite": True},
                    )
                    rows[label].append(time.perf_counter() - t0)
                    assert res.exit_code == 0, res.output
                    assert res.metadata["bytes"] == size
            check = session.tool(
                "download",
                {"url": url, "file_path": "check.bin", "connections": 4, "expected_sha256": digest},
            )
            assert check.exit_code == 0 and check.metadata["sha256"] == digest, check.output
        finally:
            proc.terminate()
            proc.wait(5)
    print(f"download of {mib} MiB from loopback ({rounds} rounds, interleaved; median time, MiB/s):")
    base = statistics.median(rows["curl"]) if rows["curl"] else None
    for label, times in rows.items():
        if not times:
            print(f"  {label:8s}: curl not installed")
            continue
        med = statistics.median(times)
        line = f"  {label:8s}: {med:6.2f} s  {mib / med:7.1f} MiB/s"
        if base and label != "curl":
            ratios = [c / o for c, o in zip(rows["curl"], times, strict=True)]
            verdict = "met" if label == "ours x1" and statistics.median(ratios) >= 0.9 else ""
            line += f"  throughput {statistics.median(ratios):.2f}x curl (rounds: {', '.join(f'{r:.2f}' for r in ratios)}) {verdict}"
        print(line)
    if base:
        r1 = statistics.median([c / o for c, o in zip(rows["curl"], rows["ours x1"], strict=True)])
        print(f"  target >= 0.90x curl with one connection: {'met' if r1 >= 0.9 else 'MISSED'} ({r1:.2f}x)")


def _article_html(target_bytes: int) -> str:
    nav = (
        "<nav><ul>" + "".join(f"<li><a href='/s{i}'>Section {i}</a></li>" for i in range(40)) + "</ul></nav>"
    )
    aside = (
        "<aside>" + "".join(f"<p><a href='/t{i}'>Trending story {i}</a></p>" for i in range(20)) + "</aside>"
    )
    words = "the scheduler keeps every worker busy while results stream to disk and the network".split()
    paras: list[str] = []
    size = 0
    i = 0
    while size < target_bytes:
        text = " ".join(words[(i + k) % len(words)] for k in range(70))
        block = f"<h2>Part {i}</h2><p>{text}.</p>" if i % 10 == 0 else f"<p>{text}.</p>"
        if i % 25 == 0:
            block += f"<table><tr><th>k</th><th>v</th></tr><tr><td>row {i}</td><td>{i}</td></tr></table>"
        paras.append(block)
        size += len(block)
        i += 1
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>Bench article</title></head><body>"
        f"<header>{nav}</header>{aside}<main><article><h1>Bench article</h1>{''.join(paras)}</article></main>"
        "<footer>Copyright 2026</footer></body></html>"
    )


def bench_web_fetch() -> None:
    from kernel import SessionOptions
    from orchestrator import Agent
    from tools.web_fetch.extract import Page, _html2text, render

    print("web_fetch extraction (seconds per MiB of HTML):")
    with tempfile.TemporaryDirectory() as tmp, Agent() as agent:
        root = Path(tmp)
        sizes = (1, 4)
        for mib in sizes:
            (root / f"page{mib}.html").write_text(_article_html(mib << 20))
        proc, port = _serve(root)
        session = agent.session(root, SessionOptions(net_allow=("127.0.0.1",), artifact_store="memory"))
        try:
            for mib in sizes:
                html = (root / f"page{mib}.html").read_text()
                real_mib = len(html.encode()) / (1 << 20)
                for fmt in ("markdown", "text"):
                    t0 = time.perf_counter()
                    res = session.tool(
                        "web_fetch", {"url": f"http://127.0.0.1:{port}/page{mib}.html", "format": fmt}
                    )
                    tool_s = time.perf_counter() - t0
                    assert res.exit_code == 0, res.output
                    t0 = time.perf_counter()
                    render(Page("html", html, "text/html"), fmt, True, "http://bench/")
                    ext_s = time.perf_counter() - t0
                    print(
                        f"  {real_mib:4.1f} MiB page, {fmt:8s}: tool call {tool_s / real_mib:5.2f} s/MiB, "
                        f"extraction alone {ext_s / real_mib:5.2f} s/MiB "
                        f"({res.metadata['range']['total_chars']} chars of main content)"
                    )
                t0 = time.perf_counter()
                _html2text(html)
                peer = time.perf_counter() - t0
                print(
                    f"  {real_mib:4.1f} MiB page, peer html2text (whole page, no main-content detection): {peer / real_mib:5.2f} s/MiB"
                )
        finally:
            proc.terminate()
            proc.wait(5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    bench_download(args.mib, args.rounds)
    bench_web_fetch()


if __name__ == "__main__":
    main()
