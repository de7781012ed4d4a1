"""Opening git repositories without honouring what a hostile one could carry (issue 15 item 3).

Measured on libgit2 1.9 through pygit2 (``tests/kernel/test_gitsafe.py`` plants each one):

- **Honoured, neutralised here.** ``core.worktree`` moves the work tree: status, diff, checkout and
  stash then read, write and delete *there*. Every work-tree repository is opened with an explicit
  work directory (the workspace root), so the setting is ignored.
- **Honoured, refused here** (``permission_denied``, reason ``unsafe_git_config``): ``include.path``
  and ``includeIf.<condition>.path`` are read while the repository is *opened* (another file can set
  ``core.worktree``; a FIFO freezes the whole process, because pygit2 holds the GIL while libgit2
  blocks in ``open``); ``core.excludesFile`` and ``core.attributesFile`` are read by status, diff
  and checkout — refused unless they name a regular file. A repository config (or
  ``config.worktree``) that is not a regular file, is over 1 MiB or does not parse is refused too.
- **Never run by libgit2** (planted with a canary command; nothing ran): ``core.fsmonitor``,
  ``core.hooksPath`` and every hook (libgit2 runs no hooks), ``core.sshCommand`` (used only for
  ssh fetch/push, which the git tool never does), ``core.pager``, ``core.editor``,
  ``diff.external``, ``diff.<driver>.command``/``textconv``, ``filter.<driver>.clean``/``smudge``/
  ``process``. They are left alone (the user's own ``git`` would run them, which is why model-side
  file tools may not write ``.git/`` at all: ``tools/_fileio.py``).
- **Work-tree files libgit2 opens blocking**: every ``.gitignore`` on the way (and ``.gitattributes``
  for diff and checkout). A FIFO there freezes the process the same way, so ``special_git_files``
  looks for ``.gitignore``/``.gitattributes`` entries that are not regular files (FIFOs, sockets,
  devices, symlinks) before libgit2 walks the tree, with a bounded, race-free directory walk.

The user's global and system configuration (``~/.gitconfig``, ``/etc/gitconfig``) is the host's own
and is trusted.
"""

from __future__ import annotations

import errno
import os
import stat as stat_mod
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from kernel.beneath import O_LIST_DIR, Beneath, Fd
from kernel.errors import PermissionDenied, Timeout

MAX_CONFIG_BYTES = 1 << 20
MAX_GITFILE_BYTES = 4096
GITDIR_PREFIX = "gitdir:"
SPECIAL_NAMES = frozenset({".gitignore", ".gitattributes"})
SKIPPED_DIRS = frozenset({".git", ".a3s"})

# (section, key) pairs whose presence alone refuses the repository; includeIf is matched by section.
_REFUSED_KEYS = frozenset({("include", "path")})
_FILE_KEYS = frozenset({("core", "excludesfile"), ("core", "attributesfile")})


@dataclass(slots=True)
class ConfigEntry:
    section: str  # lower-cased
    subsection: str | None  # as written (case-sensitive in git)
    key: str  # lower-cased
    value: str | None  # None: a bare boolean key


@dataclass(slots=True)
class RepoLayout:
    """Where a repository's git directory and shared (common) directory are."""

    git_dir: Path
    common_dir: Path
    configs: list[Path] = field(default_factory=list)
    work_tree: Path | None = None  # set when the repository was found through ``<path>/.git``


class ConfigSyntaxError(ValueError):
    pass


def parse_config(text: str) -> list[ConfigEntry]:
    """Every ``section[.subsection].key`` of a git config file, in order (git's syntax, tolerant of
    what git tolerates; ``ConfigSyntaxError`` for what git would reject)."""
    entries: list[ConfigEntry] = []
    section: str | None = None
    subsection: str | None = None
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i].lstrip(" \t\r")
        i += 1
        if not line or line[0] in "#;":
            continue
        if line[0] == "[":
            section, subsection, rest = _header(line)
            line = rest.lstrip(" \t\r")
            if not line or line[0] in "#;":
                continue
        if section is None:
            raise ConfigSyntaxError("a key before any section")
        name_end = 0
        while name_end < len(line) and (line[name_end].isalnum() or line[name_end] == "-"):
            name_end += 1
        key = line[:name_end].lower()
        if not key or not key[0].isalpha():
            raise ConfigSyntaxError(f"invalid key in line {i}")
        rest = line[name_end:].lstrip(" \t\r")
        if not rest or rest[0] in "#;":
            entries.append(ConfigEntry(section, subsection, key, None))
            continue
        if rest[0] != "=":
            raise ConfigSyntaxError(f"invalid key in line {i}")
        value, i = _value(rest[1:], lines, i)
        entries.append(ConfigEntry(section, subsection, key, value))
    return entries


def _header(line: str) -> tuple[str, str | None, str]:
    end = 1
    while end < len(line) and (line[end].isalnum() or line[end] in "-."):
        end += 1
    name = line[1:end]
    if not name:
        raise ConfigSyntaxError("empty section name")
    if end < len(line) and line[end] == "]":
        if "." in name:  # legacy [section.subsection]
            sec, _, legacy = name.partition(".")
            return sec.lower(), legacy.lower(), line[end + 1 :]
        return name.lower(), None, line[end + 1 :]
    rest = line[end:].lstrip(" \t")
    if not rest.startswith('"'):
        raise ConfigSyntaxError("invalid section header")
    sub: list[str] = []
    k = 1
    while k < len(rest):
        ch = rest[k]
        if ch == "\\" and k + 1 < len(rest):
            sub.append(rest[k + 1])
            k += 2
            continue
        if ch == '"':
            break
        sub.append(ch)
        k += 1
    if k >= len(rest) or rest[k + 1 : k + 2] != "]":
        raise ConfigSyntaxError("invalid subsection header")
    return name.lower(), "".join(sub), rest[k + 2 :]


def _value(text: str, lines: list[str], i: int) -> tuple[str, int]:
    """A value with git's quoting, escapes, comments and backslash-newline continuation."""
    out: list[str] = []
    quoted = False
    k = 0
    while True:
        if k >= len(text):
            if quoted:
                raise ConfigSyntaxError("unterminated quote")
            return "".join(out).strip(), i
        ch = text[k]
        if ch == "\\":
            if k + 1 >= len(text) or text[k + 1 :] == "\r":
                if i >= len(lines):
                    return "".join(out).strip(), i
                text, k, i = lines[i], 0, i + 1  # continuation
                continue
            out.append({"n": "\n", "t": "\t", "b": "\b"}.get(text[k + 1], text[k + 1]))
            k += 2
            continue
        if ch == '"':
            quoted = not quoted
        elif ch in "#;" and not quoted:
            return "".join(out).strip(), i
        else:
            out.append(ch)
        k += 1


def read_config_file(path: Path) -> str | None:
    """A repository config's text (None when absent); refuses what libgit2 could block on."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _unsafe(f"cannot open {path}: {exc.strerror}", path) from None
    try:
        st = os.fstat(fd)
        if not stat_mod.S_ISREG(st.st_mode):
            raise _unsafe(f"{path} is not a regular file", path)
        if st.st_size > MAX_CONFIG_BYTES:
            raise _unsafe(f"{path} is larger than {MAX_CONFIG_BYTES} bytes", path)
        data = os.read(fd, MAX_CONFIG_BYTES + 1)
    finally:
        os.close(fd)
    return data.decode("utf-8", "replace")


def layout_for(path: Path) -> RepoLayout | None:
    """The repository at exactly ``path`` (a work tree holding ``.git``, or a git directory)."""
    if os.path.lexists(path / ".git"):
        return repo_layout(path)
    if os.path.isfile(path / "HEAD") and (
        os.path.isdir(path / "objects") or os.path.isfile(path / "commondir")
    ):
        return layout_of_git_dir(path)
    return None


def repo_layout(work_tree: Path) -> RepoLayout | None:
    """The git and common directories of the repository whose work tree is ``work_tree``."""
    dot_git = work_tree / ".git"
    try:
        st = os.stat(dot_git)
    except OSError:
        return None
    if stat_mod.S_ISDIR(st.st_mode):
        git_dir = dot_git
    elif stat_mod.S_ISREG(st.st_mode):
        text = read_config_file(dot_git) or ""
        if not text.startswith(GITDIR_PREFIX):
            raise _unsafe(f"{dot_git} is a file without a 'gitdir:' line", dot_git)
        git_dir = Path(os.path.normpath(work_tree / text[len(GITDIR_PREFIX) :].strip()))
    else:
        raise _unsafe(f"{dot_git} is neither a directory nor a gitdir file", dot_git)
    layout = layout_of_git_dir(git_dir)
    layout.work_tree = work_tree
    return layout


def layout_of_git_dir(git_dir: Path) -> RepoLayout:
    common = git_dir
    commondir = read_config_file(git_dir / "commondir")
    if commondir is not None and commondir.strip():
        common = Path(os.path.normpath(git_dir / commondir.strip()))
    layout = RepoLayout(git_dir, common, [common / "config"])
    return layout


def check_repository(layout: RepoLayout) -> list[ConfigEntry]:
    """Refuse (``permission_denied``) a repository whose own config libgit2 would act on unsafely."""
    seen: list[ConfigEntry] = []
    configs = list(layout.configs)
    worktree_config = False
    while configs:
        path = configs.pop(0)
        text = read_config_file(path)
        if text is None:
            continue
        try:
            entries = parse_config(text)
        except ConfigSyntaxError as exc:
            raise _unsafe(f"{path} does not parse as git config ({exc})", path) from None
        for e in entries:
            pair = (e.section, e.key)
            if pair in _REFUSED_KEYS or (e.section == "includeif" and e.key == "path"):
                name = "include.path" if e.section == "include" else f"includeIf.{e.subsection}.path"
                raise _unsafe(
                    f"{path} sets {name}; a3s-fleet does not open repositories whose config includes other files",
                    path,
                )
            if pair in _FILE_KEYS and e.value:
                _require_regular_file(path, f"{e.section}.{e.key}", e.value)
            if pair == ("extensions", "worktreeconfig") and (e.value or "true").lower() in (
                "true",
                "yes",
                "on",
                "1",
            ):
                worktree_config = True
        seen.extend(entries)
        if worktree_config:
            worktree_config = False
            configs.append(layout.git_dir / "config.worktree")
    for name in ("exclude", "attributes"):  # read by status / diff / checkout, blocking
        _require_regular_file(
            layout.common_dir / "config", f"info/{name}", os.fspath(layout.common_dir / "info" / name)
        )
    return seen


def _require_regular_file(config: Path, name: str, value: str) -> None:
    target = os.path.expanduser(value)
    try:
        st = os.stat(target)
    except OSError:
        return  # missing: libgit2 skips it
    if not stat_mod.S_ISREG(st.st_mode):
        raise _unsafe(f"{config} sets {name} to {value!r}, which is not a regular file", config)


def _unsafe(message: str, path: Path | str) -> PermissionDenied:
    return PermissionDenied(message, reason="unsafe_git_config", path=os.fspath(path))


def work_tree_entries(
    beneath: Beneath, *, max_dirs: int, deadline: float | None, what: str
) -> Iterator[tuple[str, os.DirEntry[str]]]:
    """(directory, entry) for every entry of the work tree, directories before their contents.

    A race-free walk beneath the pinned root: every directory opened with no symlink followed;
    ``.git``, ``.a3s`` and symlinks not entered; no file opened. ``Timeout`` naming ``what`` when
    more than ``max_dirs`` directories or the deadline pass (the caller then does not call libgit2).
    An entry is yielded before its directory is entered, and a directory that vanished or turned
    into something else meanwhile is skipped.
    """
    pending: list[str] = [""]
    dirs = 0
    while pending:
        rel = pending.pop()
        dirs += 1
        if dirs > max_dirs or (deadline is not None and time.monotonic() > deadline):
            raise Timeout(
                f"the work tree has too many directories to {what} (> {dirs - 1})", op="git", duration_ms=None
            )
        try:
            fd = Fd(beneath.open_strict(rel, O_LIST_DIR))
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.EACCES):
                continue
            raise
        with fd, os.scandir(fd.fd) as it:
            for de in it:
                yield rel, de
                try:
                    if de.name not in SKIPPED_DIRS and de.is_dir(follow_symlinks=False):
                        pending.append(f"{rel}/{de.name}" if rel else de.name)
                except OSError:
                    continue


def special_git_files(
    beneath: Beneath, *, max_dirs: int, deadline: float | None = None, seen: WorkTreeAttributes | None = None
) -> list[str]:
    """Workspace-relative ``.gitignore``/``.gitattributes`` entries that are not regular files
    (``work_tree_entries``' walk). The directories walked and the regular ``.gitattributes`` files
    met are recorded in ``seen``."""
    found: list[str] = []
    last_dir: str | None = None
    for rel, de in work_tree_entries(
        beneath, max_dirs=max_dirs, deadline=deadline, what="check for special git files"
    ):
        if seen is not None and rel != last_dir:
            seen.dirs.append(rel)
            last_dir = rel
        if de.name not in SPECIAL_NAMES:
            continue
        try:
            if de.is_file(follow_symlinks=False):
                if seen is not None and de.name == ".gitattributes":
                    seen.files.append(f"{rel}/{de.name}" if rel else de.name)
            elif not de.is_dir(follow_symlinks=False):
                found.append(f"{rel}/{de.name}" if rel else de.name)
        except OSError:
            continue
    return found


@dataclass
class WorkTreeAttributes:
    """What the walk saw of a work tree's attribute sources (``kernel.gitwhole.filters_possible``)."""

    dirs: list[str] = field(default_factory=list)  # every non-empty directory walked ('' = the root)
    files: list[str] = field(default_factory=list)  # the regular ``.gitattributes`` files


def check_work_tree(beneath: Beneath, *, max_dirs: int, deadline: float | None = None) -> WorkTreeAttributes:
    """Refuse (``permission_denied``, reason ``unsafe_git_worktree``) a work tree holding a
    ``.gitignore``/``.gitattributes`` that libgit2 would block on or follow out; otherwise say
    where its attributes come from."""
    attributes = WorkTreeAttributes()
    bad = special_git_files(beneath, max_dirs=max_dirs, deadline=deadline, seen=attributes)
    if bad:
        shown = ", ".join(bad[:5]) + (", …" if len(bad) > 5 else "")
        raise PermissionDenied(
            f"the work tree holds git ignore/attribute files that are not regular files ({shown}); "
            "libgit2 would block on or follow them, so git is not run here until they are removed",
            reason="unsafe_git_worktree",
            path=bad[0],
        )
    return attributes
