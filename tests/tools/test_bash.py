"""The bash tool run directly with real subprocesses (SPEC B-2, K-6; REFERENCE 4.7).

Process-leak checks scan ``/proc/*/cmdline`` for a unique ``sleep`` argument each test makes up.
"""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import time
from pathlib import Path

import pygit2
import pytest

from kernel.capabilities import ToolCapabilities
from kernel.errors import InvalidArgument
from kernel.origin import Origin
from kernel.result import ToolResult
from kernel.testing import make_context
from kernel.workspace import LocalWorkspace
from tools.bash import TOOL
from tools.bash.sandbox import UnavailableSandbox


def _tag() -> str:
    """A unique sleep duration, e.g. '300.428193', that names this test's processes."""
    return f"300.{secrets.randbelow(10**6):06d}"


def _alive(marker: str) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                args = fh.read().split(b"\0")
        except OSError:
            continue
        if marker.encode() in args:
            pids.append(int(entry))
    return pids


async def _none_alive(marker: str, within_s: float = 1.0) -> bool:
    end = time.monotonic() + within_s
    while _alive(marker):
        if time.monotonic() > end:
            return False
        await asyncio.sleep(0.02)
    return True


def _real(path: Path) -> str:
    return os.path.realpath(path)


def _ctx(root: Path, **kw):
    return make_context(LocalWorkspace(root), tool_name="bash", **kw)


async def _bash(ctx, **args) -> ToolResult:
    return await TOOL.run(ctx, TOOL.validate(args))


def _body(text: str) -> str:
    return "".join(line for line in text.split("\n") if not line.startswith("[command output truncated"))


# --- output bounds (B-2) -------------------------------------------------------------------------


async def test_b2_fifty_megabytes_stay_within_the_budget_with_exact_counts(tmp_path):
    result = await _bash(_ctx(tmp_path), command="yes | head -c 50000000")
    out = result.metadata["output"]
    assert result.exit_code == 0
    assert out["total_bytes"] == 50_000_000
    assert out["captured_bytes"] == 100 * 1024
    assert out["truncated"] is True and out["timed_out"] is False
    assert out["stdout"]["total_bytes"] == 50_000_000 and out["stderr"]["total_bytes"] == 0
    # The model-facing text fits the 100 KiB projection cap with its marker, and ends with the tail.
    shown = re.search(
        r"\[command output truncated: retained the first (\d+) and last (\d+) of 50000000 bytes\]",
        result.output,
    )
    assert shown is not None and int(shown[1]) == 64 * 1024
    assert 36 * 1024 - 200 < int(shown[2]) <= 36 * 1024
    assert len(result.output.encode()) <= 100 * 1024
    assert result.output.endswith("y\n")
    assert out["stdout"]["text"].count("[command output truncated") == 1


async def test_b2_both_streams_share_one_budget_and_stay_separately_readable(tmp_path):
    command = "head -c 300000 /dev/zero | tr '\\0' o; head -c 200000 /dev/zero | tr '\\0' e >&2"
    result = await _bash(_ctx(tmp_path), command=command)
    out = result.metadata["output"]
    assert out["total_bytes"] == 500_000
    assert out["stdout"]["total_bytes"] == 300_000 and out["stderr"]["total_bytes"] == 200_000
    assert (
        out["stdout"]["captured_bytes"] + out["stderr"]["captured_bytes"]
        == out["captured_bytes"]
        == 100 * 1024
    )
    assert set(_body(out["stdout"]["text"])) == {"o"}
    assert set(_body(out["stderr"]["text"])) == {"e"}
    assert result.output.startswith("[stdout]\n") and "\n[stderr]\n" in result.output


async def test_b2_small_streams_are_labelled_and_separately_readable(tmp_path):
    result = await _bash(_ctx(tmp_path), command="echo out; echo err >&2")
    assert result.metadata["output"]["stdout"]["text"] == "out\n"
    assert result.metadata["output"]["stderr"]["text"] == "err\n"
    assert result.output == "[stdout]\nout\n[stderr]\nerr\n"
    assert result.metadata["output"]["truncated"] is False


async def test_b2_output_is_streamed_as_deltas_per_stream(tmp_path):
    deltas: list = []
    await _bash(_ctx(tmp_path, deltas=deltas), command="echo live")
    assert {"stream": "stdout", "text": "live\n"} in deltas


# --- deadline, timeout, cancel (B-2, K-6) --------------------------------------------------------


async def test_b2_k6_timeout_kills_the_whole_group_and_leaves_nothing_behind(tmp_path):
    tag = _tag()
    started = time.monotonic()
    result = await _bash(_ctx(tmp_path), command=f"sleep {tag} & sleep {tag}", timeout=1000)
    assert time.monotonic() - started < 3
    assert result.exit_code == 1
    assert result.error_kind == {"type": "timeout", "op": "bash", "duration_ms": 1000}
    assert result.output.startswith("Command timed out after 1000ms")
    assert result.metadata["output"]["timed_out"] is True
    assert await _none_alive(tag)


async def test_b2_grandchild_holding_the_pipe_cannot_extend_the_deadline(tmp_path):
    tag = _tag()
    started = time.monotonic()
    result = await _bash(_ctx(tmp_path), command=f"(sleep {tag} &); echo started", timeout=1000)
    assert time.monotonic() - started < 3
    assert result.error_kind is not None and result.error_kind["type"] == "timeout"
    assert result.metadata["exit_code"] == 0  # the shell itself had exited; the pipe kept us waiting
    assert "started" in result.metadata["output"]["stdout"]["text"]
    assert await _none_alive(tag)


async def test_k6_cancelled_command_never_reaches_its_side_effect(tmp_path):
    tag = f"1.{secrets.randbelow(10**6):06d}"
    task = asyncio.create_task(_bash(_ctx(tmp_path), command=f"sleep {tag}; touch f"))
    await asyncio.sleep(0.3)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await _none_alive(tag, within_s=0.5)
    await asyncio.sleep(1.2)
    assert not (tmp_path / "f").exists()


async def test_b2_background_process_does_not_outlive_a_normal_exit(tmp_path):
    tag = _tag()
    started = time.monotonic()
    result = await _bash(_ctx(tmp_path), command=f"sleep {tag} >/dev/null 2>&1 & echo bg")
    assert result.exit_code == 0 and result.output == "bg\n"
    assert time.monotonic() - started < 2
    assert await _none_alive(tag)


async def test_b2_timeout_below_minimum_is_clamped_to_one_second(tmp_path):
    result = await _bash(_ctx(tmp_path), command="sleep 0.3; echo ok", timeout=10)
    assert result.exit_code == 0 and result.output == "ok\n"
    assert result.metadata["timeout_ms"] == 1000


async def test_b2_default_timeout_is_two_minutes_bounded_by_the_call_deadline(tmp_path):
    result = await _bash(_ctx(tmp_path, timeout_s=0.5), command="sleep 5")
    assert result.metadata["timeout_ms"] == 120_000
    assert result.error_kind["type"] == "timeout" and result.error_kind["duration_ms"] <= 500


# --- process environment -------------------------------------------------------------------------


async def test_b2_environment_disables_prompts_and_pagers(tmp_path):
    result = await _bash(_ctx(tmp_path), command='echo "$CI|$GIT_TERMINAL_PROMPT|$PAGER"')
    assert result.output == "1|0|cat\n"


async def test_b2_stdin_is_dev_null(tmp_path):
    started = time.monotonic()
    result = await _bash(_ctx(tmp_path), command='readlink /proc/self/fd/0; cat; read -r x; echo "read=$?"')
    assert result.output == "/dev/null\nread=1\n"
    assert time.monotonic() - started < 2


async def test_b2_own_session_and_process_group(tmp_path):
    result = await _bash(_ctx(tmp_path), command="ps -o pid=,pgid=,sid= -p $$")
    pid, pgid, sid = result.output.split()
    assert pid == pgid == sid
    assert int(pgid) != os.getpgid(0)


async def test_b2_nonzero_exit_is_a_failed_result_with_the_real_code_in_metadata(tmp_path):
    result = await _bash(_ctx(tmp_path), command="echo partial; exit 7")
    assert result.exit_code == 1 and result.error_kind is None
    assert result.metadata["exit_code"] == 7
    assert result.output == "partial\n[exit code 7]"


# --- session cwd -----------------------------------------------------------------------------------


async def test_b2_cwd_persists_across_calls_and_never_leaves_the_workspace(tmp_path):
    state: dict = {}
    ctx = _ctx(tmp_path, session_state=state)
    first = await _bash(ctx, command="mkdir -p a/b && cd a/b")
    assert first.metadata["cwd"] == "a/b" and state["bash"]["cwd"] == "a/b"
    second = await _bash(_ctx(tmp_path, session_state=state), command="pwd -P")
    assert second.output == f"{_real(tmp_path)}/a/b\n"
    outside = await _bash(_ctx(tmp_path, session_state=state), command="cd / && pwd")
    assert outside.output == "/\n" and outside.metadata["cwd"] == "a/b"
    up = await _bash(_ctx(tmp_path, session_state=state), command="cd ..")
    assert up.metadata["cwd"] == "a"
    gone = await _bash(_ctx(tmp_path, session_state=state), command="cd .. && rm -rf a")
    assert gone.metadata["cwd"] == "."
    (tmp_path / "a").mkdir()
    state["bash"]["cwd"] = "a/vanished"
    fallback = await _bash(_ctx(tmp_path, session_state=state), command="pwd -P")
    assert fallback.output == f"{_real(tmp_path)}\n"


async def test_b2_cwd_of_a_timed_out_or_exiting_command(tmp_path):
    state: dict = {}
    (tmp_path / "d").mkdir()
    killed = await _bash(_ctx(tmp_path, session_state=state), command="cd d; sleep 5", timeout=1000)
    assert killed.metadata["output"]["timed_out"] and killed.metadata["cwd"] == "."
    exited = await _bash(_ctx(tmp_path, session_state=state), command="cd d; exit 4")
    assert exited.metadata["exit_code"] == 4 and exited.metadata["cwd"] == "d"


# --- changed_paths -----------------------------------------------------------------------------------


def _commit_all(root: Path) -> None:
    repo = pygit2.Repository(str(root))
    repo.index.add_all()
    repo.index.write()
    sig = pygit2.Signature("t", "t@example.com")
    repo.create_commit("HEAD", sig, sig, "init", repo.index.write_tree(), [])


async def test_b2_changed_paths_from_git_status(tmp_path):
    pygit2.init_repository(str(tmp_path))
    (tmp_path / "tracked.txt").write_text("one\n")
    (tmp_path / "keep.txt").write_text("keep\n")
    _commit_all(tmp_path)
    state: dict = {}
    first = await _bash(
        _ctx(tmp_path, session_state=state), command="echo two >> tracked.txt; echo n > new.txt"
    )
    assert first.metadata["changed_paths_source"] == "git"
    assert first.metadata["changed_paths"] == ["new.txt", "tracked.txt"]
    # Already dirty before the call, dirty again after: still reported (size/mtime differ).
    again = await _bash(_ctx(tmp_path, session_state=state), command="echo three >> tracked.txt")
    assert again.metadata["changed_paths"] == ["tracked.txt"]
    idle = await _bash(_ctx(tmp_path, session_state=state), command="cat keep.txt")
    assert idle.metadata["changed_paths"] == []


async def test_b2_changed_paths_from_mtime_snapshot_outside_git(tmp_path):
    (tmp_path / "old.txt").write_text("x")
    result = await _bash(_ctx(tmp_path), command="echo x > n.txt; mkdir d; echo y > d/m.txt; rm old.txt")
    assert result.metadata["changed_paths_source"] == "mtime"
    assert result.metadata["changed_paths"] == ["d/m.txt", "n.txt", "old.txt"]


# --- parameters, confirmation, fail-closed ------------------------------------------------------


def test_b2_escalation_without_justification_is_invalid_argument():
    with pytest.raises(InvalidArgument) as err:
        TOOL.validate({"command": "ls", "sandbox_permissions": "require_escalated"})
    assert "justification is required" in err.value.message
    with pytest.raises(InvalidArgument):
        TOOL.validate({"command": "ls", "sandbox_permissions": "require_escalated", "justification": "  "})
    with pytest.raises(InvalidArgument):
        TOOL.validate({"command": "ls", "job_action": "detach"})
    with pytest.raises(InvalidArgument):
        TOOL.validate({"command": "a\x00b"})


def test_k5_declaration_subject_requirements_and_confirmation():
    plain = TOOL.validate({"command": "ls -la"})
    escalated = TOOL.validate(
        {"command": "ls", "sandbox_permissions": "require_escalated", "justification": "needs host"}
    )
    assert TOOL.requires_confirmation(escalated) is True
    assert TOOL.requires_confirmation(plain) is False
    assert TOOL.subject(plain) == "ls -la"
    assert TOOL.requires == frozenset({"exec"})
    assert TOOL.capabilities(plain) == ToolCapabilities.conservative()
    schema = TOOL.json_schema
    assert schema["required"] == ["command"] and schema["additionalProperties"] is False
    assert set(schema["properties"]) == {"command", "timeout", "sandbox_permissions", "justification"}


async def test_b2_governed_call_without_a_sandbox_fails_closed(tmp_path):
    ctx = _ctx(tmp_path, origin=Origin.AGENT, services={"sandbox": UnavailableSandbox()})
    result = await _bash(ctx, command="touch ran")
    assert result.exit_code == 1
    assert "bash requires a configured sandbox" in result.output
    assert result.metadata["sandbox_available"] is False and result.metadata["sandboxed"] is False
    assert result.error_kind["type"] == "unsupported"
    assert not (tmp_path / "ran").exists()


async def test_b2_bash_sandbox_setting_never_weakens_governed_calls(tmp_path):
    class Settings:
        bash_sandbox = "never"

    governed = _ctx(tmp_path, origin=Origin.GOVERNED_NESTED, settings=Settings())
    refused = await _bash(governed, command="touch ran")
    assert refused.metadata["sandbox_available"] is False and not (tmp_path / "ran").exists()
    host = await _bash(_ctx(tmp_path, settings=Settings()), command="touch ran")
    assert host.exit_code == 0 and host.metadata["sandboxed"] is False and (tmp_path / "ran").exists()


async def test_b2_always_setting_puts_host_direct_calls_under_the_sandbox_rule(tmp_path):
    class Settings:
        bash_sandbox = "always"

    ctx = _ctx(tmp_path, settings=Settings(), services={"sandbox": UnavailableSandbox()})
    result = await _bash(ctx, command="touch ran")
    assert "bash requires a configured sandbox" in result.output and not (tmp_path / "ran").exists()


async def test_b2_justified_escalation_runs_unsandboxed_on_the_host(tmp_path):
    ctx = _ctx(tmp_path, origin=Origin.AGENT, services={"sandbox": UnavailableSandbox()})
    result = await _bash(
        ctx,
        command="touch ran",
        sandbox_permissions="require_escalated",
        justification="needs the host toolchain",
    )
    assert result.exit_code == 0 and result.metadata["sandboxed"] is False
    assert (tmp_path / "ran").exists()


async def test_b2_unsupported_without_a_local_exec_workspace(tmp_path):
    ctx = make_context(LocalWorkspace(tmp_path, writable=False), tool_name="bash")
    from kernel.errors import Unsupported

    with pytest.raises(Unsupported):
        await _bash(ctx, command="true")


async def test_b2_k8_a_cwd_report_with_a_nul_byte_keeps_the_cwd(tmp_path):
    """B-2, K-8: the command can write its own line on the cwd-report pipe (its EXIT trap is the
    command's to replace); a path with a NUL byte made ``realpath`` raise ValueError out of the
    call (the command's output lost). Such a report is unusable: the session keeps its cwd."""
    state: dict = {}
    (tmp_path / "d").mkdir()
    first = await _bash(_ctx(tmp_path, session_state=state), command="cd d")
    assert first.metadata["cwd"] == "d"
    # The report pipe is the shell's fd >= 200 (runner.CWD_REPORT_FD_MIN).
    command = (
        "trap 'for n in $(ls /proc/$$/fd); do [ $n -ge 200 ] && printf \"/a\\0b\\n\" >&$n; done' EXIT; "
        "echo ran"
    )
    result = await _bash(_ctx(tmp_path, session_state=state), command=command)
    assert result.exit_code == 0 and result.output == "ran\n"
    assert result.metadata["cwd"] == "d" and state["bash"]["cwd"] == "d"


async def test_b2_changed_paths_are_bounded_in_bytes_too(tmp_path):
    """B-2 (bounded results): 1,000 paths of ~4 KiB (deep 250-byte names) were 3.8 MB of metadata on
    a call whose output is capped at 100 KiB; the list now stops at 64 KiB of paths, flagged."""
    deep = "/".join(["d" * 250] * 4)
    command = (
        f"mkdir -p {deep} && cd {deep} && for i in $(seq 100); do : > $i$(printf 'x%.0s' $(seq 240)); done"
    )
    result = await _bash(_ctx(tmp_path), command=command)
    assert result.exit_code == 0, result.output
    shown = result.metadata["changed_paths"]
    assert 0 < len(shown) < 100 and result.metadata["changed_paths_truncated"] is True
    assert sum(len(p.encode()) for p in shown) <= 64 * 1024
    few = await _bash(_ctx(tmp_path), command="touch one two")
    assert few.metadata["changed_paths"] == ["one", "two"] and "changed_paths_truncated" not in few.metadata


async def test_b2_k8_a_cwd_report_through_a_deep_symlink_chain_keeps_the_cwd(tmp_path):
    """B-2, K-8: ``os.path.realpath`` recurses once per symlink: a reported cwd through a chain of
    1,500 links (made by the command) raised RecursionError out of the call. Not usable: kept."""
    state: dict = {}
    (tmp_path / "d").mkdir()
    first = await _bash(_ctx(tmp_path, session_state=state), command="cd d")
    assert first.metadata["cwd"] == "d"
    command = (
        "mkdir t; ln -s t l0; for i in $(seq 1 1500); do ln -s l$((i-1)) l$i; done; "
        "trap 'for n in $(ls /proc/$$/fd); do [ $n -ge 200 ] && echo \"$PWD/l1500\" >&$n; done' EXIT; "
        "echo ran"
    )
    result = await _bash(_ctx(tmp_path, session_state=state), command=command)
    assert result.exit_code == 0 and result.output == "ran\n"
    assert result.metadata["cwd"] == "d" and state["bash"]["cwd"] == "d"
