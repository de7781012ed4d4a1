"""A real-repository builder for tests (CONVENTIONS §14: fakes ship with the code).

``RepoBuilder(path).commit({...})`` writes files into a real work tree, stages them with pygit2 and
commits with deterministic, increasing timestamps. Values: ``str``/``bytes`` = file content,
``None`` = delete, ``Link(target)`` = a symlink (any target, even outside or dangling),
``Gitlink(oid)`` = a submodule entry. Nothing here shells out to ``git``.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pygit2
from pygit2.enums import FileMode

START_TIME = 1_700_000_000  # seconds since the epoch of the first commit
AUTHOR = ("Test Author", "author@example.com")


@dataclass(frozen=True)
class Link:
    target: str


@dataclass(frozen=True)
class Gitlink:
    oid: str


Content = str | bytes | Link | Gitlink | None


class RepoBuilder:
    def __init__(self, path: str | os.PathLike[str], *, branch: str = "main") -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.repo = pygit2.init_repository(str(self.path), initial_head=branch)
        self.repo.config["user.name"] = AUTHOR[0]
        self.repo.config["user.email"] = AUTHOR[1]
        self.time = START_TIME

    def signature(self, *, same_time: bool = False) -> pygit2.Signature:
        if not same_time:
            self.time += 1
        return pygit2.Signature(AUTHOR[0], AUTHOR[1], self.time, 0)

    def write(self, files: dict[str, Content]) -> None:
        """Change the work tree only (nothing staged)."""
        for rel, content in files.items():
            full = self.path / rel
            if content is None:
                if full.is_symlink() or full.is_file():
                    full.unlink()
                elif full.is_dir():
                    shutil.rmtree(full)
                continue
            full.parent.mkdir(parents=True, exist_ok=True)
            if full.is_symlink() or full.is_file():
                full.unlink()
            if isinstance(content, Link):
                os.symlink(content.target, full)
            elif isinstance(content, Gitlink):
                full.mkdir(exist_ok=True)
            elif isinstance(content, bytes):
                full.write_bytes(content)
            else:
                full.write_text(content, encoding="utf-8")

    def commit(self, files: dict[str, Content], message: str = "change", *, same_time: bool = False) -> str:
        self.write(files)
        index = self.repo.index
        for rel, content in files.items():
            if content is None:
                if rel in index:
                    index.remove(rel)
                else:
                    index.remove_all([f"{rel}/*"])
            elif isinstance(content, Gitlink):
                index.add(pygit2.IndexEntry(rel, pygit2.Oid(hex=content.oid), FileMode.COMMIT))
            else:
                index.add(rel)
        index.write()
        tree = index.write_tree()
        parents = [] if self.repo.head_is_unborn else [self.repo.head.target]
        sig = self.signature(same_time=same_time)
        oid = self.repo.create_commit("HEAD", sig, sig, message, tree, parents)
        return str(oid)

    def history(self, n: int, *, prefix: str = "commit") -> list[str]:
        """``n`` commits each changing ``log.txt``; returns their ids, oldest first."""
        return [self.commit({"log.txt": f"{prefix} {i}\n"}, f"{prefix} {i}") for i in range(n)]
