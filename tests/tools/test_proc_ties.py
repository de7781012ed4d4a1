"""Child processes die with the process that started them (issue 15 item 7; SPEC K-6, B-2).

``tools._proc.spawn`` runs each command under a supervisor (a child subreaper) whose control pipe
only the spawning process holds: its death — SIGKILL included — or ``release()`` kills the whole
tree, ``setsid`` daemons and double forks included. Processes are found by a unique ``sleep``
argument each test makes up.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from kernel.testing import make_context
from kernel.workspace import LocalWorkspace
from tools import _proc
from tools.bash import TOOL
from tools.bash.sandbox import default_sandbox

ROOT = Path(__file__).resolve().parents[2]
needs_tie = pytest.mark.skipif(not _proc.tied(), reason="the spawn helper cannot run here")
needs_rg = pytest.mark.skipif(
    subprocess.run(["which", "rg"], capture_output=True).returncode != 0, reason="no rg"
)


def _tag() -> str:
    return f"300.{secrets.randbelow(10**6):06d}"


def _alive(marker: str) -> list[int]:
    """Live ``sleep``/``rg`` processes with ``marker`` among their arguments."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                args = fh.read().split(b"\0")
            with open(f"/proc/{entry}/stat", "rb") as fh:
                state = fh.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in args[1:] and os.path.basename(args[0]) in (b"sleep", b"rg") and state != b"Z":
            pids.append(int(entry))
    return pids


def _wait_for(predicate, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


ESCAPES = "sleep {t} & setsid sleep {t} & (sleep {t} &); nohup sleep {t} >/dev/null 2>&1 & sleep {t}"


@needs_tie
def test_k6_release_kills_setsid_and_double_forked_descendants():
    tag = _tag()
    proc = _proc.spawn(["bash", "-c", ESCAPES.format(t=tag)], stdout=_proc.DEVNULL, stderr=_proc.DEVNULL)
    try:
        assert _wait_for(lambda: len(_alive(tag)) == 5, 10), _alive(tag)
        proc.release()
        assert proc.wait_finished(10)
        assert _alive(tag) == []
        assert proc.poll() == -signal.SIGKILL
    finally:
        proc.close()


@needs_tie
def test_k6_child_spawned_from_a_thread_outlives_that_thread():
    # PR_SET_PDEATHSIG would fire when the *thread* that forked exits; our tie is the process's.
    tag = _tag()
    box: list[object] = []
    worker = threading.Thread(target=lambda: box.append(_proc.spawn(["sleep", tag], stdout=_proc.DEVNULL)))
    worker.start()
    worker.join()
    proc = box[0]
    assert isinstance(proc, _proc.TiedProcess)
    try:
        time.sleep(0.3)
        assert _alive(tag) and proc.poll() is None
    finally:
        proc.close()
    assert _wait_for(lambda: not _alive(tag), 10)


@needs_tie
def test_k6_spawn_reports_exit_codes_output_and_start_errors(tmp_path):
    proc = _proc.spawn(["bash", "-c", "pwd; echo err >&2; exit 7"], cwd=tmp_path, env={"PATH": os.defpath})
    try:
        assert proc.stdout is not None and proc.stderr is not None
        assert proc.stdout.read() == f"{os.path.realpath(tmp_path)}\n".encode()
        assert proc.stderr.read() == b"err\n" and proc.wait(10) == 7
    finally:
        proc.close()
    with pytest.raises(FileNotFoundError):
        _proc.spawn(["a3s-no-such-program"], env={"PATH": os.defpath})
    with pytest.raises(FileNotFoundError, match="chdir"):
        _proc.spawn(["true"], cwd=tmp_path / "missing", env={"PATH": os.defpath})


_CHILD = textwrap.dedent(
    """
    import asyncio, os, subprocess, sys
    from kernel.origin import Origin
    from kernel.testing import make_context
    from kernel.workspace import LocalWorkspace
    from tools.bash import TOOL
    from tools.search.grep import Guard, ScanResult
    from tools.search.grep_rg import RipgrepEngine

    ws, tag, fifo, mode = sys.argv[1:5]
    command = sys.argv[5]

    def rg_scan():
        # As the search tool runs ripgrep: from a worker thread, through the rg engine.
        import threading
        guard = Guard(600, threading.Event(), "search.grep")
        RipgrepEngine("rg", read_parents=False)._run_raw(
            LocalWorkspace(ws), ["rg", "--", tag, fifo], guard, lambda chunk: None, ScanResult()
        )

    async def main():
        if mode == "popen":  # the control: what a bare Popen leaves behind
            subprocess.Popen(["bash", "-c", command], start_new_session=True)
            print("ready", flush=True)
            await asyncio.sleep(600)
        host = make_context(LocalWorkspace(ws), tool_name="bash", timeout_s=600)
        calls = [TOOL.run(host, TOOL.validate({"command": command, "timeout": 600000})), asyncio.to_thread(rg_scan)]
        if mode == "sandbox":
            boxed = make_context(LocalWorkspace(ws), tool_name="bash", origin=Origin.AGENT, timeout_s=600)
            calls.append(TOOL.run(boxed, TOOL.validate({"command": command, "timeout": 600000})))
        print("ready", flush=True)
        await asyncio.gather(*calls)

    asyncio.run(main())
    """
)


def _run_child(tmp_path: Path, mode: str, tag: str) -> tuple[subprocess.Popen[bytes], Path]:
    fifo = tmp_path / "blocking.fifo"
    if not fifo.exists():
        os.mkfifo(fifo)
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(tmp_path), tag, str(fifo), mode, ESCAPES.format(t=tag)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    assert child.stdout is not None
    line = child.stdout.readline()
    child.stdout.close()
    assert line == b"ready\n"
    return child, fifo


def _rg_on(fifo: Path) -> list[int]:
    return [p for p in _alive(str(fifo)) if b"rg" in Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")[0]]


@needs_tie
@needs_rg
@pytest.mark.parametrize("mode", ["host", "sandbox"])
def test_k6_sigkill_of_the_worker_leaves_no_descendant(tmp_path, mode):
    if mode == "sandbox" and not default_sandbox().probe():
        pytest.skip(f"bubblewrap unusable: {default_sandbox().probe_error}")
    tag = _tag()
    expected = 5 if mode == "host" else 10  # each bash call: 5 sleeps
    child, fifo = _run_child(tmp_path, mode, tag)
    try:
        assert _wait_for(lambda: len(_alive(tag)) >= expected and _rg_on(fifo), 30), (
            _alive(tag),
            _rg_on(fifo),
        )
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        assert _wait_for(lambda: not _alive(tag) and not _rg_on(fifo), 10), (_alive(tag), _rg_on(fifo))
    finally:
        with_leftovers = _alive(tag) + _rg_on(fifo)
        for pid in with_leftovers:
            os.kill(pid, signal.SIGKILL)
        if child.poll() is None:
            child.kill()
            child.wait()


@needs_tie
def test_k6_control_a_bare_popen_leaves_orphans(tmp_path):
    """The check above can fail: SIGKILL of a process that used a bare Popen leaves its tree running."""
    tag = _tag()
    child, _fifo = _run_child(tmp_path, "popen", tag)
    try:
        assert _wait_for(lambda: len(_alive(tag)) == 5, 30)
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        time.sleep(0.5)
        assert len(_alive(tag)) == 5
    finally:
        for pid in _alive(tag):
            os.kill(pid, signal.SIGKILL)


async def test_k6_host_direct_call_leaves_no_setsid_daemon(tmp_path):
    tag = _tag()
    ctx = make_context(LocalWorkspace(tmp_path), tool_name="bash")
    result = await TOOL.run(
        ctx, TOOL.validate({"command": f"setsid sleep {tag} >/dev/null 2>&1 & echo started"})
    )
    assert result.output == "started\n"
    assert await _gone(tag)
    result = await TOOL.run(
        ctx, TOOL.validate({"command": f"(setsid sleep {tag} &); sleep {tag}", "timeout": 1000})
    )
    assert result.error_kind is not None and result.error_kind["type"] == "timeout"
    assert await _gone(tag)


async def _gone(tag: str, within_s: float = 5.0) -> bool:
    deadline = time.monotonic() + within_s
    while _alive(tag):
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


async def test_k6_untied_fallback_still_kills_the_group(tmp_path, monkeypatch):
    """Where the helper cannot run, spawn falls back to a plain Popen: group kill only."""
    monkeypatch.setattr(_proc, "_get_helper", lambda: None)
    proc = _proc.spawn(["bash", "-c", "echo out; exit 3"], env={"PATH": os.defpath})
    assert isinstance(proc, _proc.UntiedProcess)
    try:
        assert proc.stdout is not None and proc.stdout.read() == b"out\n" and proc.wait(10) == 3
    finally:
        proc.close()
    tag = _tag()
    ctx = make_context(LocalWorkspace(tmp_path), tool_name="bash")
    result = await TOOL.run(ctx, TOOL.validate({"command": f"sleep {tag} >/dev/null 2>&1 & echo started"}))
    assert result.output == "started\n" and result.metadata["exit_code"] == 0
    assert await _gone(tag)
