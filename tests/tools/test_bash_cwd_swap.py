"""An approved (escalated, host-run) command starts in the directory that was checked (SPEC B-6, B-2).

The session cwd is checked to be a directory inside the workspace, then the command is started
there. A concurrent sandboxed process can swap that directory for a symlink to outside between the
two; the command must then still start in the checked directory (held by descriptor), never
outside. The swap is made deterministic here: it happens right before the spawn, after the check.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernel.origin import Origin
from kernel.testing import make_context
from kernel.workspace import LocalWorkspace
from tools import _proc
from tools.bash import TOOL, runner
from tools.bash.sandbox import UnavailableSandbox

SWAPPER = """
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
dfd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
a, b, end = sys.argv[2].encode(), sys.argv[3].encode(), time.monotonic() + float(sys.argv[4])
swaps = 0
print("ready", flush=True)
while time.monotonic() < end:
    for _ in range(100):
        if libc.renameat2(dfd, a, dfd, b, 2) != 0:  # RENAME_EXCHANGE
            sys.exit("renameat2 failed: errno %d" % ctypes.get_errno())
        swaps += 1
print(swaps, flush=True)
"""


def _real(path: Path) -> str:
    return os.path.realpath(path)


def _start_swapper(root: Path, a: str, b: str, seconds: float) -> subprocess.Popen[str]:
    swapper = subprocess.Popen(
        [sys.executable, "-c", SWAPPER, str(root), a, b, str(seconds)], stdout=subprocess.PIPE, text=True
    )
    assert swapper.stdout is not None and swapper.stdout.readline().strip() == "ready"
    return swapper


def _swap_before_spawn(
    monkeypatch: pytest.MonkeyPatch, directory: Path, moved: Path, outside: Path
) -> list[int]:
    """Wrap the runner's ``spawn``: first replace ``directory`` by a symlink to ``outside``."""
    real_spawn = runner.spawn
    swaps: list[int] = []

    def swapping_spawn(*args, **kwargs):
        os.rename(directory, moved)
        os.symlink(outside, directory)
        swaps.append(1)
        return real_spawn(*args, **kwargs)

    monkeypatch.setattr(runner, "spawn", swapping_spawn)
    return swaps


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied_fallback"])
async def test_b6_escalated_command_cwd_swapped_for_a_symlink_still_runs_in_the_checked_directory(
    tmp_path, monkeypatch, tied
):
    root = tmp_path / "ws"
    (root / "sub").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    if not tied:  # the Popen fallback (no spawn helper) must hold the same line
        monkeypatch.setattr(_proc, "_get_helper", lambda: None)
    ctx = make_context(
        LocalWorkspace(root),
        tool_name="bash",
        origin=Origin.AGENT,
        services={"sandbox": UnavailableSandbox()},
    )
    ctx.session_state["bash"] = {"cwd": "sub"}
    swaps = _swap_before_spawn(monkeypatch, root / "sub", root / "sub-moved", outside)

    params = TOOL.validate(
        {
            "command": "/bin/pwd -P; touch planted",  # getcwd(2): where it runs
            "sandbox_permissions": "require_escalated",
            "justification": "needs the host",
        }
    )
    result = await TOOL.run(ctx, params)

    assert swaps == [1]
    assert not (outside / "planted").exists(), result.output
    assert (root / "sub-moved" / "planted").exists(), result.output
    assert result.output.splitlines()[0] == _real(root / "sub-moved")
    assert result.metadata["cwd"] == "sub-moved"


async def test_b6_escalated_commands_under_a_real_directory_symlink_swap_never_start_outside(tmp_path):
    """A separate process exchanges ``sub`` and a symlink to outside (atomically, in a loop) while
    escalated commands start in session cwd ``sub``: none starts outside, none plants a file there."""
    root = tmp_path / "ws"
    (root / "sub").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, root / "link")
    ws_real = _real(root)
    swapper = _start_swapper(root, "sub", "link", 4.0)
    try:
        ctx = make_context(
            LocalWorkspace(root),
            tool_name="bash",
            origin=Origin.AGENT,
            services={"sandbox": UnavailableSandbox()},
        )
        params = TOOL.validate(
            {
                "command": "/bin/pwd -P; touch planted",
                "sandbox_permissions": "require_escalated",
                "justification": "host",
            }
        )
        places: list[str] = []
        while swapper.poll() is None and len(places) < 400:
            ctx.session_state["bash"] = {"cwd": "sub"}
            result = await TOOL.run(ctx, params)
            places.append(result.output.splitlines()[0] if result.output else "")
        swaps = int(swapper.communicate(timeout=30)[0].strip() or 0)
    finally:
        if swapper.poll() is None:
            swapper.kill()
            swapper.wait()
    assert swaps > 1000 and len(places) >= 20
    assert not (outside / "planted").exists()
    assert all(p == ws_real or p.startswith(ws_real + "/") for p in places), [
        p for p in places if ws_real not in p
    ]
    # Not vacuous: some commands did start in the swapped directory itself.
    assert any(p != ws_real for p in places)
