"""Network benchmark (issue 12): ``download`` vs curl, and ``web_fetch`` extraction time per MiB.

    python -m bench.network [--mib 256] [--rounds 5] [--only download|web_fetch] [--https] [--proxy]

1. A 256 MiB random file served from loopback by a separate server process (``sendfile``, Range,
   strong ETag), so neither client shares a process or the GIL with the server. Each round runs,
   interleaved and in a rotating order: ``curl -o`` (one connection), ``download`` through the
   public path (a session's host-direct tool call: kernel, guard, staging, fsync, atomic
   promotion) with one connection, and with four. Every client writes a fresh file (the previous
   one is deleted outside the timing). Throughput ratios are ours / curl's per round; the median
   is reported. The target is >= 0.9x curl with one connection. curl does not fsync; ours does.
   The machine is shared, so wall-clock ratios are noisy: the run also prints the load average
   and CPU seconds per GiB (ours: this process's rusage, every thread; curl: the child's
   rusage), which contention disturbs much less.
2. ``web_fetch``: a ~1 MiB and a ~4 MiB article-shaped page served from loopback, fetched through
   the tool (markdown and text); reported as seconds per MiB of HTML, end to end and for the
   extraction step alone, next to html2text converting the whole page (the cheapest peer: no
   main-content detection).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
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
class Quiet(ThreadingHTTPServer):
    def handle_error(self, request, client_address): pass  # a client hanging up early is normal here
srv = Quiet(("127.0.0.1", 0), H)
if len(sys.argv) > 3:  # --https: cert and key (sendfile falls back to a send loop on a TLS socket)
    import ssl
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(sys.argv[2], sys.argv[3])
    srv.socket = tls.wrap_socket(srv.socket, server_side=True)
print(srv.server_address[1], flush=True)
srv.serve_forever()
"""


def _serve(root: Path, tls: tuple[Path, Path] | None = None) -> tuple[subprocess.Popen[str], int]:
    extra = [str(tls[0]), str(tls[1])] if tls else []
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(root), *extra], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    return proc, int(proc.stdout.readline())


PROXY = r"""
import sys, threading
from tests.tools.httpproxy import HttpProxy
proxy = HttpProxy(("127.0.0.1", int(sys.argv[1])))
print(proxy.port, flush=True)
threading.Event().wait()
"""


def _proxy_process(upstream_port: int) -> tuple[subprocess.Popen[str], str]:
    """tests/tools/httpproxy.py in a process of its own (its CPU is neither client's)."""
    repo = str(Path(__file__).resolve().parents[1])
    proc = subprocess.Popen(
        [sys.executable, "-c", PROXY, str(upstream_port)], stdout=subprocess.PIPE, text=True, cwd=repo
    )
    assert proc.stdout is not None
    return proc, f"http://127.0.0.1:{int(proc.stdout.readline())}"


def _random_file(path: Path, mib: int) -> str:
    digest = hashlib.sha256()
    with open(path, "wb") as fh:
        for _ in range(mib):
            block = os.urandom(1 << 20)
            digest.update(block)
            fh.write(block)
    return digest.hexdigest()


def _cpu_self() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)  # every thread of this process
    return usage.ru_utime + usage.ru_stime


def _cpu_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # children waited for: curl (the server still runs)
    return usage.ru_utime + usage.ru_stime


def _load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def bench_download(mib: int, rounds: int, https: bool = False, proxy: bool = False) -> None:
    from config.settings import Settings
    from kernel import SessionOptions
    from orchestrator import Agent
    from tools.download.pump import STATS as PUMPED

    curl = shutil.which("curl")
    load_before = _load()
    pumped_before = PUMPED["bodies"]
    with tempfile.TemporaryDirectory() as tmp:
        root, out = Path(tmp) / "srv", Path(tmp) / "ws"
        root.mkdir()
        out.mkdir()
        digest = _random_file(root / "blob.bin", mib)
        curl_tls: list[str] = []
        settings = Settings()
        if https:  # a throwaway CA: curl gets --cacert, we get A3S_CA_BUNDLE (Settings.ca_bundle)
            from tests.tools.tls_certs import make_certs

            ca, cert, key = make_certs(Path(tmp), ["localhost"], ["127.0.0.1"])
            curl_tls = ["--cacert", str(ca)]
            settings = Settings(ca_bundle=str(ca))
        proc, port = _serve(root, (cert, key) if https else None)
        url = f"{'https' if https else 'http'}://127.0.0.1:{port}/blob.bin"
        tunnel = None
        saved_env = {k: os.environ.get(k) for k in ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY")}
        if proxy:  # one loopback HTTP proxy (CONNECT for https) in its own process for both
            tunnel, proxy_url = _proxy_process(port)
            curl_tls += ["-x", proxy_url]
            os.environ.update(HTTP_PROXY=proxy_url, HTTPS_PROXY=proxy_url, NO_PROXY="")
        agent = Agent(settings)  # reads the proxies of this environment
        session = agent.session(out, SessionOptions(net_allow=("127.0.0.1",), artifact_store="memory"))
        size = mib << 20
        labels = ["curl", "ours x1", "ours x4"] if curl else ["ours x1", "ours x4"]
        times: dict[str, list[float]] = {label: [] for label in labels}
        cpu: dict[str, list[float]] = {label: [] for label in labels}

        def one(label: str) -> None:
            # Every client writes a fresh file and its previous one is deleted outside the timing
            # (deleting 256 MiB costs ~50 ms; charging it to one side only skews the ratio).
            target = out / ("curl.bin" if label == "curl" else "blob.bin")
            target.unlink(missing_ok=True)
            if label == "curl":
                assert curl is not None
                c0, t0 = _cpu_children(), time.perf_counter()
                subprocess.run([curl, "-s", *curl_tls, "-o", str(target), url], check=True)
                times[label].append(time.perf_counter() - t0)
                cpu[label].append(_cpu_children() - c0)
                return
            args = {"url": url, "file_path": "blob.bin", "connections": 1 if label == "ours x1" else 4}
            c0, t0 = _cpu_self(), time.perf_counter()
            res = session.tool("download", args)
            times[label].append(time.perf_counter() - t0)
            cpu[label].append(_cpu_self() - c0)
            assert res.exit_code == 0, res.output
            assert res.metadata["bytes"] == size

        try:
            for n in range(rounds):
                # Interleaved, and the order rotates: the first client after a pause pays for cold
                # page-cache pages, so a fixed order would always charge the same client.
                for label in labels[n % len(labels) :] + labels[: n % len(labels)]:
                    one(label)
            check = session.tool(
                "download",
                {"url": url, "file_path": "check.bin", "connections": 4, "expected_sha256": digest},
            )
            assert check.exit_code == 0 and check.metadata["sha256"] == digest, check.output
        finally:
            agent.close()
            proc.terminate()
            proc.wait(5)
            if tunnel is not None:
                tunnel.terminate()
                tunnel.wait(5)
            for key, value in saved_env.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
    gib = mib / 1024
    scheme = "https (TLS 1.3, a throwaway CA)" if https else "http"
    via = " through a loopback HTTP proxy (tests/tools/httpproxy.py)" if proxy else ""
    print(
        f"download of {mib} MiB from loopback over {scheme}{via} ({rounds} rounds, interleaved, rotating order):"
    )
    print(f"  load average (1/5/15 min) before: {load_before}, after: {_load()}; {os.cpu_count()} CPUs")
    base_cpu = statistics.median(cpu["curl"]) / gib if curl else None
    for label in labels:
        med = statistics.median(times[label])
        cpu_gib = statistics.median(cpu[label]) / gib
        line = f"  {label:8s}: {med:6.2f} s  {mib / med:7.1f} MiB/s  CPU {cpu_gib:5.2f} s/GiB"
        line += f"  (s: {', '.join(f'{t:.2f}' for t in times[label])})"
        if curl and label != "curl":
            ratios = [c / o for c, o in zip(times["curl"], times[label], strict=True)]
            line += f"  throughput {statistics.median(ratios):.2f}x curl (rounds: {', '.join(f'{r:.2f}' for r in ratios)})"
            assert base_cpu is not None
            line += f"; CPU {cpu_gib / base_cpu:.2f}x curl's"
        print(line)
    if curl:
        r1 = statistics.median([c / o for c, o in zip(times["curl"], times["ours x1"], strict=True)])
        print(f"  target >= 0.90x curl with one connection: {'met' if r1 >= 0.9 else 'MISSED'} ({r1:.2f}x)")
    print("  (CPU: ours is this process's user+sys time, every thread; curl's is the child's rusage)")
    print(f"  bodies written straight from the socket (pump path): {PUMPED['bodies'] - pumped_before}")


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
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", choices=("download", "web_fetch"), help="run one of the two benchmarks")
    parser.add_argument("--https", action="store_true", help="download over TLS (curl and ours verify it)")
    parser.add_argument("--proxy", action="store_true", help="download through a loopback HTTP proxy")
    args = parser.parse_args()
    if args.only != "web_fetch":
        bench_download(args.mib, args.rounds, https=args.https, proxy=args.proxy)
    if args.only != "download":
        bench_web_fetch()


if __name__ == "__main__":
    main()
