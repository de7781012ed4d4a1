"""Sandboxed commands are the OOM killer's first choice (SPEC B-2, K-6; docs/sandbox.md "Processes and limits").

A memory-hungry model command must be killed before the worker or agent that runs it: the whole
sandboxed tree runs with ``oom_score_adj`` 1000 (inherited by children). The host-direct path,
which runs the host's own trusted commands, keeps the host's value.
"""

from __future__ import annotations

from tests.tools.bash_sandbox_support import bash, governed, host, needs_bwrap, stdout

pytestmark = needs_bwrap


async def test_b2_sandboxed_command_and_its_children_have_oom_score_adj_1000(tmp_path):
    result = await bash(
        governed(tmp_path),
        command="cat /proc/self/oom_score_adj; sh -c 'cat /proc/self/oom_score_adj'; "
        "(sleep 0.1 & cat /proc/$!/oom_score_adj; wait)",
    )
    assert result.exit_code == 0, result.output
    assert stdout(result).split() == ["1000", "1000", "1000"]


async def test_b2_sandboxed_command_cannot_rank_itself_below_the_host(tmp_path):
    # A command may lower its score back to the host's floor (0) — the kernel allows that without
    # privileges — but never below it, where it would be spared ahead of the worker.
    result = await bash(
        governed(tmp_path),
        command="echo -500 > /proc/self/oom_score_adj 2>/dev/null && echo lowered || echo refused; "
        "cat /proc/self/oom_score_adj",
    )
    assert stdout(result).split() == ["refused", "1000"]


def _own_oom_score_adj() -> str:
    with open("/proc/self/oom_score_adj") as fh:
        return fh.read().strip()


async def test_b2_host_direct_command_keeps_the_hosts_oom_score_adj(tmp_path):
    ours = _own_oom_score_adj()
    assert ours != "1000"  # else this test could not tell the two paths apart
    result = await bash(host(tmp_path), command="cat /proc/self/oom_score_adj")
    assert stdout(result).strip() == ours
