"""Helpers shared by the bash sandbox attack tests (issue 15): contexts, a host-visible scratch dir."""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from kernel.origin import ControlPlane, Origin
from kernel.result import ToolResult
from kernel.testing import make_context
from kernel.workspace import LocalWorkspace
from tools.bash import TOOL
from tools.bash.sandbox import default_sandbox

SANDBOX = default_sandbox()
needs_bwrap = pytest.mark.skipif(not SANDBOX.probe(), reason=f"bubblewrap unusable: {SANDBOX.probe_error}")
as_root = pytest.mark.skipif(os.getuid() != 0, reason="this attack needs a root host (CI runs as root)")
# Hidden or private inside the sandbox: a write there would not reach the host, so a check that
# nothing reached the host must use a directory outside them.
_PRIVATE_IN_SANDBOX = ("/tmp", "/var/tmp", "/run", "/dev", "/proc")


def governed(root: Path, **kw) -> object:
    return make_context(LocalWorkspace(root), tool_name="bash", origin=Origin.AGENT, **kw)


def governed_host_direct(root: Path, **kw) -> object:
    return make_context(
        LocalWorkspace(root),
        tool_name="bash",
        origin=Origin.HOST_DIRECT,
        control_plane=ControlPlane.GOVERNED,
        **kw,
    )


def host(root: Path, **kw) -> object:
    return make_context(LocalWorkspace(root), tool_name="bash", **kw)


async def bash(ctx, **args) -> ToolResult:
    return await TOOL.run(ctx, TOOL.validate(args))


def stdout(result: ToolResult) -> str:
    return result.metadata["output"]["stdout"]["text"]


def exists(path: str | os.PathLike[str]) -> bool:
    return os.path.lexists(path)


def remove(path: str | os.PathLike[str]) -> None:
    if os.path.lexists(path):
        os.unlink(path)


def _visible_base() -> Path:
    for candidate in (Path.home() / ".cache", Path(__file__).resolve().parents[2]):
        real = os.path.realpath(candidate)
        if not any(real == p or real.startswith(p + "/") for p in _PRIVATE_IN_SANDBOX):
            return Path(real)
    pytest.skip("no host directory outside /tmp, /var/tmp and /run to test against")


@contextmanager
def host_visible_dir() -> Iterator[Path]:
    """A fresh directory the sandbox sees at the same path (read-only there); removed afterwards."""
    base = _visible_base()
    base.mkdir(parents=True, exist_ok=True)
    path = base / f"a3s-sandbox-test-{secrets.token_hex(6)}"
    path.mkdir()
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
