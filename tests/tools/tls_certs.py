"""A throwaway CA and server certificate (made with the openssl CLI) for HTTPS tests on loopback."""

from __future__ import annotations

import ssl
import subprocess
from pathlib import Path
from typing import Any


def make_certs(root: Path, names: list[str], ips: list[str]) -> tuple[Path, Path, Path]:
    """``(ca.pem, server.pem, server.key)`` with the server certificate valid for ``names``/``ips``."""

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=root, check=True, capture_output=True)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
        "-days", "2", "-subj", "/CN=a3s test CA")  # fmt: skip
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
        "-subj", f"/CN={names[0]}")  # fmt: skip
    san = ",".join([f"DNS:{n}" for n in names] + [f"IP:{i}" for i in ips])
    (root / "ext.cnf").write_text(f"subjectAltName={san}\nbasicConstraints=CA:FALSE\n")
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "server.pem", "-days", "2", "-extfile", "ext.cnf")  # fmt: skip
    return root / "ca.pem", root / "server.pem", root / "server.key"


def server_context(cert: Path, key: Path) -> ssl.SSLContext:
    """A TLS server context presenting ``cert``."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return context


def serve_tls(server: Any, cert: Path, key: Path) -> None:
    """Make a ``netserver.LoopbackServer`` answer https with ``cert``."""
    server.httpd.socket = server_context(cert, key).wrap_socket(server.httpd.socket, server_side=True)
