"""``a3s-fleet tool read|ls`` as a one-tool session (issue 13 item 7; ``orchestrator.cli_direct``).

When nothing configures the process, the CLI runs a read-only workspace tool in a session whose
surface is that one tool, assembled as every session is (``flows.session_kernel``) and called through
the one ``Kernel.invoke`` pipeline (K-3). These tests prove the user sees exactly what the full
session gives — output, exit code, metadata, projection evidence and binding (R-2/R-3), artifacts,
typed errors (K-8) — and that any ``A3S_*`` setting (here an empty ``A3S_EXTRA_TOOLS``, which changes
nothing else) sends the call down the full path instead.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BIN = [sys.executable, "-m", "orchestrator.cli"]
FULL = {"A3S_EXTRA_TOOLS": ""}  # any A3S_* setting: the full session


def run(
    args: list[str], cwd: Path, extra_env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("A3S_")}
    env.update(extra_env or {})
    return subprocess.run([*BIN, *args], cwd=cwd, capture_output=True, text=True, env=env, timeout=60)


CASES = [
    ("read", {"file_path": "README.md"}, "conservative"),
    ("read", {"file_path": "notes.txt", "offset": 10, "limit": 5}, "conservative"),
    ("read", {"files": [{"path": "README.md"}, {"path": "nope.txt"}, {"path": "notes.txt", "limit": 3}]}, "conservative"),
    ("read", {"file_path": "big.log"}, "context-efficient"),  # projected: folded, head + tail, artifact
    ("read", {"file_path": "big.log"}, "conservative"),
    ("read", {"file_path": "nope.txt"}, "conservative"),  # not_found
    ("read", {"file_path": "README.md", "limit": 0}, "conservative"),  # invalid_argument
    ("read", {"file_path": "../outside"}, "conservative"),  # outside the workspace
    ("read", {}, "conservative"),
    ("read", {"file_path": "pic.png"}, "conservative"),  # an attachment stored as an artifact
    ("ls", {}, "conservative"),
    ("ls", {"path": "src"}, "context-efficient"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "args", "policy"), CASES)
def test_k3_the_one_tool_session_answers_exactly_as_the_full_session(
    workspace: Path, name: str, args: dict[str, object], policy: str
) -> None:
    (workspace / "big.log").write_text("".join(f"step {i // 50} ok\n" for i in range(40_000)))
    (workspace / "pic.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    argv = ["tool", name, json.dumps(args), "--json", "--policy", policy]
    direct = run(argv, workspace)
    full = run(argv, workspace, FULL)
    assert (direct.returncode, direct.stderr) == (full.returncode, full.stderr)
    assert json.loads(direct.stdout) == json.loads(full.stdout)
    result = json.loads(direct.stdout)
    assert "a3s_tool_result_transform_binding" in result["metadata"]  # projected with evidence
    assert "a3s_tool_result_evidence" in result["metadata"]


def test_the_direct_path_stores_artifacts_where_the_cli_reads_them(workspace: Path) -> None:
    """An image read keeps its bytes as an artifact in the workspace's file store (as a session does)."""
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
    (workspace / "pic.png").write_bytes(png)
    out = run(["tool", "read", '{"file_path": "pic.png"}', "--json"], workspace)
    attachment = json.loads(out.stdout)["metadata"]["attachment"]
    assert attachment["media_type"] == "image/png" and attachment["bytes"] == len(png)
    stored = subprocess.run(
        [*BIN, "artifact", attachment["artifact_uri"]], cwd=workspace, capture_output=True, timeout=60
    )
    assert stored.returncode == 0 and stored.stdout == png


def test_k8_direct_failures_are_one_line_like_the_full_path(workspace: Path) -> None:
    for argv in (
        ["tool", "read", '{"file_path": "README.md"}', "--workspace", str(workspace / "missing")],
        ["tool", "ls", "{}", "--workspace", "/definitely/not/here"],
    ):
        direct, full = run(argv, workspace), run(argv, workspace, FULL)
        assert direct.returncode == full.returncode == 2
        assert direct.stderr == full.stderr and len(direct.stderr.strip().splitlines()) == 1


def test_a_read_only_git_workspace_and_other_tools_take_the_full_path(workspace: Path) -> None:
    """`git:` names and tools other than read/ls are not direct: the answer is the full session's."""
    subprocess.run(["git", "init", "-q"], cwd=workspace, check=True)
    subprocess.run(["git", "add", "."], cwd=workspace, check=True)
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"], cwd=workspace, check=True
    )
    out = run(["tool", "read", '{"file_path": "README.md"}', "-w", "git:.@HEAD"], workspace)
    assert out.returncode == 0 and "hello world" in out.stdout
    typo = run(["tool", "reed", "{}"], workspace)
    assert typo.returncode == 2 and "did you mean read" in typo.stderr


def test_any_a3s_setting_in_any_case_takes_the_full_path() -> None:
    from orchestrator.cli_direct import direct_eligible

    assert direct_eligible(
        "read", ".", {"PATH": "/bin", "A3S_FLEET_LOG_LEVEL": "debug", "A3S_MODEL_CACHE": "/c"}
    )
    assert direct_eligible("read", ".", {"A3S_NET_ALLOW": "10.0.0.0/8", "a3s_ca_bundle": "/etc/ca.pem"})
    assert direct_eligible("ls", "/src/app", {})
    for env in ({"A3S_BROKER_URL": "redis://x"}, {"a3s_broker_url": "redis://x"}, {"A3S_EXTRA_TOOLS": ""}):
        assert not direct_eligible("read", ".", env)
    assert not direct_eligible("read", "git:.@HEAD", {})
    assert not direct_eligible("bash", ".", {})
