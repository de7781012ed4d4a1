"""bash inside bubblewrap for governed (model-side) calls (SPEC B-2, K-6; REFERENCE 4.7, §9.4).

Each check also runs the same command unsandboxed where that proves the test can fail.
Skipped only when bubblewrap cannot run on this machine (the probe says why).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import time

import pytest

from kernel.origin import Origin
from kernel.testing import make_context
from kernel.workspace import LocalWorkspace
from tools.bash import TOOL
from tools.bash.sandbox import BwrapSandbox, bwrap_argv, default_sandbox

_SANDBOX = default_sandbox()
needs_bwrap = pytest.mark.skipif(not _SANDBOX.probe(), reason=f"bubblewrap unusable: {_SANDBOX.probe_error}")


def _governed(root, **kw):
    return make_context(LocalWorkspace(root), tool_name="bash", origin=Origin.AGENT, **kw)


def _host(root, **kw):
    return make_context(LocalWorkspace(root), tool_name="bash", **kw)


async def _bash(ctx, **args):
    return await TOOL.run(ctx, TOOL.validate(args))


def _real(path) -> str:
    return os.path.realpath(path)


def _exists(path: str) -> bool:
    return os.path.exists(path)


def _alive(marker: str) -> bool:
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as fh:
                    if marker.encode() in fh.read().split(b"\0"):
                        return True
            except OSError:
                continue
    return False


def test_b2_bwrap_argv_binds_workspace_after_fresh_tmp_and_isolates():
    argv = bwrap_argv(
        "/usr/bin/bwrap",
        ["bash", "-c", "true"],
        "/tmp/ws/sub",
        seccomp_fd=9,
        workspace_args=["--bind-fd", "7", "/tmp/ws"],
        host_uid=0,
    )
    assert argv[0] == "/bin/sh" and argv[3] == "/usr/bin/bwrap"  # the oom_score_adj prelude, then bwrap
    assert argv[argv.index("--ro-bind") : argv.index("--ro-bind") + 3] == ["--ro-bind", "/", "/"]
    assert argv.index("--bind-fd") > argv.index("--tmpfs")
    assert argv[argv.index("--bind-fd") : argv.index("--bind-fd") + 3] == ["--bind-fd", "7", "/tmp/ws"]
    for flag in ("--unshare-all", "--unshare-user", "--die-with-parent", "--new-session"):
        assert flag in argv
    assert argv[argv.index("--cap-drop") + 1] == "ALL"
    assert argv[argv.index("--uid") + 1] == "65534" and argv[argv.index("--seccomp") + 1] == "9"
    assert argv[argv.index("--chdir") + 1] == "/tmp/ws/sub"
    assert argv[-4:] == ["--", "bash", "-c", "true"]
    assert "--uid" not in bwrap_argv("bwrap", ["true"], "/", seccomp_fd=3, host_uid=1000)


def test_b2_probe_reports_a_missing_binary(tmp_path):
    missing = BwrapSandbox(binary=str(tmp_path / "no-bwrap"))
    assert missing.available is False and "not installed" in (missing.probe_error or "")


@needs_bwrap
async def test_b2_sandbox_writes_inside_the_workspace(tmp_path):
    result = await _bash(_governed(tmp_path), command="echo hi > inside.txt && cat inside.txt")
    assert result.exit_code == 0 and result.output == "hi\n"
    assert result.metadata["sandboxed"] is True and result.metadata["sandbox_available"] is True
    assert (tmp_path / "inside.txt").read_text() == "hi\n"
    assert result.metadata["changed_paths"] == ["inside.txt"]


@needs_bwrap
async def test_b2_sandbox_cannot_write_outside_the_workspace(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    etc_target = f"/etc/a3s-bash-probe-{secrets.token_hex(4)}"
    command = f"touch {etc_target} || echo etc-denied; echo x > {outside}/f || echo outside-denied"
    result = await _bash(_governed(ws), command=command)
    assert "etc-denied" in result.output
    assert not _exists(etc_target)
    assert not (outside / "f").exists()
    # The same command on the host does reach the outside directory: the check can fail.
    host = await _bash(_host(ws), command=f"echo x > {outside}/f")
    assert host.exit_code == 0 and (outside / "f").exists()


@needs_bwrap
async def test_b2_sandbox_has_no_network(tmp_path):
    accepted = asyncio.Event()

    async def on_client(reader, writer):
        accepted.set()
        writer.close()

    server = await asyncio.start_server(on_client, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    command = f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected"
    try:
        host = await _bash(_host(tmp_path), command=command)
        assert host.output == "connected\n" and accepted.is_set()
        accepted.clear()
        boxed = await _bash(_governed(tmp_path), command=command)
        assert boxed.exit_code == 1 and "connected" not in boxed.metadata["output"]["stdout"]["text"]
        assert boxed.metadata["sandboxed"] is True
        assert not accepted.is_set()
    finally:
        server.close()
        await server.wait_closed()


@needs_bwrap
async def test_b2_k6_sandboxed_timeout_leaves_no_process(tmp_path):
    tag = f"300.{secrets.randbelow(10**6):06d}"
    started = time.monotonic()
    result = await _bash(_governed(tmp_path), command=f"sleep {tag} & sleep {tag}", timeout=1000)
    assert time.monotonic() - started < 3
    assert result.error_kind == {"type": "timeout", "op": "bash", "duration_ms": 1000}
    for _ in range(50):
        if not _alive(tag):
            break
        await asyncio.sleep(0.02)
    assert not _alive(tag)


@needs_bwrap
async def test_b2_sandboxed_cwd_persists_and_tmp_is_private(tmp_path):
    state: dict = {}
    marker = tmp_path.parent / f"a3s-host-tmp-{secrets.token_hex(4)}"
    marker.write_text("host")
    try:
        first = await _bash(_governed(tmp_path, session_state=state), command="mkdir -p sub && cd sub")
        assert first.metadata["cwd"] == "sub"
        second = await _bash(
            _governed(tmp_path, session_state=state),
            command=f"pwd -P; cat {marker} 2>/dev/null || echo hidden",
        )
        assert second.output.splitlines()[0] == f"{_real(tmp_path)}/sub"
        assert "hidden" in second.output
    finally:
        marker.unlink()


@needs_bwrap
async def test_b2_sandbox_keeps_internal_dir_read_only(tmp_path):
    (tmp_path / ".a3s").mkdir()
    result = await _bash(_governed(tmp_path), command="echo x > .a3s/planted || echo denied")
    assert "denied" in result.output and not (tmp_path / ".a3s" / "planted").exists()


@needs_bwrap
async def test_k6_cancelling_a_sandboxed_call_kills_the_namespace(tmp_path):
    tag = f"1.{secrets.randbelow(10**6):06d}"
    task = asyncio.create_task(_bash(_governed(tmp_path), command=f"sleep {tag} & sleep {tag}; touch f"))
    await asyncio.sleep(0.3)
    assert _alive(tag)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(25):
        if not _alive(tag):
            break
        await asyncio.sleep(0.02)
    assert not _alive(tag)
    await asyncio.sleep(1.0)
    assert not (tmp_path / "f").exists()


def test_b6_other_procfs_mounts_and_home_credentials_are_masked(tmp_path, monkeypatch):
    """A host procfs mounted elsewhere (a container's /host/proc) and ~/.ssh are covered."""
    from tools.bash import mounts

    fake_proc = tmp_path / "host-proc"
    fake_proc.mkdir()
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".netrc").write_text("machine x password y")
    ws = tmp_path / "ws"
    ws.mkdir()
    monkeypatch.setattr(mounts, "_extra_procfs_mounts", lambda: [str(fake_proc)])
    args = mounts._mask_args(str(ws), str(home))
    assert ["--tmpfs", str(fake_proc)] == args[
        args.index(str(fake_proc)) - 1 : args.index(str(fake_proc)) + 1
    ]
    assert ["--ro-bind", "/dev/null", str(home / ".netrc")] == args[
        args.index(str(home / ".netrc")) - 2 : args.index(str(home / ".netrc")) + 1
    ]
    assert str(home / ".ssh") in args
    # A masked path holding the workspace itself is left alone.
    assert str(home / ".ssh") not in mounts._mask_args(str(home / ".ssh" / "project"), str(home))
