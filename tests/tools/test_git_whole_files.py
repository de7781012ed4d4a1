"""The git tool never lets libgit2 hold a work-tree file over 64 MiB whole (SPEC B-3, K-6, K-8).

libgit2 hashes a changed work-tree file by streaming it — unless a filter applies
(``.gitattributes`` ``text``/``eol``/``ident``, ``core.autocrlf``): then it reads the whole file and
converts it into a second buffer. Stash writes a changed file's blob whole, and checkout inflates a
blob whole to write it. Measured before this guard with a 64 MiB file and a planted ``* text
eol=crlf``: status +192 MiB, diff +192 MiB, stash +225 MiB, forced checkout +224 MiB; without the
filter stash and forced checkout +65 MiB (a 400 MiB file: +1.2 GiB and +402 MiB). Over
``MAX_WHOLE_FILE_BYTES`` such a call is now ``invalid_argument`` (reason ``too_large``) naming the
files, the limit and the sandboxed ``git`` to run instead; nothing is changed. The memory probes run
in a fresh interpreter with an address-space ceiling (the pattern of test_git_diff_limits.py).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pygit2
import pytest

from kernel.gitwhole import MAX_WHOLE_FILE_BYTES
from tests.tools.test_git_diff_limits import _probe
from tools.bash import changes
from tools.git.testing import RepoBuilder

MIB = 1 << 20
BIG = MAX_WHOLE_FILE_BYTES + MIB  # just over the limit: sparse zeros, no disk used
MAX_GROWTH_MIB = 24  # the unguarded calls grew by 65 to 225 MiB for a file this size
FILTER = "* text eol=crlf\n"


def _sparse(path: Path, size: int = BIG) -> None:
    with open(path, "wb") as fh:
        fh.truncate(size)


def _commit_big(b: RepoBuilder, name: str) -> None:
    """Commit a big file by hand (before any filter exists: streamed, never held here)."""
    _sparse(b.path / name)
    past = time.time() - 60
    os.utime(b.path / name, (past, past))  # older than the index: not "racily clean"
    index = b.repo.index
    index.add(name)
    index.write()
    b.commit({"small.txt": "one\n"}, f"add {name}")


def _touch(path: Path) -> None:
    """Same bytes, new mtime: the index's stat data no longer vouches for the file."""
    later = time.time() + 30
    os.utime(path, (later, later))


def _refused(result: dict[str, Any], path: str) -> None:
    assert result["error"]["type"] == "invalid_argument", result
    assert result["error"]["reason"] == "too_large"
    assert result["error"]["max_bytes"] == MAX_WHOLE_FILE_BYTES
    assert path in result["error"]["paths"]
    assert f"{MAX_WHOLE_FILE_BYTES} bytes" in result["error"]["message"]


def _bounded(result: dict[str, Any]) -> None:
    assert result["growth_mib"] < MAX_GROWTH_MIB, result


@pytest.fixture(scope="module")
def filtered_touched(tmp_path_factory: pytest.TempPathFactory) -> RepoBuilder:
    """A committed 65 MiB file, then a committed ``* text eol=crlf``, then the file touched."""
    b = RepoBuilder(tmp_path_factory.mktemp("whole") / "repo")
    b.commit({"small.txt": "zero\n"}, "init")
    _commit_big(b, "big.bin")
    b.commit({".gitattributes": FILTER}, "attributes")
    b.repo.branches.local.create("side", b.repo.head.peel(pygit2.Commit))
    _touch(b.path / "big.bin")
    b.write({"small.txt": "two\n"})
    return b


def test_b3_k8_filtered_changed_big_file_is_refused_by_status_diff_stash_and_checkout(
    filtered_touched: RepoBuilder,
) -> None:
    head = str(filtered_touched.repo.head.target)
    results = _probe(
        str(filtered_touched.path),
        [
            {"command": "status"},
            {"command": "diff"},
            {"command": "stash", "subcommand": "create"},
            {"command": "checkout", "ref": "main", "force": True},
            {"command": "checkout", "ref": "side"},
        ],
    )
    for result in results:
        _refused(result, "big.bin")
        _bounded(result)
    assert "git status" in results[0]["error"]["message"]
    assert f"git diff --stat {head}" in results[1]["error"]["message"]
    # Nothing changed: the touched file and the small edit are still there, no stash, same HEAD.
    repo = pygit2.Repository(str(filtered_touched.path))
    assert repo.listall_stashes() == []
    assert str(repo.head.target) == head and repo.head.shorthand == "main"
    assert (filtered_touched.path / "small.txt").read_text() == "two\n"


def test_b3_git_unchanged_or_untracked_big_filtered_files(tmp_path: Path) -> None:
    """Status trusts the index's stat data (an unchanged file is not read) and lists an untracked
    file without reading it; the working-tree diff hashes every tracked file (its old side is a
    tree entry, which carries no stat data), so an unchanged filtered one is refused there too."""
    b = RepoBuilder(tmp_path / "repo")
    b.commit({"small.txt": "zero\n"}, "init")
    _commit_big(b, "big.bin")
    b.commit({".gitattributes": FILTER}, "attributes")
    _sparse(b.path / "new.bin")
    b.write({"small.txt": "two\n"})
    status, diff, stash = _probe(
        str(b.path),
        [
            {"command": "status"},
            {"command": "diff"},
            {"command": "stash", "subcommand": "create", "include_untracked": True},
        ],
    )
    assert status["error"] is None and "?? new.bin" in status["output"] and "big.bin" not in status["output"]
    _refused(diff, "big.bin")
    assert "new.bin" not in diff["error"]["paths"]
    _refused(stash, "new.bin")  # stashing it would write its blob from the whole file
    assert "big.bin" not in stash["error"]["paths"]
    for result in (status, diff, stash):
        _bounded(result)


def test_b3_k8_git_stash_and_forced_checkout_refuse_a_changed_big_file_without_filter(tmp_path: Path) -> None:
    b = RepoBuilder(tmp_path / "repo")
    b.commit({"small.txt": "zero\n"}, "init")
    _commit_big(b, "big.bin")
    with open(b.path / "big.bin", "r+b") as fh:
        fh.write(b"changed")  # same size, other bytes
    _touch(b.path / "big.bin")
    status, diff, stash, checkout = _probe(
        str(b.path),
        [
            {"command": "status"},
            {"command": "diff"},
            {"command": "stash", "subcommand": "create"},
            {"command": "checkout", "ref": "main", "force": True},
        ],
    )
    assert status["error"] is None and " M big.bin" in status["output"]  # streamed: allowed
    assert diff["error"] is None and diff["metadata"]["files_omitted"] == 1
    _refused(stash, "big.bin")
    _refused(checkout, "big.bin")
    assert "git stash" in stash["error"]["message"] and "git checkout -f" in checkout["error"]["message"]
    for result in (status, diff, stash, checkout):
        _bounded(result)
    with open(b.path / "big.bin", "rb") as fh:
        assert fh.read(7) == b"changed"  # not discarded


def test_b3_k8_git_checkout_refuses_to_write_a_blob_over_the_limit(tmp_path: Path) -> None:
    b = RepoBuilder(tmp_path / "repo")
    b.commit({"small.txt": "zero\n"}, "init")
    base = b.repo.head.peel(pygit2.Commit)
    _commit_big(b, "big.bin")
    b.repo.branches.local.create("big", b.repo.head.peel(pygit2.Commit))
    b.repo.checkout_tree(base, strategy=pygit2.enums.CheckoutStrategy.FORCE)  # type: ignore[no-untyped-call]
    b.repo.set_head(base.id)
    (checkout,) = _probe(str(b.path), [{"command": "checkout", "ref": "big"}])
    _refused(checkout, "big.bin")
    _bounded(checkout)
    assert not (b.path / "big.bin").exists()


def test_b3_bash_change_snapshot_is_unknown_rather_than_reading_a_filtered_big_file(
    filtered_touched: RepoBuilder,
) -> None:
    with pytest.raises(changes._Unknown):
        changes._git_snapshot(filtered_touched.path, time.monotonic() + 30)


def test_b3_bash_change_snapshot_still_works_with_small_files(tmp_path: Path) -> None:
    b = RepoBuilder(tmp_path / "repo")
    b.commit({"a.txt": "one\n", ".gitattributes": FILTER}, "init")
    b.write({"a.txt": "two\n"})
    entries = changes._git_snapshot(b.path, time.monotonic() + 30)
    assert set(entries) == {"a.txt"}


def test_b3_k8_an_attributes_file_staged_but_removed_from_the_work_tree_still_counts(tmp_path: Path) -> None:
    """libgit2 falls back to the index for a directory whose ``.gitattributes`` is missing from the
    work tree: a model that stages ``* text eol=crlf`` and deletes the file still gets the filter,
    so the guard must still see it (the size walk is skipped only when no filter can apply)."""
    b = RepoBuilder(tmp_path / "repo")
    b.commit({"small.txt": "zero\n"}, "init")
    _commit_big(b, "big.bin")
    b.commit({".gitattributes": FILTER}, "attributes")
    (b.path / ".gitattributes").unlink()  # staged, not in the work tree
    _touch(b.path / "big.bin")
    (status,) = _probe(str(b.path), [{"command": "status"}])
    _refused(status, "big.bin")
    _bounded(status)


def test_b3_the_tree_is_sized_only_when_a_filter_can_apply(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sizing every file (an lstat each) doubled bash's change snapshot on a 30,000-file tree; it is
    skipped when no attribute source names a filter and core.autocrlf is off — and only then."""
    from kernel.beneath import Beneath
    from kernel.gitsafe import check_work_tree
    from kernel.gitwhole import filters_possible

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))  # no global attributes file
    b = RepoBuilder(tmp_path / "repo")
    b.commit({"small.txt": "zero\n", "sub/a.png": "png\n", "sub/.gitattributes": "*.png binary\n"}, "init")

    def possible() -> bool:
        beneath = Beneath(str(b.path))
        try:
            seen = check_work_tree(beneath, max_dirs=1000)
            return filters_possible(pygit2.Repository(str(b.path)), beneath, seen)
        finally:
            beneath.close()

    assert possible() is False  # `binary` sets -text: no filter
    (tmp_path / "xdg" / "git").mkdir(parents=True)
    (tmp_path / "xdg" / "git" / "attributes").write_text("")
    assert possible() is True  # the user's global attributes: not read, assumed
    (tmp_path / "xdg" / "git" / "attributes").unlink()
    b.repo.config["core.autocrlf"] = "input"
    assert possible() is True
    b.repo.config["core.autocrlf"] = "false"
    assert possible() is False
    (b.path / ".git" / "info").mkdir(exist_ok=True)
    (b.path / ".git" / "info" / "attributes").write_text("*.c ident\n")
    assert possible() is True
    (b.path / ".git" / "info" / "attributes").unlink()
    (b.path / "sub" / ".gitattributes").write_text("*.txt text eol=crlf\n")  # a work-tree file
    assert possible() is True
    (b.path / "sub" / ".gitattributes").unlink()  # staged `*.png binary` only: no filter named...
    assert possible() is True  # ...but a staged file of a walked directory is not read: assumed
