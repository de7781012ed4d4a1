"""What the sandbox sees of the host's file system: the bubblewrap mount arguments (issue 15, items 1-3).

Order of the mount table (later mounts cover earlier ones):

1. ``/`` read-only (recursively: ``/sys`` and every other submount included);
2. fresh, private, size-capped tmpfs (``SCRATCH_SIZES``) on ``/tmp``, an empty ``/var/tmp``, an
   empty ``/run`` (``/var/run`` links there): no host socket file under them is even visible;
   a minimal, read-only ``/dev`` (null, zero, full, random, urandom, tty, a private ``/dev/pts``:
   bubblewrap's ``--dev``) with a private, capped ``/dev/shm``; a fresh ``/proc`` for the sandbox's PID namespace,
   with ``/proc/sys`` re-bound read-only and ``/proc/sysrq-trigger`` masked;
3. the workspace read-write at its own physical path, bound from a directory fd we opened (so a
   symlink swapped in after our checks cannot redirect the bind);
4. ``<root>/.a3s`` read-only, always: sessions create it when they open and we create it here
   if it is still missing (``kernel.statedir``, never through a symlink — a symlinked or
   non-directory ``.a3s`` refuses the call), so the sandbox can never create it and plant
   ``.a3s/artifacts/objects/bash -> /outside``;
5. ``<root>/.git`` read-only: the directory, or — when ``.git`` is a file (worktrees,
   submodules) — the file itself plus the git directory it names and that directory's
   ``commondir``, wherever they live (so ``git status``/``log``/``diff`` still work inside; every
   write to the repository fails with EROFS). When ``.git`` is a symlink, its target directory is
   bound read-only and the link itself, if replaced, is restored afterwards (``rootgit.py``); where
   there is no ``.git`` the caller (``rootgit.enter``) has made an empty placeholder, bound here
   read-only like any ``.git`` (an empty ``.git`` is no repository to git, inside or on the host),
   and removed by the last concurrent command to end; nested repositories' ``.git``
   directories are ordinary workspace content (finding them would cost a walk of the tree on
   every call) — only the root repository's configuration is honoured by our tools;
6. host secrets masked: ``/etc/shadow``-like files, the usual credential stores under the host
   user's ``$HOME`` and under its account's home directory from the user database, when that is
   another one (``MASKED_HOME_PATHS``) and any other procfs mount of the host (a
   container's ``/host/proc``): an empty read-only tmpfs over directories, the null device
   (unreadable here: bound without device access) over files. A masked path that contains the
   workspace is left alone.

Every host path we bind is opened here (``O_PATH | O_NOFOLLOW``, relative to the workspace's
directory fd) and handed to bubblewrap as an fd, which bubblewrap closes before the command runs.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import stat as stat_mod
from collections.abc import Iterator
from dataclasses import dataclass, field

from kernel.statedir import ensure_state_dir, open_state_dir

INTERNAL_DIR = ".a3s"
GIT_DIR = ".git"
_MIB = 1024 * 1024
TMP_SIZE_BYTES = 2048 * _MIB
# Every writable memory-backed directory is capped: tmpfs pages belong to no process, so the OOM
# killer cannot take them back from a sandbox filling them (uncapped, each was half the host's
# memory). /dev/shm gets Docker's default; /dev itself is read-only once populated.
SCRATCH_SIZES = (
    ("/tmp", TMP_SIZE_BYTES),
    ("/var/tmp", 256 * _MIB),
    ("/run", 64 * _MIB),
    ("/dev/shm", 64 * _MIB),
)
MAX_GITFILE_BYTES = 4096
# Readable only by their owner, root: the sandbox's uid maps to the host's uid, root on CI.
MASKED_SYSTEM_PATHS = (
    "/etc/shadow",
    "/etc/gshadow",
    "/etc/shadow-",
    "/etc/gshadow-",
    "/etc/sudoers",
    "/etc/ssl/private",
    # Host identities and service credentials, root-only on a typical server or node.
    "/etc/krb5.keytab",
    "/etc/letsencrypt",
    "/etc/wireguard",
    "/etc/NetworkManager/system-connections",
    "/etc/kubernetes/pki",
    "/etc/kubernetes/admin.conf",
    "/var/lib/kubelet/pki",
    "/var/lib/cloud/instances",  # cloud-init user-data: often holds bootstrap secrets
)
# The SSH host keys' private halves (whoever holds them can impersonate the host).
MASKED_SYSTEM_GLOBS = ("/etc/ssh/ssh_host_*_key",)
# Credential stores under the host user's home (as named by $HOME of the host process).
MASKED_HOME_PATHS = (
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".kube",
    ".docker",
    ".netrc",
    ".pypirc",
    ".npmrc",
    ".yarnrc",
    ".yarnrc.yml",
    ".git-credentials",
    ".password-store",
    ".vault-token",
    ".terraformrc",
    ".config/gcloud",
    ".config/gh",
    ".config/hub",
    ".config/git/credentials",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".local/share/keyrings",
    ".claude/.credentials.json",
    # Package registries, databases, object stores and model hubs keep tokens here too.
    ".pgpass",
    ".my.cnf",
    ".s3cfg",
    ".boto",
    ".m2/settings.xml",
    ".m2/settings-security.xml",
    ".gradle/gradle.properties",
    ".gem/credentials",
    ".pip/pip.conf",
    ".config/pip/pip.conf",
    ".config/containers/auth.json",
    ".config/rclone",
    ".huggingface/token",
    ".cache/huggingface/token",
    # Shell and REPL histories: tokens typed on a command line (`export TOKEN=…`, `psql postgres://u:pw@…`).
    ".bash_history",
    ".zsh_history",
    ".python_history",
    ".psql_history",
    ".mysql_history",
)
_PATH_FLAGS = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC


class SandboxRefused(RuntimeError):
    """The workspace cannot be sandboxed safely as it is (e.g. ``.a3s`` is a symlink)."""


@dataclass
class Mounts:
    """bubblewrap arguments plus the fds they name (the caller passes them, then closes them)."""

    args: list[str] = field(default_factory=list)
    fds: list[int] = field(default_factory=list)

    def bind_fd(self, fd: int, dest: str, *, read_only: bool) -> None:
        os.set_inheritable(fd, True)
        self.fds.append(fd)
        self.args += ["--ro-bind-fd" if read_only else "--bind-fd", str(fd), dest]

    def close(self) -> None:
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds.clear()


def system_args() -> list[str]:
    """Steps 1-2: read-only root, private scratch directories, minimal /dev, fresh /proc."""
    scratch = dict(SCRATCH_SIZES)
    return [
        "--ro-bind", "/", "/",
        "--size", str(scratch["/tmp"]), "--tmpfs", "/tmp",
        "--size", str(scratch["/var/tmp"]), "--tmpfs", "/var/tmp",
        "--size", str(scratch["/run"]), "--tmpfs", "/run",
        "--dev", "/dev",
        "--remount-ro", "/dev",
        "--size", str(scratch["/dev/shm"]), "--tmpfs", "/dev/shm",
        "--proc", "/proc",
        # The sandbox's uid is the host's uid: as root it would pass sysctl's owner check.
        "--ro-bind", "/proc/sys", "/proc/sys",
        "--ro-bind-try", "/proc/sysrq-trigger", "/proc/sysrq-trigger",
    ]  # fmt: skip


def workspace_mounts(root: str, home: str | None) -> Mounts:
    """Steps 3-6 for the physical workspace ``root``; raises ``SandboxRefused``/``OSError``."""
    if os.path.realpath(root) == "/":
        raise SandboxRefused("the workspace is the whole file system: there is nothing to keep read-only")
    mounts = Mounts()
    try:
        root_fd = os.open(root, _PATH_FLAGS | os.O_DIRECTORY)
        mounts.bind_fd(root_fd, root, read_only=False)
        mounts.bind_fd(_state_dir_fd(root), os.path.join(root, INTERNAL_DIR), read_only=True)
        for fd, dest in _git_binds(root, root_fd):
            mounts.bind_fd(fd, dest, read_only=True)
        mounts.args += _mask_args(root, home)
    except BaseException:
        mounts.close()
        raise
    return mounts


def _state_dir_fd(root: str) -> int:
    """An ``O_PATH`` fd of ``<root>/.a3s``: created when missing (sessions create it when they
    open; a tool context made by hand may not have), never through a symlink — a symlinked or
    non-directory ``.a3s`` refuses the call (``permission_denied``, ``kernel.statedir``)."""
    ensure_state_dir(root)
    state = open_state_dir(root, create=False)
    try:
        return os.dup(state.fd)
    finally:
        state.close()


def _git_binds(root: str, root_fd: int) -> Iterator[tuple[int, str]]:
    try:
        st = os.lstat(GIT_DIR, dir_fd=root_fd)
    except FileNotFoundError:
        return  # rootgit.enter made a placeholder unless the workspace is read-only
    dest = os.path.join(root, GIT_DIR)
    if stat_mod.S_ISDIR(st.st_mode):
        yield os.open(GIT_DIR, _PATH_FLAGS | os.O_DIRECTORY, dir_fd=root_fd), dest
        return
    if stat_mod.S_ISREG(st.st_mode):
        yield os.open(GIT_DIR, _PATH_FLAGS, dir_fd=root_fd), dest
    for path in named_git_dirs(root, root_fd):
        yield from _bind_dir(path)


def named_git_dirs(root: str, root_fd: int) -> list[str]:
    """The physical paths of the git directories ``<root>/.git`` names, existing or not: a
    symlink's target, or a ``gitdir:`` file's directory and that directory's ``commondir``.
    ``rootgit`` checks after a command that they are still the directories they were."""
    try:
        st = os.lstat(GIT_DIR, dir_fd=root_fd)
    except OSError:
        return []
    if stat_mod.S_ISLNK(st.st_mode):
        return [os.path.realpath(os.path.join(root, GIT_DIR))]
    if not stat_mod.S_ISREG(st.st_mode):
        return []
    gitdir = _read_gitfile(root_fd)
    if gitdir is None:
        return []
    gitdir = os.path.realpath(os.path.join(root, gitdir))
    named = [gitdir]
    common = _read_small(os.path.join(gitdir, "commondir"))
    if common:
        named.append(os.path.realpath(os.path.join(gitdir, common)))
    return named


def _bind_dir(path: str) -> Iterator[tuple[int, str]]:
    try:
        yield os.open(path, _PATH_FLAGS | os.O_DIRECTORY), path
    except OSError:
        return


def _read_gitfile(root_fd: int) -> str | None:
    try:
        fd = os.open(GIT_DIR, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=root_fd)
    except OSError:
        return None
    try:
        data = os.read(fd, MAX_GITFILE_BYTES)
    finally:
        os.close(fd)
    text = data.decode("utf-8", "replace").strip()
    if not text.startswith("gitdir:"):
        return None
    return text[len("gitdir:") :].strip() or None


def _read_small(path: str) -> str | None:
    """A small regular file's text; None for anything else. Opened non-blocking: a FIFO planted
    where a ``commondir`` is read blocked the event loop (``prepare`` runs on it) for ever."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except (OSError, ValueError):
        return None
    try:
        if not stat_mod.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = os.read(fd, MAX_GITFILE_BYTES)
    except OSError:
        return None
    finally:
        os.close(fd)
    return data.decode("utf-8", "replace").strip() or None


def _extra_procfs_mounts() -> list[str]:
    """Host procfs mounts other than ``/proc`` (a container's ``/host/proc``…): they would show
    host processes' environments, read-only or not."""
    found = []
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                left, _, right = line.partition(" - ")
                fields = left.split()
                if len(fields) > 4 and right.split(" ", 1)[0] == "proc":
                    point = fields[4].replace("\\040", " ")
                    if point != "/proc" and not point.startswith("/proc/"):
                        found.append(point)
    except OSError:
        pass
    return found


def _expand(patterns: tuple[str, ...]) -> list[str]:
    return sorted(path for pattern in patterns for path in glob.glob(pattern))


def _account_home() -> str | None:
    """The host uid's home directory as the user database names it (``pwd``), or None."""
    try:
        return pwd.getpwuid(os.getuid()).pw_dir
    except (KeyError, OSError):
        return None


def _homes(home: str | None) -> list[str]:
    """``$HOME`` and the host uid's own home: a worker started as root with ``HOME=/app`` still
    has its credentials in ``/root``, which the sandbox (the host's uid) can read."""
    found: list[str] = []
    for candidate in (home, _account_home()):
        if candidate and os.path.isabs(candidate) and os.path.realpath(candidate) != "/":
            if candidate not in found:
                found.append(candidate)
    return found


def _mask_args(root: str, home: str | None) -> list[str]:
    paths = [*MASKED_SYSTEM_PATHS, *_expand(MASKED_SYSTEM_GLOBS), *_extra_procfs_mounts()]
    for each in _homes(home):
        paths += [os.path.join(each, rel) for rel in MASKED_HOME_PATHS]
    args: list[str] = []
    masked: set[str] = set()
    for path in paths:
        try:
            real = os.path.realpath(path)
            st = os.stat(real)
        except OSError:
            continue
        if root == real or root.startswith(real.rstrip("/") + "/"):
            continue  # masking it would hide the workspace itself
        if real in masked:
            continue  # both homes are one directory, or two names lead to one store
        masked.add(real)
        if stat_mod.S_ISDIR(st.st_mode):
            args += ["--perms", "0000", "--tmpfs", real, "--remount-ro", real]
        else:
            args += ["--ro-bind", "/dev/null", real]
    return args
