"""Shared fixtures: an embedded ``Agent`` per test module and a small workspace tree."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator import Agent


@pytest.fixture(scope="module")
def agent() -> Iterator[Agent]:
    a = Agent()
    yield a
    a.close()


@pytest.fixture()
def workspace(tmp_path: Path) -> Path:
    """A small tree: a few text files, a nested directory."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "app.py").write_text("import os\n\ndef main():\n    return os.getcwd()\n")
    (tmp_path / "README.md").write_text("# demo\n\nhello world\n")
    (tmp_path / "notes.txt").write_text("".join(f"line {i}\n" for i in range(1, 301)))
    return tmp_path
