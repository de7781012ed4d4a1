"""SDK and packaging polish (issue 13 item 10): what a user of the library relies on beyond the calls.

``async with Agent()`` / ``async with session`` close what they opened (K-6) without blocking the
caller's loop; every public method of ``Agent`` and ``Session`` says what it does; the packages ship
``py.typed`` (PEP 561) — and the wheel carries it, with the data files the tools load at run time;
``verify_commands`` returns a typed ``VerificationReport`` (F-6).
"""

from __future__ import annotations

import asyncio
import inspect
import shutil
import subprocess
import sys
import typing
import zipfile
from pathlib import Path

from flows.verify import CommandResult, VerificationReport
from kernel.options import SessionOptions
from orchestrator import Agent, Session

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("config", "kernel", "tools", "flows", "orchestrator", "workers")


async def test_async_with_agent_and_session_close_them_and_cancel_running_calls(tmp_path: Path) -> None:
    """K-6 through ``async with``: leaving the session cancels its running call; leaving the agent
    stops its loop thread."""
    async with Agent() as agent:
        async with agent.session(tmp_path, SessionOptions(artifact_store="memory")) as session:
            started = asyncio.Event()
            caller_loop = asyncio.get_running_loop()

            async def slow(args: dict[str, typing.Any]) -> str:
                caller_loop.call_soon_threadsafe(started.set)  # the tool runs on the agent's loop
                await asyncio.sleep(30)
                return "late"

            session.register_tool("slow", slow, description="sleeps", parameters={"type": "object"})
            assert (await session.tool_async("ls", {})).exit_code == 0
            pending = asyncio.ensure_future(session.tool_async("slow", {}))
            await asyncio.wait_for(started.wait(), 10)
        result = await asyncio.wait_for(pending, 10)
        assert result.exit_code == 1 and result.error_kind == {"type": "cancelled", "op": "slow"}
    assert agent.loop.loop.is_closed()
    agent.close()  # idempotent


def test_every_public_agent_and_session_method_has_a_docstring() -> None:
    for cls in (Agent, Session):
        assert cls.__doc__ and len(cls.__doc__) > 200, cls
        for name, member in vars(cls).items():
            if name.startswith("_") or (not callable(member) and not isinstance(member, property)):
                continue
            doc = inspect.getdoc(member)
            assert doc and doc.strip(), f"{cls.__name__}.{name} has no docstring"


def test_verify_commands_returns_a_typed_report(tmp_path: Path) -> None:
    """F-6: the return type is declared (for type checkers) and is what comes back."""
    hints = typing.get_type_hints(Session.verify_commands, vars(sys.modules["orchestrator.session"]) | {
        "VerificationReport": VerificationReport, "CommandResult": CommandResult,
    })  # fmt: skip
    assert hints["return"] is VerificationReport
    with Agent() as agent:
        session = agent.session(tmp_path)
        seen: list[CommandResult] = []
        report = session.verify_commands(
            "t", [{"id": "ok", "command": "true"}, {"id": "no", "command": "exit 3"}], progress=seen.append
        )
    assert isinstance(report, VerificationReport)
    assert [c.status for c in report.commands] == ["passed", "failed"] and report.verdict == "failed"
    assert sorted(c.id for c in seen) == ["no", "ok"]


def test_each_package_ships_py_typed_and_the_wheel_carries_it(tmp_path: Path) -> None:
    """PEP 561 markers in the source tree and in the built wheel; the wheel also carries the QuickJS
    prelude the ``program`` tool loads (a non-editable install — the container's — needs it)."""
    for package in PACKAGES:
        assert (ROOT / package / "py.typed").is_file(), package
    # Built from a copy, so setuptools' build/ directory never lands in the working tree.
    src = tmp_path / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for package in PACKAGES:
        shutil.copytree(ROOT / package, src / package, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    out = tmp_path / "dist"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(src)],
        capture_output=True, text=True, timeout=110,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    (wheel,) = out.glob("a3s_fleet-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for package in PACKAGES:
        assert f"{package}/py.typed" in names, package
    assert "tools/program/prelude.js" in names
