"""``A3S_CA_BUNDLE``: a private CA (or a TLS-inspecting proxy's) trusted for https besides certifi's
roots, read by each process from its own settings (SPEC D-3: TLS is still verified, only the trust
anchors grow). Against a loopback https server whose certificate a throwaway CA signed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from config.settings import Settings
from orchestrator import Agent
from tests.tools.netserver import LoopbackServer, static
from tests.tools.tls_certs import make_certs, serve_tls


@pytest.fixture()
def https_server(tmp_path: Path) -> Iterator[tuple[LoopbackServer, Path]]:
    certs = tmp_path / "certs"
    certs.mkdir()
    ca, cert, key = make_certs(certs, ["localhost"], ["127.0.0.1"])
    srv = LoopbackServer()
    serve_tls(srv, cert, key)
    srv.route("/page", static(200, "private CA, verified", content_type="text/plain; charset=utf-8"))
    try:
        yield srv, ca
    finally:
        srv.close()


def _fetch(settings: Settings, workspace: Path, url: str) -> object:
    with Agent(settings) as agent:
        return agent.session(workspace).tool("web_fetch", {"url": url, "format": "text"})


def test_d3_a_private_ca_is_trusted_only_when_configured(https_server, tmp_path: Path) -> None:
    srv, ca = https_server
    url = f"https://127.0.0.1:{srv.port}/page"
    refused = _fetch(Settings(net_allow="127.0.0.1"), tmp_path, url)
    assert refused.exit_code == 1  # type: ignore[attr-defined]
    assert refused.error_kind == {"type": "transport", "op": "web_fetch"}  # type: ignore[attr-defined]
    assert "CERTIFICATE_VERIFY_FAILED" in refused.output and "A3S_CA_BUNDLE" in refused.output  # type: ignore[attr-defined]
    assert srv.hits("/page") == []  # the handshake failed: no request was sent
    trusted = _fetch(Settings(net_allow="127.0.0.1", ca_bundle=str(ca)), tmp_path, url)
    assert trusted.exit_code == 0, trusted.output  # type: ignore[attr-defined]
    assert "private CA, verified" in trusted.output  # type: ignore[attr-defined]


def test_d3_a_bad_ca_bundle_is_one_clear_line(tmp_path: Path) -> None:
    """A missing file, or one without a certificate, fails before any call, naming the setting."""
    empty = tmp_path / "empty.pem"
    empty.write_text("not a certificate\n")
    for bundle in (str(tmp_path / "missing.pem"), str(empty)):
        with pytest.raises(ValueError, match=r"A3S_CA_BUNDLE=.*not a readable PEM file of CA certificates"):
            _fetch(Settings(ca_bundle=bundle), tmp_path, "https://127.0.0.1:9/")
        env = {k: v for k, v in os.environ.items() if not k.startswith("A3S_")}
        env["A3S_CA_BUNDLE"] = bundle
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "orchestrator.cli",
                "tool",
                "web_fetch",
                '{"url": "https://127.0.0.1:9/"}',
            ],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode != 0 and "Traceback" not in out.stderr
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and f"A3S_CA_BUNDLE={bundle}" in lines[0], out.stderr
