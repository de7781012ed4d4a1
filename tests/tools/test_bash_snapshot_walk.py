"""bash's change snapshot without git stops reading a huge directory at its caps (SPEC B-2, K-8).

A sandboxed ``touch``/``ln -s`` loop can make one directory with hundreds of thousands of entries.
The mtime snapshot (``tools/bash/changes.py``) must stop reading it at its caps — it used
``os.walk``, which reads a directory's whole listing into lists before the 20,000-file cap is even
looked at. Work is counted (directory entries the walk pulled from ``scandir``), not wall time.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tools.bash import changes

# The caps are lowered for the test (the same code path; 20,000 files / 40,000 entries in use).
MAX_FILES = 2_000
MAX_ENTRIES = 4_000
ENTRIES = 30_000


class _Counter:
    """Wraps ``os.scandir`` and counts every entry its iterators hand out."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.pulled = 0
        real = os.scandir
        counter = self

        class Counting:
            def __init__(self, *args: object) -> None:
                self._it = real(*args)  # type: ignore[call-overload]

            def __iter__(self) -> Counting:
                return self

            def __next__(self) -> os.DirEntry[str]:
                entry = next(self._it)
                counter.pulled += 1
                return entry

            def __enter__(self) -> Counting:
                return self

            def __exit__(self, *exc: object) -> None:
                self._it.close()

            def close(self) -> None:
                self._it.close()

        monkeypatch.setattr(os, "scandir", Counting)


def _fill(directory: Path, make: str) -> None:
    directory.mkdir()
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for i in range(ENTRIES):
            if make == "file":
                os.close(os.open(f"f{i}", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd))
            else:
                os.symlink("nowhere", f"l{i}", dir_fd=fd)
    finally:
        os.close(fd)


@pytest.mark.parametrize("make", ["file", "symlink"])
async def test_b2_mtime_snapshot_stops_reading_a_huge_directory_at_its_cap(tmp_path, monkeypatch, make):
    monkeypatch.setattr(changes, "MTIME_SNAPSHOT_MAX_FILES", MAX_FILES)
    monkeypatch.setattr(changes, "MTIME_SNAPSHOT_MAX_ENTRIES", MAX_ENTRIES, raising=False)
    _fill(tmp_path / "big", make)
    (tmp_path / "small.txt").write_text("x")
    counter = _Counter(monkeypatch)
    # The walk itself, with no deadline in the way: only the caps may stop it.
    with pytest.raises(changes._Unknown):
        changes._mtime_snapshot(tmp_path, deadline=float("inf"))
    assert counter.pulled <= MAX_ENTRIES + 1, counter.pulled
    # The public path: "unknown", never a partial list.
    counter.pulled = 0
    assert await changes.take_snapshot(tmp_path) is None
    assert counter.pulled <= MAX_ENTRIES + 1, counter.pulled


async def test_b2_mtime_snapshot_under_the_caps_is_complete(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "f.txt").write_text("1")
    (tmp_path / "top.txt").write_text("2")
    (tmp_path / ".git").mkdir()  # an empty .git is no repository: the mtime kind, .git skipped
    (tmp_path / ".git" / "HEAD").write_text("x")
    (tmp_path / "a" / ".a3s").mkdir()
    (tmp_path / "a" / ".a3s" / "state").write_text("x")
    os.symlink("top.txt", tmp_path / "link")
    snap = changes._mtime_snapshot(tmp_path, deadline=float("inf"))
    assert sorted(snap) == ["a/b/f.txt", "top.txt"]


@pytest.mark.parametrize("repository", [False, True])
async def test_b2_snapshot_paths_are_bounded_in_characters(tmp_path, monkeypatch, repository):
    """B-2: deep, long names (20,000 files of ~3.7 KiB paths) made one snapshot hold 73 MB, the
    "before" one for the whole command; past ``SNAPSHOT_MAX_PATH_CHARS`` of paths (lowered here)
    the snapshot is unknown (None), like past its file cap — for the mtime and the git kind."""
    if repository:
        import pygit2

        pygit2.init_repository(str(tmp_path))
    deep = tmp_path / ("d" * 200) / ("e" * 200)
    deep.mkdir(parents=True)
    for i in range(100):
        (deep / f"{i:03d}{'x' * 200}").write_bytes(b"")
    # No clock involved: the 400 ms budget is not what is tested.
    kind, entries = changes._snapshot(tmp_path, deadline=float("inf"))
    assert kind == ("git" if repository else "mtime") and len(entries) == 100
    monkeypatch.setattr(changes, "SNAPSHOT_MAX_PATH_CHARS", 20_000)  # 100 paths of ~605 chars
    with pytest.raises(changes._Unknown):
        changes._snapshot(tmp_path, deadline=float("inf"))
