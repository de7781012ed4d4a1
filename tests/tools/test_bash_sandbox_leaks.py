"""Nothing of the host leaks into the sandbox: environment, Unix sockets, IP (issue 15 item 2; SPEC B-2).

Every server here is one the test starts itself (a uniquely named Unix socket under /run, an
abstract socket, a loopback TCP port); each is also reached from the host, proving it is live.
"""

from __future__ import annotations

import asyncio
import base64
import os
import secrets
import socket
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.tools.bash_sandbox_support import (
    bash,
    governed,
    governed_host_direct,
    host,
    host_visible_dir,
    needs_bwrap,
    remove,
    stdout,
)
from tools.bash.environment import ALLOWED_NAMES, TOOL_ENV, minimal_environment

SECRET_NAME = "A3S_TEST_DB_PASSWORD"

# Dumps everything a process could learn about its environment, base64-encoded so the test
# decodes it (an encoding the redactor would not recognise must not hide a leak from us).
_ENV_DUMP = (
    "{ env; printenv; set; cat /proc/self/environ; cat /proc/1/environ; cat /proc/$$/environ;"
    ' echo "${A3S_TEST_DB_PASSWORD:-unset}"; } 2>&1 | base64 -w0'
)


def _decoded(result) -> str:
    return base64.b64decode(stdout(result).strip()).decode("utf-8", "replace")


@pytest.fixture
def secret(monkeypatch) -> str:
    value = "s3cr3t-" + secrets.token_hex(12)
    monkeypatch.setenv(SECRET_NAME, value)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", value)
    return value


@needs_bwrap
async def test_b2_secret_env_var_is_not_visible_in_the_sandbox(tmp_path, secret):
    result = await bash(governed(tmp_path), command=_ENV_DUMP)
    assert result.exit_code == 0
    dump = _decoded(result)
    assert secret not in dump and "AWS_SECRET" not in dump  # (the command line itself names the other)
    assert "unset" in dump and "PATH=" in dump and "CI=1" in dump
    # The host's own environment does hold it: the dump would have shown it.
    control = await bash(host(tmp_path), command=_ENV_DUMP)
    assert secret in _decoded(control)


@needs_bwrap
async def test_b2_sandbox_environment_is_exactly_the_allow_list(tmp_path, secret, monkeypatch):
    monkeypatch.setenv("LC_A3S_TEST", "x")
    monkeypatch.setenv("LD_PRELOAD", "/nonexistent.so")
    result = await bash(governed(tmp_path), command="env -0 | base64 -w0")
    names = {item.split("=", 1)[0] for item in base64.b64decode(stdout(result)).decode().split("\0") if item}
    allowed = set(ALLOWED_NAMES) | set(TOOL_ENV) | {"PWD", "SHLVL", "_", "OLDPWD"}
    assert names - allowed == {"LC_A3S_TEST"}, names - allowed


async def test_b2_governed_escalated_call_on_the_host_gets_the_minimal_environment(tmp_path, secret):
    # require_escalated runs on the host (after a human confirmed the command in the kernel);
    # the approval covers the command line, not the host's secrets.
    ctx = governed_host_direct(tmp_path)
    result = await bash(
        ctx, command=_ENV_DUMP, sandbox_permissions="require_escalated", justification="needs the host"
    )
    assert result.metadata["sandboxed"] is False
    assert secret not in _decoded(result)


@needs_bwrap
async def test_b2_session_can_pass_named_variables_through(tmp_path, secret, monkeypatch):
    monkeypatch.setenv("A3S_TEST_VISIBLE", "shown")
    monkeypatch.setenv("A3S_TEST_PREFIXED_ONE", "one")
    settings = SimpleNamespace(
        bash_sandbox="auto", bash_env_passthrough=("A3S_TEST_VISIBLE", "A3S_TEST_PREFIXED_*")
    )
    command = 'echo "$A3S_TEST_VISIBLE $A3S_TEST_PREFIXED_ONE ${A3S_TEST_DB_PASSWORD:-unset}"'
    result = await bash(governed(tmp_path, settings=settings), command=command)
    assert result.output == "shown one unset\n"


def test_b2_minimal_environment_ignores_invalid_passthrough_entries():
    host_env = {"PATH": "/bin", "SECRET": "x", "LC_ALL": "C", "HOME": "/h"}
    env = minimal_environment(host_env, ["*", "", "SE CRET", 3, "=SECRET"])  # type: ignore[list-item]
    assert "SECRET" not in env and env["LC_ALL"] == "C" and env["PATH"] == "/bin"
    assert minimal_environment({})["PATH"].startswith("/usr/local/sbin")


# --- sockets -----------------------------------------------------------------------------------

_CONNECT = (
    'python3 -c "import socket,sys; s=socket.socket(socket.AF_UNIX); s.settimeout(3); '
    "s.connect(sys.argv[1]); print('CONNECTED', s.recv(16).decode())\" {address} 2>&1 || echo REFUSED"
)


async def _unix_server(address: str | bytes) -> tuple[asyncio.AbstractServer, asyncio.Event]:
    accepted = asyncio.Event()

    async def on_client(reader, writer):
        accepted.set()
        writer.write(b"hello")
        await writer.drain()
        writer.close()

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(address)
    server = await asyncio.start_unix_server(on_client, sock=sock)
    return server, accepted


async def _assert_unreachable_but_live(tmp_path: Path, address: str, python_address: str | bytes) -> None:
    server, accepted = await _unix_server(python_address)
    try:
        boxed = await bash(governed(tmp_path), command=_CONNECT.format(address=address))
        assert "CONNECTED" not in boxed.output and "REFUSED" in boxed.output
        assert boxed.metadata["sandboxed"] is True and not accepted.is_set()
        control = await bash(host(tmp_path), command=_CONNECT.format(address=address))
        assert "CONNECTED hello" in control.output and accepted.is_set()
    finally:
        server.close()
        await server.wait_closed()


@needs_bwrap
@pytest.mark.skipif(not os.access("/run", os.W_OK), reason="/run is not writable here")
async def test_b2_unix_socket_under_run_is_unreachable(tmp_path):
    path = f"/run/a3s-test-{secrets.token_hex(6)}.sock"
    try:
        await _assert_unreachable_but_live(tmp_path, path, path)
    finally:
        remove(path)


@needs_bwrap
async def test_b2_unix_socket_inside_the_workspace_is_unreachable(tmp_path):
    # The socket file is visible (the workspace is bound), but no AF_UNIX socket can be created.
    path = str(tmp_path / "srv.sock")
    await _assert_unreachable_but_live(tmp_path, "srv.sock", path)


@needs_bwrap
async def test_b2_abstract_unix_socket_is_unreachable(tmp_path):
    name = f"a3s-test-{secrets.token_hex(6)}"
    server, accepted = await _unix_server(b"\0" + name.encode())
    script = (
        'python3 -c "import socket; s=socket.socket(socket.AF_UNIX); s.settimeout(3); '
        f"s.connect(b'\\\\0{name}'); print('CONNECTED', s.recv(16).decode())\" 2>&1 || echo REFUSED"
    )
    try:
        boxed = await bash(governed(tmp_path), command=script)
        assert "CONNECTED" not in boxed.output and "REFUSED" in boxed.output and not accepted.is_set()
        control = await bash(host(tmp_path), command=script)
        assert "CONNECTED hello" in control.output and accepted.is_set()
    finally:
        server.close()
        await server.wait_closed()


@needs_bwrap
@pytest.mark.parametrize("family,address", [(socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")])
async def test_b2_loopback_tcp_server_on_the_host_is_unreachable(tmp_path, family, address):
    accepted = asyncio.Event()

    async def on_client(reader, writer):
        accepted.set()
        writer.close()

    try:
        server = await asyncio.start_server(on_client, address, 0, family=family)
    except OSError:
        pytest.skip(f"no {address} on this host")
    port = server.sockets[0].getsockname()[1]
    command = f"exec 3<>/dev/tcp/{address}/{port} && echo connected || echo refused"
    try:
        boxed = await bash(governed(tmp_path), command=command)
        assert "refused" in boxed.output and "connected" not in stdout(boxed) and not accepted.is_set()
        control = await bash(host(tmp_path), command=command)
        assert "connected" in control.output and accepted.is_set()
    finally:
        server.close()
        await server.wait_closed()


@needs_bwrap
async def test_b2_sandbox_keeps_its_own_loopback_and_socketpairs(tmp_path):
    # What stays usable: a server the command starts on its own loopback, and anonymous pairs.
    script = (
        "python3 - <<'EOF'\n"
        "import socket\n"
        "srv = socket.create_server(('127.0.0.1', 0)); port = srv.getsockname()[1]\n"
        "c = socket.create_connection(('127.0.0.1', port)); s, _ = srv.accept(); c.sendall(b'ok')\n"
        "a, b = socket.socketpair(); a.sendall(s.recv(2)); print(b.recv(2).decode())\n"
        "EOF"
    )
    result = await bash(governed(tmp_path), command=script)
    assert result.output == "ok\n", result.output


@needs_bwrap
async def test_b2_host_credential_stores_are_masked(tmp_path, monkeypatch):
    secret = "token-" + secrets.token_hex(8)
    with host_visible_dir() as home:
        (home / ".ssh").mkdir()
        (home / ".ssh" / "id_ed25519").write_text(secret)
        (home / ".netrc").write_text(f"machine example.com password {secret}")
        (home / "notes.txt").write_text("ordinary file")
        monkeypatch.setenv("HOME", str(home))
        command = (
            'cat "$HOME/.netrc" "$HOME/.ssh/id_ed25519" 2>&1; ls "$HOME/.ssh" 2>&1; cat "$HOME/notes.txt"'
        )
        result = await bash(governed(tmp_path), command=command)
        assert secret not in result.output and "ordinary file" in result.output
        control = await bash(host(tmp_path), command=command)
        assert secret in control.output


_MORE_STORES = (
    ".pgpass",
    ".my.cnf",
    ".s3cfg",
    ".boto",
    ".m2/settings.xml",
    ".m2/settings-security.xml",
    ".gradle/gradle.properties",
    ".gem/credentials",
    ".pip/pip.conf",
    ".config/pip/pip.conf",
    ".config/containers/auth.json",
    ".config/rclone/rclone.conf",
    ".huggingface/token",
    ".cache/huggingface/token",
    ".bash_history",
    ".zsh_history",
    ".python_history",
    ".psql_history",
    ".mysql_history",
)


@needs_bwrap
async def test_b2_more_host_credential_stores_and_histories_are_masked(tmp_path, monkeypatch):
    """B-2 (no host secrets in the sandbox): database password files, Maven/Gradle/RubyGems/pip/
    podman registry credentials, rclone and Hugging Face tokens and shell/REPL histories under the
    host's $HOME were readable by a sandboxed command (as root on the host: owner checks pass).
    Neighbours that are no secret (the Maven repository cache) stay readable."""
    secret = "token-" + secrets.token_hex(8)
    with host_visible_dir() as home:
        for rel in _MORE_STORES:
            (home / rel).parent.mkdir(parents=True, exist_ok=True)
            (home / rel).write_text(f"{rel} {secret}\n")
        (home / ".m2" / "repository").mkdir()
        (home / ".m2" / "repository" / "cached.pom").write_text("ordinary file")
        monkeypatch.setenv("HOME", str(home))
        names = " ".join(f'"$HOME/{rel}"' for rel in _MORE_STORES)
        command = f'cat {names} 2>/dev/null; cat "$HOME/.m2/repository/cached.pom"'
        result = await bash(governed(tmp_path), command=command)
        assert secret not in result.output and "ordinary file" in result.output, result.output
        control = await bash(host(tmp_path), command=command)
        assert control.output.count(secret) == len(_MORE_STORES)


@needs_bwrap
async def test_b2_credentials_in_the_accounts_own_home_are_masked_when_home_points_elsewhere(
    tmp_path, monkeypatch
):
    """B-2: only ``$HOME`` was masked. A worker started as root with ``HOME=/app`` (containers,
    service units) left ``/root/.ssh`` and ``/root/.netrc`` readable to the sandbox, whose uid is the
    host's: the account's home from the user database is masked too."""
    from tools.bash import mounts

    secret = "token-" + secrets.token_hex(8)
    with host_visible_dir() as base:
        account_home, env_home = base / "account", base / "env"
        (account_home / ".ssh").mkdir(parents=True)
        (account_home / ".ssh" / "id_ed25519").write_text(secret)
        (account_home / ".netrc").write_text(f"machine example.com password {secret}")
        (account_home / "notes.txt").write_text("ordinary file")
        env_home.mkdir()
        monkeypatch.setenv("HOME", str(env_home))
        monkeypatch.setattr(mounts, "_account_home", lambda: str(account_home), raising=False)
        command = (
            f"cat {account_home}/.netrc {account_home}/.ssh/id_ed25519 2>&1; cat {account_home}/notes.txt"
        )
        result = await bash(governed(tmp_path), command=command)
        assert secret not in result.output and "ordinary file" in result.output, result.output
        control = await bash(host(tmp_path), command=command)
        assert control.output.count(secret) == 2


@needs_bwrap
@pytest.mark.skipif(
    os.getuid() != 0 or not os.path.isdir("/etc/ssh"), reason="needs a root host with /etc/ssh"
)
async def test_b2_ssh_host_private_keys_are_masked(tmp_path):
    """B-2: the sandbox's uid is the host's — root on CI and in containers — so root-only files such
    as the SSH host keys (``/etc/ssh/ssh_host_*_key``: impersonate the host) were readable."""
    secret = "hostkey-" + secrets.token_hex(8)
    key = f"/etc/ssh/ssh_host_a3stest{secrets.token_hex(4)}_key"
    fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, secret.encode())
    os.close(fd)
    try:
        result = await bash(governed(tmp_path), command=f"cat {key} 2>&1; echo done")
        assert secret not in result.output and "done" in result.output
        control = await bash(host(tmp_path), command=f"cat {key}")
        assert secret in control.output
    finally:
        os.unlink(key)
